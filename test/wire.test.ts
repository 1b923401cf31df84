/**
 * The HTTP layer byte for byte (docs/integrators.md: the HTTP reference): `Host`, the
 * documents' validators per content coding, the media type, charset and coding of a body, a
 * leading byte order mark, the documents as operations of the OpenAPI document, and each request
 * Bun's parser answers itself, each sent as raw bytes on a socket of its own.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import addFormats from "ajv-formats"
import Ajv2020 from "ajv/dist/2020"
import { createHash } from "node:crypto"
import { brotliDecompressSync, gunzipSync, gzipSync } from "node:zlib"
import { activatePath, call, openConnection, type RawOutcome, type RawResponse, uniqueKey } from "./support/client.ts"
import { expectEnvelope } from "./support/contract.ts"
import { countRows, orphans } from "./support/database.ts"
import { type CreatedTestKey, createKey, type RunningServer, startServer, tempDatabase } from "./support/server.ts"

type Json = Record<string, any>

let database: string
let server: RunningServer
let writer: CreatedTestKey
let reader: CreatedTestKey
let host: string
let document: Json

beforeAll(async () => {
  database = tempDatabase()
  server = await startServer(database, { RATE_LIMIT_MAX: "1000000" })
  writer = await createKey(database)
  reader = await createKey(database, { scopes: ["campaigns:read"] })
  host = new URL(server.url).host
  document = (await call(server.url, { path: "/openapi.json" })).json
})
afterAll(async () => {
  await server?.stop()
})

/** A request exactly as written: its request line, its header lines (no Host unless given), its body. */
const request = (requestLine: string, headers: ReadonlyArray<string>, body: string | Uint8Array = "") =>
  new Uint8Array(Buffer.concat([
    Buffer.from([requestLine, ...headers, "", ""].join("\r\n"), "latin1"),
    typeof body === "string" ? Buffer.from(body, "latin1") : body
  ]))

/**
 * The outcome of `bytes` on a fresh connection; with `closing`, whether the server closed it
 * after answering (waited for: a connection kept open is not closed within the wait).
 */
const send = async (bytes: Uint8Array, { closing = false }: { readonly closing?: boolean } = {}) => {
  const connection = await openConnection(server.url)
  try {
    connection.send(bytes)
    const outcome = await connection.next()
    const after = outcome._tag === "Answered" && closing ? await connection.next({ timeoutMs: 2_000 }) : outcome
    return { outcome, closed: after._tag === "Closed" || after._tag === "Reset" }
  } finally {
    connection.destroy()
  }
}

const answered = (outcome: RawOutcome): RawResponse => {
  if (outcome._tag !== "Answered") throw new Error(`expected an answer, the connection ${outcome._tag}`)
  return outcome.response
}

const body = JSON.stringify({ socialUsername: "@wire" })

const nameOf = (line: string) => line.split(":")[0]!.trim().toLowerCase()

/**
 * Activate's header lines: Host, a writer's key, an Idempotency-Key and `Content-Type:
 * application/json`, each line of `extra` in place of the one of its name, or after them.
 */
const activateHeaders = (extra: ReadonlyArray<string>, key = uniqueKey()) => [
  ...[
    `Host: ${host}`,
    `Authorization: Bearer ${writer.apiKey}`,
    `Idempotency-Key: ${key}`,
    "Content-Type: application/json"
  ].filter((line) => !extra.some((given) => nameOf(given) === nameOf(line))),
  ...extra
]

/** The rows a send created. */
const creating = async <A>(send: () => Promise<A>) => {
  const before = countRows(database, "activations")
  const result = await send()
  return { result, created: countRows(database, "activations") - before }
}

describe("Host (RFC 9112 §3.2; docs/integrators.md, Errors)", () => {
  const whoamiWith = (hostLines: ReadonlyArray<string>, version = "1.1") =>
    send(request(`GET /v1/whoami HTTP/${version}`, [...hostLines, `Authorization: Bearer ${reader.apiKey}`]))

  it("answers a Host given twice, or one that is not a host[:port], with 400 VALIDATION_ERROR and the envelope", async () => {
    const repeated = answered((await whoamiWith([`Host: ${host}`, `Host: ${host}`])).outcome)
    expectEnvelope(repeated, 400, "VALIDATION_ERROR")
    expect(repeated.json.message).toBe("Host is given more than once; send it once, as host[:port].")
    expect(repeated.headers["x-request-id"]).toMatch(/^[0-9a-f-]{36}$/)
    for (
      const value of ["a b", "", "a/b", "user@a", "a:port", "a:65536", "a:123456", "[::1", "[zz::1]", "a%zz", "a\tb"]
    ) {
      const refused = answered((await whoamiWith([`Host: ${value}`])).outcome)
      expectEnvelope(refused, 400, "VALIDATION_ERROR")
      expect({ value, message: refused.json.message }).toEqual({
        value,
        message: value === "" || !value.includes(", ")
          ? "Host is not a host[:port]; send it as host[:port]."
          : "Host is given more than once; send it once, as host[:port]."
      })
    }
  })

  it("takes every form of host[:port]: a name, IPv4, IPv6 and future literals, a port or an empty one", async () => {
    for (
      const value of [
        host,
        "localhost",
        "api.example.com:443",
        "xn--bcher-kva.example",
        "127.0.0.1:3000",
        "[::1]",
        "[::1]:3000",
        "[v1.fe80::a+en1]",
        "example.com:",
        "a%20b",
        "sub_domain.example~x"
      ]
    ) {
      expect({ value, status: answered((await whoamiWith([`Host: ${value}`])).outcome).status }).toEqual({
        value,
        status: 200
      })
    }
  })

  it("answers HTTP/1.0 without Host with the envelope, and with one as any request", async () => {
    const without = answered((await whoamiWith([], "1.0")).outcome)
    expectEnvelope(without, 400, "VALIDATION_ERROR")
    expect(without.json.message).toBe("The request has no Host header; send Host: host[:port].")
    expect(answered((await whoamiWith([`Host: ${host}`], "1.0")).outcome).status).toBe(200)
  })

  it("leaves HTTP/1.1 without Host to Bun: a bare 400 that closes the connection", async () => {
    const { closed, outcome } = await send(
      request("GET /v1/whoami HTTP/1.1", [`Authorization: Bearer ${reader.apiKey}`]),
      { closing: true }
    )
    expect(answered(outcome)).toEqual({ status: 400, headers: { connection: "close" }, body: "", json: undefined })
    expect(closed).toBe(true)
  })

  it("is checked before the route, the key and the body: a refused Host runs nothing", async () => {
    const bad = "Host: a b"
    const answers = [
      await send(request("GET /v1/nope HTTP/1.1", [bad])),
      await send(request("DELETE /v1/whoami HTTP/1.1", [bad])),
      await send(request("GET /v1/whoami HTTP/1.1", [bad])),
      await send(request("GET /v1/whoami HTTP/1.1", [bad, "Authorization: Bearer nope"]))
    ].map(({ outcome }) => answered(outcome))
    for (const answer of answers) expectEnvelope(answer, 400, "VALIDATION_ERROR")
    const { created, result } = await creating(() =>
      send(request(`POST ${activatePath()} HTTP/1.1`, activateHeaders([bad, `Content-Length: ${body.length}`]), body))
    )
    expectEnvelope(answered(result.outcome), 400, "VALIDATION_ERROR")
    expect(created).toBe(0)
  })
})

describe("the documents' validators, one per content coding (RFC 9110 §8.8.3)", () => {
  /** The bytes as sent, not decompressed; the plain form unless `headers` ask for another. */
  const get = async (path: string, headers: Record<string, string> = {}) => {
    const response = await fetch(`${server.url}${path}`, {
      headers: { "accept-encoding": "identity", ...headers },
      decompress: false
    } as RequestInit)
    return { status: response.status, headers: response.headers, bytes: new Uint8Array(await response.arrayBuffer()) }
  }
  const digest = (bytes: Uint8Array) => `"${createHash("sha256").update(bytes).digest("base64url").slice(0, 27)}"`

  const scriptPath = async () => {
    const html = new TextDecoder().decode((await get("/docs")).bytes)
    return /<script src="(\/docs\/scalar\.[\w-]+\.js)"><\/script>/.exec(html)![1]!
  }

  it("gives the plain, gzip and br forms of each document their own strong ETag, the digest of their own bytes", async () => {
    for (const path of ["/openapi.json", "/docs", await scriptPath()]) {
      const plain = await get(path)
      const gzip = await get(path, { "accept-encoding": "gzip" })
      const brotli = await get(path, { "accept-encoding": "br" })
      const forms = [plain, gzip, brotli].filter((form, i, all) =>
        all.findIndex((other) => other.headers.get("content-encoding") === form.headers.get("content-encoding")) === i
      )
      // The script in all three; the page and the document have no br form.
      expect(forms.length, path).toBe(path.endsWith(".js") ? 3 : 2)
      for (const form of forms) {
        expect(form.status).toBe(200)
        expect(form.headers.get("vary")).toBe("accept-encoding")
        expect(form.headers.get("etag"), `${path} ${form.headers.get("content-encoding")}`).toBe(digest(form.bytes))
      }
      expect(new Set(forms.map((form) => form.headers.get("etag"))).size).toBe(forms.length)
      expect(gunzipSync(gzip.bytes).equals(Buffer.from(plain.bytes))).toBe(true)
      if (path.endsWith(".js")) expect(brotliDecompressSync(brotli.bytes).equals(Buffer.from(plain.bytes))).toBe(true)
    }
  })

  it("answers 304 only for the tag of the form it would send, weakly compared: another form's tag gets that form whole", async () => {
    for (const path of ["/openapi.json", "/docs"]) {
      const plainTag = (await get(path)).headers.get("etag")!
      const gzipTag = (await get(path, { "accept-encoding": "gzip" })).headers.get("etag")!
      const cases: ReadonlyArray<readonly [Record<string, string>, number, string]> = [
        [{ "if-none-match": plainTag }, 304, plainTag],
        [{ "if-none-match": `W/${plainTag}` }, 304, plainTag],
        [{ "if-none-match": gzipTag }, 200, plainTag],
        [{ "if-none-match": plainTag, "accept-encoding": "gzip" }, 200, gzipTag],
        [{ "if-none-match": gzipTag, "accept-encoding": "gzip" }, 304, gzipTag],
        [{ "if-none-match": `W/${gzipTag}`, "accept-encoding": "gzip, br" }, 304, gzipTag],
        [{ "if-none-match": `"other", ${gzipTag}`, "accept-encoding": "gzip" }, 304, gzipTag],
        [{ "if-none-match": "*", "accept-encoding": "gzip" }, 304, gzipTag]
      ]
      for (const [headers, status, etag] of cases) {
        const answer = await get(path, headers)
        expect({ path, headers, status: answer.status, etag: answer.headers.get("etag") }).toEqual({
          path,
          headers,
          status,
          etag
        })
        expect(answer.headers.get("vary")).toBe("accept-encoding")
        if (status === 304) expect(answer.bytes.length).toBe(0)
      }
    }
  })
})

describe("a request body's media type, charset and coding (docs/integrators.md, Errors)", () => {
  const activateWith = (extra: ReadonlyArray<string>, payload: string | Uint8Array) => {
    const bytes = typeof payload === "string" ? Buffer.from(payload, "utf8") : payload
    return creating(async () =>
      answered(
        (await send(request(
          `POST ${activatePath()} HTTP/1.1`,
          activateHeaders([...extra, `Content-Length: ${bytes.length}`]),
          bytes
        ))).outcome
      )
    )
  }

  it("refuses a body with any Content-Encoding but identity with 415, whatever it holds, and creates nothing", async () => {
    for (
      const [encoding, payload] of [
        ["gzip", gzipSync(body)],
        ["gzip", body],
        ["br", body],
        ["deflate", body],
        ["identity, gzip", body],
        ["x-custom", body]
      ] as const
    ) {
      const { created, result } = await activateWith([`Content-Encoding: ${encoding}`], payload)
      expectEnvelope(result, 415, "UNSUPPORTED_MEDIA_TYPE")
      expect(result.json.message).toBe(
        "The request body must be sent as it is, not compressed: send it without Content-Encoding."
      )
      expect(result.headers["accept-encoding"]).toBe("identity")
      expect(created).toBe(0)
    }
    for (const encoding of ["identity", "IDENTITY", " identity "]) {
      const { created, result } = await activateWith([`Content-Encoding: ${encoding}`], body)
      expect({ encoding, status: result.status, created }).toEqual({ encoding, status: 200, created: 1 })
    }
  })

  it("refuses a charset other than utf-8 with 415 (any case, quoted or not), and takes utf-8 and none", async () => {
    const latin1 = Buffer.from(JSON.stringify({ socialUsername: "@jörg" }), "latin1")
    const utf16 = Buffer.from(JSON.stringify({ socialUsername: "@jörg" }), "utf16le")
    for (
      const [contentType, payload] of [
        ["application/json; charset=iso-8859-1", latin1],
        ["application/json; charset=utf-16", utf16],
        ["application/json;charset=\"utf-16le\"", utf16],
        ["application/json; charset=utf8", Buffer.from(body)],
        ["application/json; charset=", Buffer.from(body)],
        ["application/json; charset=utf-8; charset=latin1", Buffer.from(body)]
      ] as const
    ) {
      const { created, result } = await activateWith([`Content-Type: ${contentType}`], payload)
      expectEnvelope(result, 415, "UNSUPPORTED_MEDIA_TYPE")
      expect(result.json.message).toBe(
        "The request body must be UTF-8: send Content-Type: application/json, with no charset or charset=utf-8."
      )
      expect(result.headers["accept-encoding"]).toBeUndefined()
      expect(created).toBe(0)
    }
    for (
      const contentType of [
        "application/json; charset=utf-8",
        "application/json; charset=UTF-8",
        "application/json; charset=\"utf-8\"",
        "APPLICATION/JSON;CHARSET=\"Utf-8\"",
        "application/json; version=\"a;b\"; charset=utf-8"
      ]
    ) {
      const { result } = await activateWith(
        [`Content-Type: ${contentType}`],
        JSON.stringify({ socialUsername: "@jörg" })
      )
      expect({ contentType, status: result.status, handle: result.json?.activation?.socialUsername }).toEqual({
        contentType,
        status: 200,
        handle: "@jörg"
      })
    }
  })

  it("refuses them in the order of checks: after the key, its scope and the Idempotency-Key, before the size", async () => {
    const gzip = "Content-Encoding: gzip"
    const readerAsks = await send(request(`POST ${activatePath()} HTTP/1.1`, [
      `Host: ${host}`,
      `Authorization: Bearer ${reader.apiKey}`,
      `Idempotency-Key: ${uniqueKey()}`,
      gzip,
      `Content-Length: ${body.length}`
    ], body))
    expectEnvelope(answered(readerAsks.outcome), 403, "FORBIDDEN")
    const keyless = await send(request(`POST ${activatePath()} HTTP/1.1`, [
      `Host: ${host}`,
      `Authorization: Bearer ${writer.apiKey}`,
      gzip,
      `Content-Length: ${body.length}`
    ], body))
    expectEnvelope(answered(keyless.outcome), 400, "IDEMPOTENCY_KEY_REQUIRED")
    // A length past the limit, declared: 415 all the same, without the body being read.
    const large = await send(
      request(`POST ${activatePath()} HTTP/1.1`, [...activateHeaders([gzip]), "Content-Length: 20000"])
    )
    expectEnvelope(answered(large.outcome), 415, "UNSUPPORTED_MEDIA_TYPE")
    const latin1 = await send(request(
      `POST ${activatePath()} HTTP/1.1`,
      activateHeaders(["Content-Type: application/json; charset=latin1", "Content-Length: 20000"])
    ))
    expectEnvelope(answered(latin1.outcome), 415, "UNSUPPORTED_MEDIA_TYPE")
  })
})

describe("a byte order mark before the body (RFC 8259 §8.1: a parser may ignore one)", () => {
  const bom = Buffer.from([0xef, 0xbb, 0xbf])
  const activateBytes = (payload: Uint8Array, key: string) =>
    creating(async () =>
      answered(
        (await send(request(
          `POST ${activatePath()} HTTP/1.1`,
          [...activateHeaders([], key), `Content-Length: ${payload.length}`],
          payload
        ))).outcome
      )
    )

  it("ignores one, as the document says: the same request as without it, replayed by its key", async () => {
    const key = uniqueKey()
    const first = await activateBytes(Buffer.concat([bom, Buffer.from(body)]), key)
    expect([first.result.status, first.result.json.activation.socialUsername, first.created]).toEqual([200, "@wire", 1])
    const again = await activateBytes(Buffer.from(body), key)
    expect([again.result.status, again.result.headers["idempotent-replayed"], again.created]).toEqual([
      200,
      "true",
      0
    ])
    expect(again.result.body).toBe(first.result.body)
    expect(document.info.description).toContain("a byte order mark (U+FEFF) before it is ignored")
  })

  it("refuses a second one, or UTF-16's, as not JSON", async () => {
    for (
      const payload of [
        Buffer.concat([bom, bom, Buffer.from(body)]),
        Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(body, "utf16le")])
      ]
    ) {
      const { created, result } = await activateBytes(payload, uniqueKey())
      expectEnvelope(result, 400, "MALFORMED_JSON")
      expect(created).toBe(0)
    }
  })
})

describe("the documents as operations of the OpenAPI document", () => {
  it("declares GET / and GET /openapi.json, each with its HEAD, and names /docs in the description", () => {
    expect(Object.keys(document.paths["/"]).sort()).toEqual(["get", "head"])
    expect(Object.keys(document.paths["/openapi.json"]).sort()).toEqual(["get", "head"])
    expect(document.paths["/"].get.operationId).toBe("documents.index")
    expect(document.paths["/openapi.json"].get.operationId).toBe("documents.openApi")
    expect(document.paths["/"].get.security).toEqual([])
    expect(document.info.description).toContain("`/docs`")
    expect(document.paths["/docs"]).toBeUndefined()
  })

  it("answers each as it declares: the index and the document by their schemas, with the headers they list", async () => {
    const ajv = new Ajv2020({ strict: true })
    addFormats(ajv)
    for (const [name, schema] of Object.entries<Json>(document.components.schemas)) {
      ajv.addSchema(schema, `#/components/schemas/${name}`)
    }
    for (const path of ["/", "/openapi.json"]) {
      const answer = await call(server.url, { path })
      const response = document.paths[path].get.responses["200"]
      const validate = ajv.compile(response.content["application/json"].schema)
      expect({ path, valid: validate(answer.json), errors: validate.errors ?? null }).toEqual({
        path,
        valid: true,
        errors: null
      })
      const own: Array<string> = []
      answer.headers.forEach((_, header) => {
        if (!["content-type", "content-length", "date"].includes(header)) own.push(header)
      })
      expect(Object.keys(response.headers).map((header) => header.toLowerCase())).toEqual(expect.arrayContaining(own))
    }
    const notModified = await call(server.url, {
      path: "/openapi.json",
      headers: { "if-none-match": (await call(server.url, { path: "/openapi.json" })).headers.get("etag")! }
    })
    expect(notModified.status).toBe(304)
    expect(Object.keys(document.paths["/openapi.json"].get.responses)).toContain("304")
  })

  it("says on each operation that takes a body that a body without Content-Type is read as JSON", () => {
    const withBody = Object.values<Json>(document.paths).flatMap((operations) =>
      Object.values<Json>(operations).filter((operation) => operation.requestBody !== undefined)
    )
    expect(withBody.length).toBeGreaterThan(0)
    for (const operation of withBody) {
      expect(operation.description, operation.operationId).toContain("A body without `Content-Type` is read as JSON")
      expect(operation.responses["415"].description, operation.operationId).toContain(
        "a `Content-Encoding` other than `identity`"
      )
    }
  })

  it("keeps each HEAD in the document, marked for the docs page to leave out, and opens with authentication and the first call", () => {
    const heads = Object.values<Json>(document.paths).flatMap((operations) =>
      operations.head === undefined ? [] : [operations.head]
    )
    expect(heads.length).toBe(Object.values<Json>(document.paths).filter((operations) => operations.get).length)
    for (const head of heads) expect(head["x-scalar-ignore"], head.operationId).toBe(true)
    const gets = Object.values<Json>(document.paths).flatMap((operations) => operations.get ? [operations.get] : [])
    for (const get of gets) expect(get["x-scalar-ignore"], get.operationId).toBeUndefined()
    const headings = [...String(document.info.description).matchAll(/^## (.+)$/gm)].map((match) => match[1])
    expect(headings.slice(0, 2)).toEqual(["Authentication", "The first call"])
    expect(document.info.description).toContain("curl -i \"$API_URL/v1/whoami\" -H \"Authorization: Bearer $API_KEY\"")
  })
})

describe("a client that goes away", () => {
  it("and sends the same activation again at once gets one record, and its stored answer", async () => {
    const trials = 30
    const { created } = await creating(async () => {
      for (let trial = 0; trial < trials; trial++) {
        const key = uniqueKey()
        const bytes = request(
          `POST ${activatePath()} HTTP/1.1`,
          activateHeaders([`Content-Length: ${body.length}`], key),
          body
        )
        const gone = await openConnection(server.url)
        gone.send(bytes)
        // Gone at once or a few milliseconds in: before, during or after the commit of its record.
        await Bun.sleep(trial % 5)
        gone.destroy()
        const retried = answered((await send(bytes)).outcome)
        expect(retried.status).toBe(200)
      }
    })
    expect(created).toBe(trials)
    expect(orphans(database)).toEqual({ activations: 0, idempotencyKeys: 0 })
  })
})

describe("what Bun answers itself (docs/integrators.md: the HTTP reference)", () => {
  /** Exactly Bun's own answer: a status line and `Connection: close`, nothing else, and the connection closed. */
  const expectBare = async (bytes: Uint8Array, status: number) => {
    const { closed, outcome } = await send(bytes, { closing: true })
    expect(answered(outcome)).toEqual({ status, headers: { connection: "close" }, body: "", json: undefined })
    expect(closed).toBe(true)
  }

  const post = (headers: ReadonlyArray<string>, payload: string, version = "1.1", key = uniqueKey()) =>
    request(`POST ${activatePath()} HTTP/${version}`, activateHeaders(headers, key), payload)
  const chunked = (tail: string) => `${body.length.toString(16)}\r\n${body}\r\n${tail}`

  /** Each framing Bun refuses, as the document's description names it, with its bytes. */
  const framings = (): ReadonlyArray<{ readonly said: string; readonly bytes: Uint8Array }> => [
    { said: "`-1`", bytes: post(["Content-Length: -1"], body) },
    { said: "`+24`", bytes: post([`Content-Length: +${body.length}`], body) },
    { said: "`0x18`", bytes: post([`Content-Length: 0x${body.length.toString(16)}`], body) },
    { said: "`24, 24`", bytes: post([`Content-Length: ${body.length}, ${body.length}`], body) },
    {
      said: "two different lengths",
      bytes: post([`Content-Length: ${body.length}`, `Content-Length: ${body.length - 1}`], body)
    },
    { said: "19 digits or more", bytes: post([`Content-Length: ${String(body.length).padStart(19, "0")}`], body) },
    { said: "19 digits or more", bytes: post([`Content-Length: ${"9".repeat(20)}`], body) },
    {
      said: "both `Content-Length` and `Transfer-Encoding`",
      bytes: post([`Content-Length: ${body.length}`, "Transfer-Encoding: chunked"], chunked("0\r\n\r\n"))
    },
    { said: "a `Transfer-Encoding` other than `chunked`", bytes: post(["Transfer-Encoding: gzip"], body) },
    {
      said: "a `Transfer-Encoding` other than `chunked`",
      bytes: post(["Transfer-Encoding: gzip, chunked"], chunked("0\r\n\r\n"))
    },
    { said: "not one decimal number", bytes: post(["Content-Length: "], body) },
    { said: "not one decimal number", bytes: post([`Content-Length: ${body.length - 10} 10`], body) },
    { said: "chunked on HTTP/1.0", bytes: post(["Transfer-Encoding: chunked"], chunked("0\r\n\r\n"), "1.0") },
    { said: "`Transfer-Encoding : chunked`", bytes: post(["Transfer-Encoding : chunked"], chunked("0\r\n\r\n")) },
    { said: "a chunk size that is not hexadecimal (`zz`)", bytes: post(["Transfer-Encoding: chunked"], "zz\r\nab\r\n") }
  ]

  it("answers each malformed framing of a body with a bare 400 and a closed connection, and creates nothing", async () => {
    for (const { bytes, said } of framings()) {
      expect(document.info.description, said).toContain(said)
      const { created } = await creating(() => expectBare(bytes, 400))
      expect({ said, created }).toEqual({ said, created: 0 })
    }
  })

  it("answers a chunked body with trailer fields with a bare 400: the same request again with its key answers it", async () => {
    expect(document.info.description).toContain("a chunked body with trailer fields")
    const key = uniqueKey()
    const { created } = await creating(async () => {
      await expectBare(post(["Transfer-Encoding: chunked"], chunked("0\r\nX-Checksum: 1\r\n\r\n"), "1.1", key), 400)
      // Bun handed the request on with the body up to its last chunk: whether it ran, its key says.
      const again = answered(
        (await send(post(["Transfer-Encoding: chunked"], chunked("0\r\n\r\n"), "1.1", key))).outcome
      )
      expect(again.status).toBe(200)
      expect(again.json.activation.socialUsername).toBe("@wire")
    })
    expect(created).toBe(1)
  })

  it("answers an HTTP/1.1 request without Host and a length of 2^59 or more bare, a length from 2^53 with the 413 envelope", async () => {
    expect(document.info.description).toContain("an HTTP/1.1 request without `Host`")
    await expectBare(request("GET /v1/whoami HTTP/1.1", [`Authorization: Bearer ${reader.apiKey}`]), 400)
    await expectBare(post([`Content-Length: ${2n ** 59n}`], body), 400)
    for (const length of [2n ** 53n, 2n ** 59n - 1n]) {
      const { closed, outcome } = await send(post([`Content-Length: ${length}`], body), { closing: true })
      expectEnvelope(answered(outcome), 413, "PAYLOAD_TOO_LARGE")
      expect(closed).toBe(true)
    }
  })

  it("takes two Content-Length lines of the same length as one, and a chunked body without trailer fields", async () => {
    for (
      const bytes of [
        post([`Content-Length: ${body.length}`, `Content-Length: ${body.length}`], body),
        post(["Transfer-Encoding: chunked"], chunked("0\r\n\r\n")),
        post(
          ["Transfer-Encoding: chunked"],
          `5;ext=1\r\n${body.slice(0, 5)}\r\n${(body.length - 5).toString(16)}\r\n${body.slice(5)}\r\n0\r\n\r\n`
        )
      ]
    ) {
      const response = answered((await send(bytes)).outcome)
      expect([response.status, response.json?.code]).toEqual([200, undefined])
    }
  })
})
