import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import Ajv2020 from "ajv/dist/2020"
import { FastCheck as fc } from "effect"
import {
  activate,
  activatePath,
  call,
  campaignId,
  creatorId,
  exchange,
  type HeaderLines,
  rawRequest,
  responseOf,
  uniqueKey,
  utf8Header,
  whoami
} from "./support/client.ts"
import { expectClientAnswer, expectEnvelope } from "./support/contract.ts"
import { countRows } from "./support/database.ts"
import {
  type CreatedTestKey,
  createKey,
  type RunningServer,
  session,
  startServer,
  tempDatabase
} from "./support/server.ts"
import { accessLog, logLines } from "./support/telemetry.ts"

const numRuns = 150

let database: string
let server: RunningServer
let writer: CreatedTestKey

beforeAll(async () => {
  database = tempDatabase()
  server = await startServer(database, { RATE_LIMIT_MAX: "1000000" })
  writer = await createKey(database)
})
afterAll(async () => {
  await server?.stop()
})

const property = <A>(arbitrary: fc.Arbitrary<A>, predicate: (value: A) => Promise<void>) =>
  fc.assert(fc.asyncProperty(arbitrary, predicate), { numRuns })

/** Sends a request and counts the activation records it created. */
const counting = async <A>(send: () => Promise<A>): Promise<{ readonly result: A; readonly created: number }> => {
  const before = countRows(database, "activations")
  const result = await send()
  return { result, created: countRows(database, "activations") - before }
}

// --- the request body ------------------------------------------------------------------

const daysInMonth = (year: number, month: number) =>
  month === 2
    ? year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28
    : [4, 6, 9, 11].includes(month)
    ? 30
    : 31

const isCalendarDate = (text: string) => {
  const match = /^(\d{4})-(\d{2})-(\d{2})$/.exec(text)
  if (match === null) return false
  const [year, month, day] = match.slice(1).map(Number) as [number, number, number]
  return month >= 1 && month <= 12 && day >= 1 && day <= daysInMonth(year, month)
}

/** Unicode text without a lone surrogate: encodeURIComponent refuses exactly those. */
const isWellFormed = (text: string): boolean => {
  try {
    encodeURIComponent(text)
    return true
  } catch {
    return false
  }
}

/** docs/integrators.md's rules for the activate body, written independently of src/. */
const isValidBody = (value: unknown): boolean => {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false
  if (!Object.keys(value).every((key) => key === "socialUsername" || key === "plannedPostAt")) return false
  const { plannedPostAt, socialUsername } = value as Record<string, unknown>
  return typeof socialUsername === "string" && socialUsername.startsWith("@") && socialUsername.length >= 2 &&
    [...socialUsername].length <= 100 && isWellFormed(socialUsername) &&
    !/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/.test(socialUsername) &&
    (plannedPostAt === undefined || plannedPostAt === null ||
      (typeof plannedPostAt === "string" && isCalendarDate(plannedPostAt) && plannedPostAt >= "2000-01-01" &&
        plannedPostAt <= "2099-12-31"))
}

const handle = fc.oneof(
  fc.string({ unit: "binary", maxLength: 110 }).map((s) => `@${s}`),
  fc.string({ unit: "binary" }),
  fc.constantFrom(
    "@",
    "@a",
    `@${"a".repeat(99)}`,
    `@${"a".repeat(100)}`,
    `@${"😀".repeat(99)}`,
    `@${"😀".repeat(100)}`
  ),
  fc.constantFrom("@\u0000", "@\ud800", "@\udfff\ud800", "@\u202e", "@\r\n", " @x", "＠x", "@a\u0000SELECT")
)

const pad = (n: number, width: number) => String(n).padStart(width, "0")
const date = fc.oneof(
  fc.tuple(fc.integer({ min: 0, max: 9999 }), fc.integer({ min: 0, max: 13 }), fc.integer({ min: 0, max: 32 }))
    .map(([y, m, d]) => `${pad(y, 4)}-${pad(m, 2)}-${pad(d, 2)}`),
  fc.constantFrom("2024-02-29", "2023-02-29", "1900-02-29", "2000-02-29", "0000-02-29", "9999-12-31", "2026-1-01"),
  fc.constantFrom("1999-12-31", "2000-01-01", "2099-12-31", "2100-01-01"),
  fc.constantFrom("2026-01-01T00:00:00Z", " 2026-01-01", "2026-01-01\n", "２０２６-01-01"),
  fc.string({ unit: "binary" })
)

const fieldName = fc.oneof(
  fc.constantFrom("socialUsername", "plannedPostAt"),
  fc.constantFrom("__proto__", "constructor", "prototype", "toString", "hasOwnProperty", "socialusername", ""),
  fc.string({ unit: "binary", maxLength: 12 })
)
const fieldValue = fc.oneof(handle, date, fc.constant(null), fc.jsonValue({ stringUnit: "binary", maxDepth: 3 }))

/** An object written field by field, so `__proto__` stays an own key and a key may repeat. */
const objectText = fc.array(fc.tuple(fieldName, fieldValue), { maxLength: 4 })
  .map((fields) => `{${fields.map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`).join(",")}}`)

const validText = fc.record({ socialUsername: handle, plannedPostAt: fc.option(date) }, {
  requiredKeys: ["socialUsername"]
})
  .map((body) => JSON.stringify(body))

const jsonText = fc.oneof(
  validText,
  objectText,
  fc.jsonValue({ stringUnit: "binary" }).map((value) => JSON.stringify(value))
)

const strictUtf8 = new TextDecoder("utf-8", { fatal: true })
const parse = (bytes: Uint8Array): { readonly json: boolean; readonly value?: unknown } => {
  try {
    return { json: true, value: JSON.parse(strictUtf8.decode(bytes)) }
  } catch {
    return { json: false }
  }
}

/** The one property every body must satisfy, whatever its bytes. */
const expectBodyAnswer = async (bytes: Uint8Array) => {
  const { created, result: answer } = await counting(() =>
    activate(server.url, { apiKey: writer.apiKey, key: uniqueKey(), rawBody: bytes })
  )
  const parsed = parse(bytes)
  if (parsed.json && isValidBody(parsed.value)) {
    const sent = parsed.value as { socialUsername: string; plannedPostAt?: string | null }
    expect(answer.status).toBe(200)
    expect(answer.json.activation.socialUsername).toBe(sent.socialUsername)
    expect(answer.json.activation.plannedPostAt).toBe(sent.plannedPostAt ?? null)
  } else {
    expectEnvelope(answer, 400, parsed.json ? "VALIDATION_ERROR" : "MALFORMED_JSON")
  }
  expect(created).toBe(answer.status === 200 ? 1 : 0)
}

const encoder = new TextEncoder()

describe("socialUsername: the document's rule is the server's", () => {
  it("accepts exactly the handles the OpenAPI document's schema allows", async () => {
    const document = (await call(server.url, { path: "/openapi.json" })).json
    const ajv = new Ajv2020({ strict: false })
    const rule = ajv.compile(document.components.schemas.ActivateRequest.properties.socialUsername)
    const handles = fc.oneof(
      handle,
      fc.string({ unit: "grapheme", maxLength: 8 }).map((s) => `@${s}`),
      fc.constantFrom(
        "@\n",
        "@\r\n",
        "@\u2028",
        "@\u2029",
        "@\u0000",
        "@\t",
        "@\u0085",
        "@\ud800",
        "@\u00a0x",
        "@\u200bx",
        "@a b"
      )
    )
    await property(handles, async (socialUsername) => {
      const answer = await activate(server.url, { apiKey: writer.apiKey, key: uniqueKey(), body: { socialUsername } })
      expect({ socialUsername, accepted: answer.status === 200 }).toEqual({
        socialUsername,
        accepted: rule(socialUsername)
      })
      if (answer.status !== 200) expectEnvelope(answer, 400, "VALIDATION_ERROR")
    })
  })
})

describe("Idempotency-Key: the document's rule is the server's", () => {
  it("refuses exactly the keys the OpenAPI document's pattern does not allow", async () => {
    const document = (await call(server.url, { path: "/openapi.json" })).json
    const parameter = Object.values<any>(document.paths).flatMap((methods) => Object.values<any>(methods))
      .flatMap((operation) => operation.parameters ?? []).find((p: any) => p.name === "Idempotency-Key")
    const rule = new Ajv2020({ strict: false }).compile(parameter.schema)
    // A brand of its own: the keys drawn here must not collide with the other tests' keys.
    const own = await createKey(database)
    // Header bytes as Latin-1: visible ASCII, quotes, backslashes, inner spaces and tabs, and a few bytes above 0x7f.
    const unit = fc.constantFrom(..."ab~!#Z09\"\\ \t\u0080\u00ff\u00e4".split(""))
    const keys = fc.oneof(
      fc.string({ unit, minLength: 1, maxLength: 6 }),
      fc.string({ unit, minLength: 1, maxLength: 6 }).map((s) => `"${s}"`),
      fc.constantFrom("x".repeat(255), "x".repeat(256), `"${"x".repeat(255)}"`, `"${"x".repeat(256)}"`, "\u0080!")
    ).filter((key) => key.trim() === key && key !== "\"\"")
    await property(keys, async (key) => {
      const request = rawRequest("POST", activatePath(), [
        ["authorization", `Bearer ${own.apiKey}`],
        ["content-type", "application/json"],
        ["idempotency-key", key]
      ], JSON.stringify({ socialUsername: "@rule" }))
      const answer = responseOf(await exchange(server.url, request))
      const refused = answer.status === 400 && answer.json?.code === "VALIDATION_ERROR"
      expect({ key, accepted: !refused }).toEqual({ key, accepted: rule(key) })
    })
  })
})

describe("hostile bodies", () => {
  it("answers any JSON body with 200 exactly when it is valid, otherwise a 400 envelope, and creates a record only for a 200", () =>
    property(jsonText, (text) => expectBodyAnswer(encoder.encode(text))))

  const invalidUtf8 = fc.constantFrom(
    [0xff],
    [0xc3, 0x28],
    [0xc0, 0xaf],
    [0xe0, 0x80, 0xaf],
    [0xed, 0xa0, 0x80],
    [0xf4, 0x90, 0x80, 0x80],
    [0xf0, 0x9f, 0x98],
    [0x80]
  )
  const corrupted = fc.tuple(validText, invalidUtf8, fc.nat()).map(([text, bad, at]) => {
    const bytes = [...encoder.encode(text)]
    bytes.splice(at % (bytes.length + 1), 0, ...bad)
    return new Uint8Array(bytes)
  })

  it("answers any byte sequence (invalid UTF-8, truncated, random) with 200 only when it is a valid JSON body, otherwise a 400 envelope", () =>
    property(
      fc.oneof(
        corrupted,
        fc.uint8Array({ maxLength: 64 }),
        validText.chain((text) => fc.nat(text.length).map((n) => encoder.encode(text.slice(0, n))))
      ),
      expectBodyAnswer
    ))

  const nested = (depth: number, open: string, close: string, inner = "") =>
    `${open.repeat(depth)}${inner}${close.repeat(depth)}`

  it.each([
    ["10 000 unclosed [", "[".repeat(10_000)],
    ["8 000 nested arrays", nested(8_000, "[", "]")],
    ["5 000 nested arrays as socialUsername", `{"socialUsername":${nested(5_000, "[", "]")}}`],
    ["2 700 nested objects", nested(2_700, "{\"a\":", "}", "1")],
    ["a 15 000-digit number", "9".repeat(15_000)],
    ["1e999999 as plannedPostAt", "{\"socialUsername\":\"@x\",\"plannedPostAt\":1e999999}"],
    ["-1e-999999 as an extra field", "{\"socialUsername\":\"@x\",\"n\":-1e-999999}"],
    ["__proto__ carrying socialUsername", "{\"__proto__\":{\"socialUsername\":\"@proto\"}}"],
    ["__proto__ beside a valid field", "{\"socialUsername\":\"@x\",\"__proto__\":{\"isAdmin\":true}}"],
    ["constructor.prototype", "{\"socialUsername\":\"@x\",\"constructor\":{\"prototype\":{\"polluted\":true}}}"],
    ["a BOM before the JSON", "\ufeff{\"socialUsername\":\"@x\"}"],
    ["JSON with a NUL after it", "{\"socialUsername\":\"@x\"}\u0000"],
    ["two JSON values", "{\"socialUsername\":\"@x\"}{\"socialUsername\":\"@y\"}"],
    ["only whitespace", " \t\r\n"],
    ["empty", ""]
  ])(
    "answers a body of %s per the contract, without a record for an invalid one",
    (_, text) => expectBodyAnswer(encoder.encode(text))
  )

  it("is not polluted by a __proto__ or constructor body: an empty object stays invalid afterwards", async () => {
    for (
      const text of [
        "{\"__proto__\":{\"socialUsername\":\"@proto\"}}",
        "{\"constructor\":{\"prototype\":{\"socialUsername\":\"@c\"}}}"
      ]
    ) {
      await activate(server.url, { apiKey: writer.apiKey, key: uniqueKey(), rawBody: text })
    }
    const empty = await activate(server.url, { apiKey: writer.apiKey, key: uniqueKey(), rawBody: "{}" })
    expectEnvelope(empty, 400, "VALIDATION_ERROR")
    expect(empty.json.message).toBe("socialUsername is required.")
  })
})

// --- headers ---------------------------------------------------------------------------

const whoamiWith = (headers: HeaderLines) => exchange(server.url, rawRequest("GET", "/v1/whoami", headers))

const activateWith = (headers: HeaderLines) =>
  exchange(
    server.url,
    rawRequest(
      "POST",
      activatePath(),
      [["authorization", `Bearer ${writer.apiKey}`], ["content-type", "application/json"], ...headers],
      JSON.stringify({ socialUsername: "@header" })
    )
  )

/** Text for a header value: any code point but the control characters HTTP forbids there, as UTF-8 bytes. */
const headerText = (constraints: fc.StringConstraints) =>
  fc.string({ unit: "binary", ...constraints }).filter((s) => !/[\x00-\x08\x0a-\x1f]/.test(s)).map(utf8Header)

/** What an HTTP/1.1 parser removes from around a field value. */
const trimOws = (value: string) => value.replace(/^[ \t]+|[ \t]+$/g, "")

describe("hostile headers", () => {
  it("accepts exactly `Bearer <key>` (any case, spaces) and answers every other Authorization form 401 with the envelope", () => {
    const key = writer.apiKey
    const token = fc.oneof(
      fc.constantFrom(
        key,
        key.toUpperCase(),
        `${key},${key}`,
        `${key}, ${key}`,
        `${key}x`,
        key.slice(0, -1),
        `"${key}"`
      ),
      fc.constantFrom(key.split("_").slice(0, 2).join("_"), `cak_${"0".repeat(16)}_${key.split("_")[2]}`, ""),
      fc.string({ unit: "grapheme-ascii" }),
      headerText({})
    )
    const authorization = fc.record({
      scheme: fc.constantFrom("Bearer", "bearer", "BEARER", "bEaReR", "Basic", "Token", "Bearer:", ""),
      separator: fc.constantFrom(" ", "  ", "\t", "", " \t "),
      token,
      trailing: fc.constantFrom("", " ", "\t"),
      repeated: fc.boolean()
    })
    return property(authorization, async ({ repeated, scheme, separator, token, trailing }) => {
      const value = `${scheme}${separator}${token}${trailing}`
      const headers: Array<[string, string]> = [["authorization", value]]
      if (repeated) headers.push(["authorization", value])
      const response = responseOf(await whoamiWith(headers))
      const valid = !repeated && /^bearer +(.*)$/i.exec(trimOws(value))?.[1] === key
      if (valid) expect(response.status).toBe(200)
      else expectEnvelope(response, 401, "UNAUTHORIZED")
    })
  })

  /** docs/integrators.md, Idempotency: 1 to 255 visible ASCII characters; a double-quoted value (RFC 9651 string) is unquoted first. */
  const idempotencyKeyOutcome = (raw: string): "missing" | "invalid" | "valid" => {
    const value = trimOws(raw)
    if (value === "" || value === "\"\"") return "missing"
    if (!value.startsWith("\"")) return /^[\x21-\x7e]{1,255}$/.test(value) ? "valid" : "invalid"
    const quoted = /^"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"$/.exec(value)
    if (quoted === null) return "invalid"
    return /^[\x21-\x7e]{1,255}$/.test(quoted[1]!.replace(/\\(["\\])/g, "$1")) ? "valid" : "invalid"
  }

  it("answers every Idempotency-Key value, repeated or not, with 200 when valid, else 400 IDEMPOTENCY_KEY_REQUIRED or VALIDATION_ERROR, and creates no record for a refused one", () => {
    const sfEscape = (s: string) => s.replace(/["\\]/g, "\\$&")
    const value = fc.oneof(
      fc.string({ unit: "grapheme-ascii", maxLength: 20 }),
      fc.string({ unit: "grapheme-ascii", maxLength: 20 }).map((s) => `"${s}"`),
      fc.string({ unit: "grapheme-ascii", maxLength: 20 }).map((s) => `"${sfEscape(s)}"`),
      fc.string({ unit: "grapheme-ascii", maxLength: 20 }).map((s) => `"${s}`),
      headerText({ minLength: 1, maxLength: 8 }),
      fc.string({ unit: fc.constantFrom("a", " ", "\t", "\\", "\"", "\x7f"), maxLength: 8 }),
      fc.constantFrom("a".repeat(255), "a".repeat(256), `"${"a".repeat(255)}"`, `"${"a".repeat(256)}"`),
      fc.constantFrom("\"\"", "\"", "\\\"", "\" \"", "\"a\\\"b\"", "\"a\\b\"", "\"a\" \"b\"")
    )
    return property(
      fc.tuple(value, fc.option(fc.string({ unit: "grapheme-ascii", minLength: 1, maxLength: 8 }))),
      async ([first, second]) => {
        const headers: Array<[string, string]> = [["idempotency-key", first]]
        if (second !== null) headers.push(["idempotency-key", second])
        const { created, result } = await counting(() => activateWith(headers))
        const response = responseOf(result)
        // RFC 9110 section 5.3: repeated field lines are one value joined with ", ".
        const outcome = idempotencyKeyOutcome(second === null ? first : `${first}, ${second}`)
        if (outcome === "valid") expect(response.status).toBe(200)
        else expectEnvelope(response, 400, outcome === "missing" ? "IDEMPOTENCY_KEY_REQUIRED" : "VALIDATION_ERROR")
        expect(created).toBe(response.status === 200 && response.headers["idempotent-replayed"] !== "true" ? 1 : 0)
      }
    )
  })

  it("answers header values just under Bun's header limit with the envelope", async () => {
    expectEnvelope(
      responseOf(await whoamiWith([["authorization", `Bearer ${"a".repeat(12 * 1024)}`]])),
      401,
      "UNAUTHORIZED"
    )
    expectEnvelope(
      responseOf(await activateWith([["idempotency-key", "a".repeat(12 * 1024)]])),
      400,
      "VALIDATION_ERROR"
    )
  })

  it("answers a 64 KiB Authorization or Idempotency-Key with Bun's own 431 and a closed connection, and keeps serving", async () => {
    for (
      const outcome of [
        await whoamiWith([["authorization", `Bearer ${"a".repeat(64 * 1024)}`]]),
        await activateWith([["idempotency-key", "a".repeat(64 * 1024)]])
      ]
    ) {
      const response = responseOf(outcome)
      expect(response.status).toBe(431)
      expect(response.headers.connection).toBe("close")
    }
    expect((await whoami(server.url, writer.apiKey)).status).toBe(200)
  })

  it("answers control characters in a header value with Bun's own 400, never a 5xx, and keeps serving", async () => {
    for (const control of ["\x00", "\x01", "\x0b", "\x1b", "\r"]) {
      const outcome = await activateWith([["idempotency-key", `a${control}b`]])
      if (outcome._tag === "Answered") expect(outcome.response.status).toBe(400)
      else expect(outcome._tag).toBe("Closed")
    }
    expect((await whoami(server.url, writer.apiKey)).status).toBe(200)
  })
})

// --- paths and methods -----------------------------------------------------------------

describe("hostile paths", () => {
  const methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "PROPFIND", "PURGE", "QUERY"]
  const segment = fc.oneof(
    fc.constantFrom("v1", "whoami", "creators", "campaigns", "activate", creatorId, campaignId, "V1", "WHOAMI"),
    fc.constantFrom("..", ".", "", "%2e%2e", "%2F", "%00", "%ff", "%zz", "%", "%E0%A4%A", "%C0%AF", ";", "~", "@"),
    fc.string({ unit: "binary", maxLength: 6 }).map(encodeURIComponent),
    fc.stringMatching(/^[A-Za-z0-9\-._~!$&'()*+,;=:@%]{0,12}$/)
  )
  const path = fc.tuple(
    fc.oneof(
      fc.array(segment, { minLength: 1, maxLength: 7 }).map((segments) => `/${segments.join("/")}`),
      fc.array(segment, { minLength: 1, maxLength: 3 }).map((segments) => `/v1/${segments.join("/")}`),
      fc.tuple(segment, segment).map(([creator, campaign]) => activatePath(creator, campaign))
    ),
    fc.constantFrom("", "?", "?a=%ff", "#x")
  ).map(([route, suffix]) => `${route}${suffix}`)

  it("answers any path and method with 404, 405 (never naming the method sent as allowed) or another envelope, never a 5xx", () =>
    property(fc.tuple(fc.constantFrom(...methods), path), async ([method, target]) => {
      const outcome = await exchange(
        server.url,
        rawRequest(method, target, [["authorization", `Bearer ${writer.apiKey}`], ["content-length", "0"]]),
        { bodyless: method === "HEAD" }
      )
      const response = responseOf(outcome)
      expect(response.status).toBeLessThan(500)
      if (response.status === 405) {
        expect(response.headers.allow?.split(", ") ?? [], `Allow for ${method} ${target}`).not.toContain(method)
      }
      if (method !== "HEAD") expectClientAnswer(response)
    }))

  it("answers a path id the router cannot decode (bad percent-encoding, a `;`) with 400 VALIDATION_ERROR or 404, not 405", async () => {
    for (const bad of ["%", "%zz", "%ff%fe", "%C0%AF", "a;b"]) {
      const response = responseOf(
        await exchange(
          server.url,
          rawRequest("POST", activatePath(bad), [
            ["authorization", `Bearer ${writer.apiKey}`],
            ["idempotency-key", uniqueKey()],
            ["content-type", "application/json"]
          ], JSON.stringify({ socialUsername: "@path" }))
        )
      )
      expect([400, 404], `POST ${activatePath(bad)} answered ${response.status}: ${response.body}`).toContain(
        response.status
      )
      expectClientAnswer(response)
    }
  })

  it("answers an 8 KiB path with a 404 envelope and a 100 KiB one with Bun's 431, and keeps serving", async () => {
    expectEnvelope(
      responseOf(await exchange(server.url, rawRequest("GET", `/v1/${"a".repeat(8 * 1024)}`, []))),
      404,
      "NOT_FOUND"
    )
    expect(responseOf(await exchange(server.url, rawRequest("GET", `/v1/${"a".repeat(100 * 1024)}`, []))).status).toBe(
      431
    )
    expect((await whoami(server.url, writer.apiKey)).status).toBe(200)
  })

  it("closes the connection on a method Bun does not parse, never hangs, and keeps serving", async () => {
    for (const method of ["FOO", "get", "X".repeat(40)]) {
      const outcome = await exchange(
        server.url,
        rawRequest(method, "/v1/whoami", [["authorization", `Bearer ${writer.apiKey}`]])
      )
      expect(outcome._tag === "Closed" || (outcome._tag === "Answered" && outcome.response.status < 500)).toBe(true)
    }
    expect((await whoami(server.url, writer.apiKey)).status).toBe(200)
  })
})

describe("claimed client addresses (docs/operators.md, Deployment: Behind a reverse proxy)", () => {
  const badKey = `cak_${"b".repeat(16)}_${"0".repeat(64)}`

  it("never logs or tallies an address with a zone id, or longer than an address is: the trusted proxy is named instead", async () => {
    const claimed = ["fe80::1%eth0", `fe80::1%${"Z".repeat(12_000)}`, `fe80::1%${"Z".repeat(12_000)}`, "203.0.113.9"]
    const { result, stderr } = await session(tempDatabase(), { TRUSTED_PROXIES: "127.0.0.1" }, async (url) => {
      const statuses = []
      for (const address of claimed) {
        const refused = await call(url, { path: "/v1/whoami", apiKey: badKey, headers: { "x-forwarded-for": address } })
        statuses.push(refused.status)
      }
      return statuses
    })
    expect(result).toEqual([401, 401, 401, 401])
    expect(accessLog(stderr).map((line) => line.clientAddress)).toEqual(["127.0.0.1", "203.0.113.9"])
    const summaries = logLines(stderr).filter((line) => line.message === "repeated unauthorized requests")
    expect(summaries.map((line) => line.annotations)).toEqual([
      expect.objectContaining({ clientAddress: "127.0.0.1", count: 2 })
    ])
    expect(stderr).not.toContain("fe80::1%")
  })

  it("with TRUSTED_PROXY_HEADER=Forwarded reads the client from Forwarded alone: an X-Forwarded-For is the client's own", async () => {
    const { stderr } = await session(
      tempDatabase(),
      { TRUSTED_PROXIES: "127.0.0.1", TRUSTED_PROXY_HEADER: "Forwarded" },
      async (url) => {
        for (
          const headers of [
            { "x-forwarded-for": "6.6.6.6", forwarded: "for=203.0.113.9" },
            { "x-forwarded-for": "198.51.100.7" }
          ]
        ) expect((await call(url, { path: "/healthz", headers })).status).toBe(200)
      }
    )
    expect(accessLog(stderr).map((line) => line.clientAddress)).toEqual(["203.0.113.9", "127.0.0.1"])
  })
})
