import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { bodyTimeoutMs } from "../src/Domain/JsonBody.ts"
import { backends } from "./support/backends.ts"
import {
  type Activate,
  activate,
  activatePath,
  call,
  campaignId,
  creatorId,
  exchange,
  rawRequest,
  responseOf,
  uniqueKey
} from "./support/client.ts"
import { expectEnvelope } from "./support/contract.ts"
import { getRoutes } from "./support/declared.ts"
import { type InProcessServer, serveInProcess } from "./support/inProcess.ts"
import { eventually } from "./support/load.ts"
import { type CreatedTestKey, createKey, revokeKey, startServer } from "./support/server.ts"

describe.each(backends)("on $name", (backend) => {
  let database: string
  // In process (docs/contributing.md, Tests): the raw wire of a server built from its layers here.
  let server: InProcessServer
  let writer: CreatedTestKey
  let reader: CreatedTestKey

  beforeAll(async () => {
    database = await backend.database()
    server = await serveInProcess(database, backend.env)
    writer = await createKey(database, { scopes: ["campaigns:write", "campaigns:read"] })
    reader = await createKey(database, { scopes: ["campaigns:read", "analytics:read"] })
  })

  afterAll(async () => {
    await server?.stop()
  })

  const activateAsWriter = (options: Partial<Activate> = {}) =>
    activate(server.url, { apiKey: writer.apiKey, ...options })

  const countActivations = (where = "1 = 1", ...params: Array<string>) =>
    backend.count(database, `SELECT 1 FROM activations WHERE ${where}`, ...params)

  describe("GET /v1/whoami", () => {
    it("returns exactly ok, keyId, brandId and scopes of the key", async () => {
      const result = await call(server.url, { path: "/v1/whoami", apiKey: reader.apiKey })
      expect(result.status).toBe(200)
      expect(result.headers.get("content-type")).toMatch(/^application\/json/)
      expect(result.json).toStrictEqual({
        ok: true,
        keyId: reader.keyId,
        brandId: reader.brandId,
        scopes: ["campaigns:read", "analytics:read"]
      })
    })

    it("carries RateLimit-Policy and RateLimit headers (draft-10)", async () => {
      const key = await createKey(database)
      const first = await call(server.url, { path: "/v1/whoami", apiKey: key.apiKey })
      expect(first.headers.get("ratelimit-policy")).toBe(`"default";q=120;w=60`)
      expect(first.headers.get("ratelimit")).toBe(`"default";r=119;t=0`)
      const second = await call(server.url, { path: "/v1/whoami", apiKey: key.apiKey })
      expect(second.headers.get("ratelimit")).toBe(`"default";r=118;t=0`)
    })

    it("accepts the Bearer scheme in any case (RFC 9110)", async () => {
      const result = await call(server.url, {
        path: "/v1/whoami",
        headers: { authorization: `bEaReR ${reader.apiKey}` }
      })
      expect(result.status).toBe(200)
    })

    it.each([
      ["no Authorization header", {}],
      ["an empty bearer token", { authorization: "Bearer " }],
      ["another scheme", { authorization: "Basic dXNlcjpwYXNz" }],
      ["a malformed key", { authorization: "Bearer not-a-key" }],
      ["an unknown key id", { authorization: `Bearer cak_aaaaaaaaaaaaaaaa_${"0".repeat(64)}` }],
      ["two tokens", { authorization: "Bearer a b" }]
    ])("is 401 UNAUTHORIZED with WWW-Authenticate for %s", async (_, headers) => {
      const result = await call(server.url, { path: "/v1/whoami", headers })
      expectEnvelope(result, 401, "UNAUTHORIZED")
      expect(result.json.message).toMatch(/API key is missing or invalid/)
      expect(result.headers.get("www-authenticate")).toBe("Bearer")
      expect(result.headers.get("ratelimit")).toBeNull()
    })

    it("is 401 for a known key id with a wrong secret, with the same message as an unknown id", async () => {
      const wrong = reader.apiKey.slice(0, -4) + (reader.apiKey.endsWith("0000") ? "1111" : "0000")
      const result = await call(server.url, { path: "/v1/whoami", apiKey: wrong })
      const unknown = await call(server.url, { path: "/v1/whoami", apiKey: `cak_zzzzzzzzzzzzzzzz_${"1".repeat(64)}` })
      expectEnvelope(result, 401, "UNAUTHORIZED")
      expect(result.text).toBe(unknown.text)
    })

    it(`refuses a revoked key ${backend.keysSeen}`, async () => {
      const key = await createKey(database)
      expect((await call(server.url, { path: "/v1/whoami", apiKey: key.apiKey })).status).toBe(200)
      expect(await revokeKey(database, key.keyId)).toBe(true)
      await backend.afterKeyChange()
      expectEnvelope(await call(server.url, { path: "/v1/whoami", apiKey: key.apiKey }), 401, "UNAUTHORIZED")
    })

    it("refuses an expired key", async () => {
      const key = await createKey(database, { expiresInDays: 1 })
      expect((await call(server.url, { path: "/v1/whoami", apiKey: key.apiKey })).status).toBe(200)
      await backend.exec(
        database,
        `UPDATE api_keys SET expires_at = ${Date.now() - 1000} WHERE key_id = '${key.keyId}'`
      )
      await backend.afterKeyChange()
      expectEnvelope(await call(server.url, { path: "/v1/whoami", apiKey: key.apiKey }), 401, "UNAUTHORIZED")
    })
  })

  describe("routing", () => {
    it("answers an unknown route with a 404 envelope, before authentication", async () => {
      expectEnvelope(await call(server.url, { path: "/v1/nope" }), 404, "NOT_FOUND")
      expectEnvelope(await call(server.url, { path: "/v1/whoami/extra", apiKey: reader.apiKey }), 404, "NOT_FOUND")
    })

    it("answers GET / with a small JSON index naming the service, its version and its documents, no key needed", async () => {
      const index = await call(server.url, { path: "/" })
      expect(index.status).toBe(200)
      expect(index.headers.get("content-type")).toBe("application/json")
      expect(index.json).toStrictEqual({
        ok: true,
        name: "Campaign Activation and Identity API",
        version: expect.stringMatching(/^\d+\.\d+\.\d+/),
        docs: "/docs",
        openApi: "/openapi.json"
      })
      const post = await call(server.url, { method: "POST", path: "/" })
      expectEnvelope(post, 405, "METHOD_NOT_ALLOWED")
      expect(post.headers.get("allow")).toBe("GET, HEAD")
    })

    it("answers HEAD on every GET route as GET would, headers (Date included) without the body", async () => {
      for (const path of getRoutes()) {
        const [get, head] = await Promise.all(
          ["GET", "HEAD"].map((method) =>
            exchange(server.url, rawRequest(method, path, [["authorization", `Bearer ${reader.apiKey}`]]), {
              bodyless: method === "HEAD"
            })
              .then(responseOf)
          )
        )
        const comparable = (headers: Record<string, string>) => {
          const { date, "x-request-id": _, ratelimit: __, ...rest } = headers
          return { ...rest, date: date === undefined ? undefined : "present" }
        }
        expect({ path, status: head!.status, headers: comparable(head!.headers), body: head!.body })
          .toEqual({ path, status: get!.status, headers: comparable(get!.headers), body: "" })
        expect(new Date(head!.headers["date"]!).getTime()).toBeGreaterThan(Date.now() - 60_000)
      }
    })

    it("says X-Content-Type-Options: nosniff on every answer: success, refusal, 304, documents", async () => {
      const made = await activateAsWriter({ key: uniqueKey() })
      const record = await call(server.url, {
        path: `/v1/activations/${made.json.activation.id}`,
        apiKey: writer.apiKey
      })
      const answers = [
        made,
        record,
        await call(server.url, {
          path: `/v1/activations/${made.json.activation.id}`,
          apiKey: writer.apiKey,
          headers: { "if-none-match": record.headers.get("etag")! }
        }),
        await call(server.url, { path: "/v1/whoami" }),
        await call(server.url, { path: "/v1/nope" }),
        await call(server.url, { method: "DELETE", path: "/v1/whoami" }),
        await call(server.url, { path: "/" }),
        await call(server.url, { path: "/openapi.json" }),
        await call(server.url, { path: "/healthz" })
      ]
      expect(answers.map((answer) => answer.status)).toEqual([200, 200, 304, 401, 404, 405, 200, 200, 200])
      for (const answer of answers) expect(answer.headers.get("x-content-type-options")).toBe("nosniff")
    })

    it("refuses a query parameter on an operation that takes none, naming it, after the checks of the key", async () => {
      const refused = [
        await call(server.url, { path: "/v1/whoami?verbose=1", apiKey: reader.apiKey }),
        await call(server.url, { path: `/v1/activations/${crypto.randomUUID()}?expand=all`, apiKey: reader.apiKey }),
        await call(server.url, { path: "/healthz?probe=1" }),
        await activateAsWriter({
          key: uniqueKey(),
          path: `${activatePath()}?dryRun=true`,
          body: { socialUsername: "@dryrun" }
        })
      ]
      expect(refused.map((answer) => [answer.status, answer.json.code, answer.json.message])).toEqual([
        [400, "VALIDATION_ERROR", "verbose is not a query parameter of this operation."],
        [400, "VALIDATION_ERROR", "expand is not a query parameter of this operation."],
        [400, "VALIDATION_ERROR", "probe is not a query parameter of this operation."],
        [400, "VALIDATION_ERROR", "dryRun is not a query parameter of this operation."]
      ])
      for (const answer of refused) expectEnvelope(answer, 400, "VALIDATION_ERROR")
      // Refused before it was activated: nothing stored.
      expect(await countActivations("social_username = ?", "@dryrun")).toBe(0)
      expectEnvelope(await call(server.url, { path: "/v1/whoami?verbose=1" }), 401, "UNAUTHORIZED")
    })

    it("names a query parameter given twice in one sentence", async () => {
      const twice = await call(server.url, {
        path: `/v1/activations?creatorId=${creatorId}&creatorId=${campaignId}`,
        apiKey: reader.apiKey
      })
      expectEnvelope(twice, 400, "VALIDATION_ERROR")
      expect(twice.json.message).toBe("creatorId is given more than once; give it once.")
    })

    it("answers a known route with another method with 405 and Allow", async () => {
      const post = await call(server.url, { method: "POST", path: "/v1/whoami", body: "{}" })
      expectEnvelope(post, 405, "METHOD_NOT_ALLOWED")
      expect(post.headers.get("allow")).toBe("GET, HEAD")
      const get = await call(server.url, { path: activatePath() })
      expectEnvelope(get, 405, "METHOD_NOT_ALLOWED")
      expect(get.headers.get("allow")).toBe("POST")
    })

    it("gives each route one spelling: another letter case, `//`, `;params` or percent-encoding is 404", async () => {
      const activate = activatePath()
      const spellings = [
        "/openapiXjson",
        activate.replace(creatorId, `${creatorId};x`),
        "//v1/whoami",
        "/V1/WHOAMI",
        "/v1/whoami;x",
        "/v1/%77hoami",
        activate.toUpperCase().replace("/V1/", "/v1/"),
        `/${activate}`,
        `${activate};x`,
        activate.replace(/activate$/, "%61ctivate"),
        activate.replace(creatorId, `%${creatorId.charCodeAt(0).toString(16)}${creatorId.slice(1)}`)
      ]
      for (const path of spellings) {
        const method = path.toLowerCase().includes("whoami") || path.startsWith("/openapi") ? "GET" : "POST"
        const answer = responseOf(
          await exchange(server.url, rawRequest(method, path, [["authorization", `Bearer ${writer.apiKey}`]]))
        )
        expect({ path, status: answer.status, code: answer.json?.code }).toEqual({
          path,
          status: 404,
          code: "NOT_FOUND"
        })
      }
    })

    it("answers a path with a dot segment or a backslash as no route's spelling (404), though Bun resolves it to one", async () => {
      // A key of its own: the shared writer's rate limit is for the tests that share it.
      const { apiKey } = await createKey(database, { scopes: ["campaigns:write", "campaigns:read"] })
      const spellings: Array<[string, string]> = [
        ["GET", "/v1/./whoami"],
        ["GET", "/v1/x/../whoami"],
        ["GET", "/v1/%2e%2e/v1/whoami"],
        ["GET", "/v1/%2E/whoami"],
        ["GET", "/v1\\whoami"],
        ["GET", "/v1/whoami/."],
        ["GET", "/./healthz"],
        ["GET", `/v1/activations/x/../${crypto.randomUUID()}`],
        ["HEAD", "/v1/./whoami"],
        ["DELETE", "/v1/./whoami"],
        ["POST", activatePath().replace("/activate", "/./activate")]
      ]
      for (const [method, path] of spellings) {
        const answer = responseOf(
          await exchange(server.url, rawRequest(method, path, [["authorization", `Bearer ${apiKey}`]]), {
            bodyless: method === "HEAD"
          })
        )
        expect({ method, path, status: answer.status }).toEqual({ method, path, status: 404 })
        if (method !== "HEAD") expectEnvelope(answer, 404, "NOT_FOUND")
      }
      // Each route's own spelling still answers, with a trailing slash too.
      for (const path of ["/v1/whoami", "/v1/whoami/", "/healthz/"]) {
        const answer = responseOf(
          await exchange(server.url, rawRequest("GET", path, [["authorization", `Bearer ${apiKey}`]]))
        )
        expect({ path, status: answer.status }).toEqual({ path, status: 200 })
      }
    })

    it("never replays an Idempotency-Key sent to a dot-segment spelling of its path, nor activates there", async () => {
      const { apiKey } = await createKey(database)
      const key = uniqueKey()
      const body = JSON.stringify({ socialUsername: "@dotted" })
      const headers: Array<[string, string]> = [
        ["authorization", `Bearer ${apiKey}`],
        ["idempotency-key", key],
        ["content-type", "application/json"]
      ]
      const send = async (path: string) =>
        responseOf(await exchange(server.url, rawRequest("POST", path, headers, body)))
      const original = await send(activatePath())
      expect(original.status).toBe(200)
      const dotted = await send(activatePath().replace(`/campaigns/${campaignId}`, `/campaigns/x/../${campaignId}`))
      expectEnvelope(dotted, 404, "NOT_FOUND")
      expect(dotted.headers["idempotent-replayed"]).toBeUndefined()
      const fresh = activatePath(crypto.randomUUID())
      expectEnvelope(await send(fresh.replace("/campaigns/", "/./campaigns/")), 404, "NOT_FOUND")
      expect(await countActivations("creator_id = ?", fresh.split("/")[3]!)).toBe(0)
      // The key's own path still replays it.
      const replayed = await send(activatePath())
      expect([replayed.body, replayed.headers["idempotent-replayed"]]).toEqual([original.body, "true"])
    })

    it("names a query parameter without a name in a sentence of its own", async () => {
      for (const path of ["/v1/whoami?=1", "/v1/activations?="]) {
        const answer = await call(server.url, { path, apiKey: reader.apiKey })
        expectEnvelope(answer, 400, "VALIDATION_ERROR")
        expect({ path, message: answer.json.message }).toEqual({
          path,
          message: "A query parameter has no name (nothing before its `=`); leave it out."
        })
      }
    })

    it("answers a refusal from the headers at once, without waiting for the body, and closes the connection", async () => {
      // A body of 16000 declared bytes of which none is sent: any wait for it would end in the 10 s timeout,
      // so an answer short of it did not wait (the only deadline here that is not a state's).
      const declared: Array<[string, string]> = [["content-length", "16000"], ["content-type", "application/json"]]
      const refusals: Array<[string, Array<[string, string]>, number]> = [
        [activatePath(), [], 401],
        [activatePath(), [["authorization", `Bearer ${reader.apiKey}`]], 403],
        [activatePath(), [["authorization", `Bearer ${writer.apiKey}`]], 400],
        ["/v1/nowhere", [], 404],
        ["/v1/whoami", [], 405]
      ]
      for (const [path, headers, status] of refusals) {
        const outcome = await exchange(server.url, rawRequest("POST", path, [...headers, ...declared]), {
          timeoutMs: bodyTimeoutMs - 1_000
        })
        const answer = responseOf(outcome)
        expect({ path, status: answer.status, connection: answer.headers["connection"] })
          .toEqual({ path, status, connection: "close" })
      }
    })

    it("treats a trailing slash as the same route, for 405 and for idempotency alike", async () => {
      expect((await call(server.url, { path: "/v1/whoami/", apiKey: reader.apiKey })).status).toBe(200)
      const deleted = await call(server.url, { method: "DELETE", path: "/v1/whoami/" })
      expectEnvelope(deleted, 405, "METHOD_NOT_ALLOWED")
      expect(deleted.headers.get("allow")).toBe("GET, HEAD")
      const key = uniqueKey()
      const original = await activateAsWriter({ key })
      const slashed = await activateAsWriter({ key, path: `${activatePath()}/` })
      expect(slashed.text).toBe(original.text)
      expect(slashed.headers.get("idempotent-replayed")).toBe("true")
    })
  })

  describe("GET /v1/activations", () => {
    it("takes `limit` in any decimal spelling of 1 to 100, and its next page's Link spells it plainly", async () => {
      const key = await createKey(database, { scopes: ["campaigns:write", "campaigns:read"] })
      const campaign = crypto.randomUUID()
      for (let i = 0; i < 2; i++) {
        const made = await activate(server.url, {
          apiKey: key.apiKey,
          key: uniqueKey(),
          path: activatePath(crypto.randomUUID(), campaign)
        })
        expect(made.status).toBe(200)
      }
      for (const limit of ["1", "01", "001", "%2B1", "%2B01", "1.0", "1.00", "%2B001.000"]) {
        const page = await call(server.url, {
          path: `/v1/activations?campaignId=${campaign}&limit=${limit}`,
          apiKey: key.apiKey
        })
        expect({ limit, status: page.status, records: page.json?.activations?.length }).toEqual({
          limit,
          status: 200,
          records: 1
        })
        expect(page.headers.get("link")).toMatch(/[?&]limit=1&/)
      }
      const hundred = await call(server.url, { path: "/v1/activations?limit=0100.0", apiKey: key.apiKey })
      expect(hundred.status).toBe(200)
      // A bare `+` in a query is a space (`+1` is " 1"); no exponent, sign or fraction that is not zeros.
      for (const limit of ["+1", "1.", ".1", "1e0", "-1", "0", "000", "0.0", "101", "100.5", "1.01", "0x1", "%201"]) {
        const refused = await call(server.url, { path: `/v1/activations?limit=${limit}`, apiKey: key.apiKey })
        expectEnvelope(refused, 400, "VALIDATION_ERROR")
        expect({ limit, message: refused.json.message }).toEqual({
          limit,
          message: "limit must be a whole number from 1 to 100"
        })
      }
    })
  })

  describe("POST /v1/creators/{creatorId}/campaigns/{campaignId}/activate", () => {
    it("creates an ACTIVE record with exactly the fields docs/integrators.md lists", async () => {
      const result = await activateAsWriter({
        key: uniqueKey(),
        body: { socialUsername: "@jane.doe", plannedPostAt: "2026-12-01" }
      })
      expect(result.status).toBe(200)
      expect(result.headers.get("content-type")).toMatch(/^application\/json/)
      expect(result.headers.get("idempotent-replayed")).toBeNull()
      expect(Object.keys(result.json)).toEqual(["ok", "activation"])
      const activation = result.json.activation
      expect(Object.keys(activation).sort()).toEqual(
        ["activatedAt", "campaignId", "creatorId", "id", "plannedPostAt", "socialUsername", "status"]
      )
      expect(result.json.ok).toBe(true)
      // A UUID of version 7 (docs/integrators.md: the record's id).
      expect(activation.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
      expect(activation.campaignId).toBe(campaignId)
      expect(activation.creatorId).toBe(creatorId)
      expect(activation.status).toBe("ACTIVE")
      expect(activation.socialUsername).toBe("@jane.doe")
      expect(activation.plannedPostAt).toBe("2026-12-01")
      expect(activation.activatedAt).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/)
      expect(Math.abs(Date.parse(activation.activatedAt) - Date.now())).toBeLessThan(60_000)
      expect(result.headers.get("ratelimit")).toMatch(/^"default";r=\d+;t=\d+$/)
      expect(await countActivations("id = ?", activation.id)).toBe(1)
    })

    it("sets plannedPostAt to null when it is omitted or null", async () => {
      const omitted = await activateAsWriter({ key: uniqueKey(), body: { socialUsername: "@a" } })
      expect(omitted.json.activation.plannedPostAt).toBeNull()
      expect(omitted.text).toContain(`"plannedPostAt":null`)
      const explicitNull = await activateAsWriter({
        key: uniqueKey(),
        body: { socialUsername: "@a", plannedPostAt: null }
      })
      expect(explicitNull.json.activation.plannedPostAt).toBeNull()
    })

    it("accepts plannedPostAt on the first and the last day of its window", async () => {
      for (const plannedPostAt of ["2000-01-01", "2099-12-31"]) {
        const result = await activateAsWriter({ key: uniqueKey(), body: { socialUsername: "@a", plannedPostAt } })
        expect(result.status).toBe(200)
        expect(result.json.activation.plannedPostAt).toBe(plannedPostAt)
      }
    })

    it("returns socialUsername exactly as submitted and path ids as given", async () => {
      const upper = "AAAAAAAA-BBBB-4CCC-8DDD-EEEEEEEEEEEE"
      const handle = "@Ünïcödé_Näme 🎉"
      const result = await activateAsWriter({
        key: uniqueKey(),
        path: activatePath(upper, upper),
        body: { socialUsername: handle }
      })
      expect(result.status).toBe(200)
      expect(result.json.activation.socialUsername).toBe(handle)
      expect(result.json.activation.creatorId).toBe(upper)
      expect(result.json.activation.campaignId).toBe(upper)
    })

    describe("idempotency", () => {
      it("replays the original response byte for byte, whatever the key order and whitespace", async () => {
        const key = uniqueKey()
        const original = await activateAsWriter({
          key,
          rawBody: `{"socialUsername":"@sam","plannedPostAt":"2027-01-31"}`
        })
        const replay = await activateAsWriter({
          key,
          rawBody: `{ "plannedPostAt" : "2027-01-31",\n  "socialUsername": "@sam" }`
        })
        expect(original.status).toBe(200)
        expect(replay.status).toBe(200)
        expect(replay.text).toBe(original.text)
        expect(replay.headers.get("idempotent-replayed")).toBe("true")
        expect(await countActivations("id = ?", original.json.activation.id)).toBe(1)
      })

      it("treats plannedPostAt null and omitted as the same body", async () => {
        const key = uniqueKey()
        const original = await activateAsWriter({ key, body: { socialUsername: "@sam" } })
        const replay = await activateAsWriter({ key, body: { socialUsername: "@sam", plannedPostAt: null } })
        expect(replay.text).toBe(original.text)
      })

      it("is 409 IDEMPOTENCY_CONFLICT for the same key with another body, and stores nothing", async () => {
        const key = uniqueKey()
        const original = await activateAsWriter({ key, body: { socialUsername: "@sam" } })
        const before = await countActivations()
        const conflict = await activateAsWriter({ key, body: { socialUsername: "@other" } })
        expectEnvelope(conflict, 409, "IDEMPOTENCY_CONFLICT")
        expect(await countActivations()).toBe(before)
        const replay = await activateAsWriter({ key, body: { socialUsername: "@sam" } })
        expect(replay.text).toBe(original.text)
      })

      it("is 409 IDEMPOTENCY_CONFLICT for the same key and body on another path", async () => {
        const key = uniqueKey()
        expect((await activateAsWriter({ key })).status).toBe(200)
        const otherPath = activatePath(creatorId, "33333333-3333-4333-8333-333333333333")
        expectEnvelope(await activateAsWriter({ key, path: otherPath }), 409, "IDEMPOTENCY_CONFLICT")
      })

      it("shares the key space between keys of one brand, never between brands", async () => {
        const brandId = crypto.randomUUID()
        const first = await createKey(database, { brandId })
        const second = await createKey(database, { brandId })
        const stranger = await createKey(database)
        const key = uniqueKey()
        const original = await activate(server.url, { apiKey: first.apiKey, key })
        const sameBrand = await activate(server.url, { apiKey: second.apiKey, key })
        const otherBrand = await activate(server.url, { apiKey: stranger.apiKey, key })
        expect(sameBrand.text).toBe(original.text)
        expect(sameBrand.headers.get("idempotent-replayed")).toBe("true")
        expect(otherBrand.status).toBe(200)
        expect(otherBrand.headers.get("idempotent-replayed")).toBeNull()
        expect(otherBrand.json.activation.id).not.toBe(original.json.activation.id)
      })

      it("unquotes an RFC 9651 string key", async () => {
        const key = uniqueKey()
        const quoted = await activateAsWriter({ key: `"${key}"` })
        const bare = await activateAsWriter({ key })
        expect(bare.text).toBe(quoted.text)
        expect(bare.headers.get("idempotent-replayed")).toBe("true")
      })

      it("lets a key be used again after a rejected request (rejections are never stored)", async () => {
        const key = uniqueKey()
        expectEnvelope(await activateAsWriter({ key, body: { socialUsername: "no-at" } }), 400, "VALIDATION_ERROR")
        expectEnvelope(await activateAsWriter({ key, rawBody: "{" }), 400, "MALFORMED_JSON")
        const accepted = await activateAsWriter({ key, body: { socialUsername: "@fixed" } })
        expect(accepted.status).toBe(200)
        expect(accepted.headers.get("idempotent-replayed")).toBeNull()
      })

      it("answers 50 concurrent duplicates with one record and the same bytes", async () => {
        const key = uniqueKey()
        const creator = crypto.randomUUID()
        const results = await Promise.all(
          Array.from(
            { length: 50 },
            () => activateAsWriter({ key, path: activatePath(creator), body: { socialUsername: "@crowd" } })
          )
        )
        expect(results.map((r) => r.status)).toEqual(Array(50).fill(200))
        expect(new Set(results.map((r) => r.text)).size).toBe(1)
        expect(results.filter((r) => r.headers.get("idempotent-replayed") === null)).toHaveLength(1)
        expect(await countActivations("creator_id = ?", creator)).toBe(1)
      })

      it("is 400 IDEMPOTENCY_KEY_REQUIRED without the header or with an empty one", async () => {
        expectEnvelope(await activateAsWriter(), 400, "IDEMPOTENCY_KEY_REQUIRED")
        expectEnvelope(await activateAsWriter({ key: "" }), 400, "IDEMPOTENCY_KEY_REQUIRED")
        expectEnvelope(await activateAsWriter({ key: `""` }), 400, "IDEMPOTENCY_KEY_REQUIRED")
      })

      it("is 400 VALIDATION_ERROR for a key that is too long or not visible ASCII", async () => {
        const long = await activateAsWriter({ key: "k".repeat(256) })
        expectEnvelope(long, 400, "VALIDATION_ERROR")
        expect(long.json.message).toMatch(/Idempotency-Key/)
        expectEnvelope(await activateAsWriter({ key: "has space" }), 400, "VALIDATION_ERROR")
        expect((await activateAsWriter({ key: "k".repeat(255) })).status).toBe(200)
      })
    })

    describe("scope", () => {
      it("is 403 FORBIDDEN naming the scope, with WWW-Authenticate insufficient_scope", async () => {
        const result = await activate(server.url, { apiKey: reader.apiKey, key: uniqueKey() })
        expectEnvelope(result, 403, "FORBIDDEN")
        expect(result.json.message).toContain("campaigns:write")
        expect(result.headers.get("www-authenticate")).toBe(
          `Bearer error="insufficient_scope", scope="campaigns:write"`
        )
      })

      it("lets any valid key call whoami", async () => {
        const key = await createKey(database, { scopes: ["analytics:read"] })
        expect((await call(server.url, { path: "/v1/whoami", apiKey: key.apiKey })).status).toBe(200)
      })
    })

    describe("body", () => {
      it("is 415 for another media type, and accepts parameters or no Content-Type", async () => {
        expectEnvelope(
          await activateAsWriter({ key: uniqueKey(), contentType: "text/plain" }),
          415,
          "UNSUPPORTED_MEDIA_TYPE"
        )
        expectEnvelope(
          await activateAsWriter({ key: uniqueKey(), contentType: "application/x-www-form-urlencoded" }),
          415,
          "UNSUPPORTED_MEDIA_TYPE"
        )
        expect((await activateAsWriter({ key: uniqueKey(), contentType: "application/json; charset=utf-8" })).status)
          .toBe(200)
        expect((await activateAsWriter({ key: uniqueKey(), contentType: "Application/JSON" })).status).toBe(200)
        expect((await activateAsWriter({ key: uniqueKey(), contentType: null })).status).toBe(200)
      })

      it("is 413 PAYLOAD_TOO_LARGE over 16 KiB", async () => {
        const big = JSON.stringify({ socialUsername: "@big", padding: "x".repeat(16 * 1024) })
        expectEnvelope(await activateAsWriter({ key: uniqueKey(), rawBody: big }), 413, "PAYLOAD_TOO_LARGE")
      })

      it.each(["{", "", "not json", `{"socialUsername":"@a",}`])("is 400 MALFORMED_JSON for %j", async (rawBody) => {
        expectEnvelope(await activateAsWriter({ key: uniqueKey(), rawBody }), 400, "MALFORMED_JSON")
      })

      it.each([
        [{ socialUsername: "jane" }, `socialUsername must start with "@"`],
        [{}, "socialUsername is required."],
        [{ socialUsername: "@" }, "socialUsername"],
        [{ socialUsername: "@" + "x".repeat(100) }, "socialUsername must be at most 100 characters"],
        [{ socialUsername: 42 }, "socialUsername must be a string"],
        [
          { socialUsername: "@\ud800x" },
          "socialUsername must not contain control characters, line separators or unpaired surrogates"
        ],
        [{ socialUsername: "@a", plannedPostAt: "2026-2-1" }, "plannedPostAt"],
        [{ socialUsername: "@a", plannedPostAt: "2026-02-30" }, "plannedPostAt must be a real calendar date"],
        [{ socialUsername: "@a", plannedPostAt: "2026-12-01T00:00:00Z" }, "plannedPostAt"],
        [{ socialUsername: "@a", plannedPostAt: 20261201 }, "plannedPostAt"],
        // Each day is an entry of the campaign's analytics: the window bounds them (docs/integrators.md, activate).
        [
          { socialUsername: "@a", plannedPostAt: "1999-12-31" },
          "plannedPostAt must be a date from 2000-01-01 to 2099-12-31"
        ],
        [
          { socialUsername: "@a", plannedPostAt: "2100-01-01" },
          "plannedPostAt must be a date from 2000-01-01 to 2099-12-31"
        ],
        [
          { socialUsername: "@a", plannedPostAt: "0000-01-01" },
          "plannedPostAt must be a date from 2000-01-01 to 2099-12-31"
        ],
        [
          { socialUsername: "@a", plannedPostAt: "9999-12-31" },
          "plannedPostAt must be a date from 2000-01-01 to 2099-12-31"
        ],
        [{ socialUsername: "@a", plannedPostat: "2026-12-01" }, "plannedPostat is not a known field."],
        [[], "The request body must be a JSON object."],
        [null, "The request body must be a JSON object."],
        ["@jane", "The request body must be a JSON object."]
      ])("is 400 VALIDATION_ERROR for %j, naming the field", async (body, message) => {
        const before = await countActivations()
        const result = await activateAsWriter({ key: uniqueKey(), rawBody: JSON.stringify(body) })
        expectEnvelope(result, 400, "VALIDATION_ERROR")
        expect(result.json.message).toContain(message)
        expect(await countActivations()).toBe(before)
      })

      it("accepts socialUsername of exactly 100 characters", async () => {
        const result = await activateAsWriter({ key: uniqueKey(), body: { socialUsername: "@" + "x".repeat(99) } })
        expect(result.status).toBe(200)
      })

      it("is 400 VALIDATION_ERROR for path ids that are not UUIDs", async () => {
        const result = await activateAsWriter({ key: uniqueKey(), path: activatePath("not-a-uuid") })
        expectEnvelope(result, 400, "VALIDATION_ERROR")
        expect(result.json.message).toBe("creatorId must be a UUID")
        const campaign = await activateAsWriter({ key: uniqueKey(), path: activatePath(creatorId, "123") })
        expect(campaign.json.message).toBe("campaignId must be a UUID")
      })
    })

    describe("order of checks", () => {
      it("route before authentication", async () => {
        expectEnvelope(await call(server.url, { method: "POST", path: "/v1/creators/x/activate" }), 404, "NOT_FOUND")
        expectEnvelope(await call(server.url, { method: "DELETE", path: activatePath() }), 405, "METHOD_NOT_ALLOWED")
      })

      it("authentication before scope, Idempotency-Key and body", async () => {
        const result = await activate(server.url, { apiKey: undefined, contentType: "text/plain", rawBody: "{" })
        expectEnvelope(result, 401, "UNAUTHORIZED")
      })

      it("scope before Idempotency-Key", async () => {
        expectEnvelope(await activate(server.url, { apiKey: reader.apiKey, rawBody: "{" }), 403, "FORBIDDEN")
      })

      it("Idempotency-Key before media type", async () => {
        expectEnvelope(
          await activateAsWriter({ contentType: "text/plain", rawBody: "{" }),
          400,
          "IDEMPOTENCY_KEY_REQUIRED"
        )
      })

      it("media type before size", async () => {
        const big = "x".repeat(20_000)
        expectEnvelope(
          await activateAsWriter({ key: uniqueKey(), contentType: "text/plain", rawBody: big }),
          415,
          "UNSUPPORTED_MEDIA_TYPE"
        )
      })

      it("size before JSON", async () => {
        expectEnvelope(
          await activateAsWriter({ key: uniqueKey(), rawBody: "{" + "x".repeat(20_000) }),
          413,
          "PAYLOAD_TOO_LARGE"
        )
      })

      it("JSON before validation of body and path", async () => {
        const result = await activateAsWriter({ key: uniqueKey(), path: activatePath("nope"), rawBody: "{" })
        expectEnvelope(result, 400, "MALFORMED_JSON")
      })

      it("validation before idempotency", async () => {
        const key = uniqueKey()
        expect((await activateAsWriter({ key })).status).toBe(200)
        expectEnvelope(await activateAsWriter({ key, body: { socialUsername: "bad" } }), 400, "VALIDATION_ERROR")
      })
    })
  })

  describe("rate limiting", () => {
    let limited: InProcessServer
    let limitedDb: string

    beforeAll(async () => {
      limitedDb = await backend.database()
      limited = await serveInProcess(limitedDb, {
        ...backend.env,
        RATE_LIMIT_MAX: "3",
        RATE_LIMIT_WINDOW_SECONDS: "3600"
      })
    })
    afterAll(async () => {
      await limited?.stop()
    })

    it("is 429 RATE_LIMITED with Retry-After past the limit, per key, and never for an unauthenticated call", async () => {
      const key = await createKey(limitedDb, { scopes: ["campaigns:read"] })
      const other = await createKey(limitedDb, { scopes: ["campaigns:read"] })
      const base = limited.url
      const statuses = []
      for (let i = 0; i < 3; i++) statuses.push((await call(base, { path: "/v1/whoami", apiKey: key.apiKey })).status)
      expect(statuses).toEqual([200, 200, 200])
      const refused = await call(base, { path: "/v1/whoami", apiKey: key.apiKey })
      expectEnvelope(refused, 429, "RATE_LIMITED")
      expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
      expect(refused.headers.get("ratelimit-policy")).toBe(`"default";q=3;w=3600`)
      expect(refused.headers.get("ratelimit")).toBe(`"default";r=0;t=${refused.headers.get("retry-after")}`)
      expect((await call(base, { path: "/v1/whoami", apiKey: other.apiKey })).status).toBe(200)
      expectEnvelope(await call(base, { path: "/v1/whoami" }), 401, "UNAUTHORIZED")
    })

    it("checks the rate limit before the scope", async () => {
      const key = await createKey(limitedDb, { scopes: ["campaigns:read"] })
      for (let i = 0; i < 3; i++) await call(limited.url, { path: "/v1/whoami", apiKey: key.apiKey })
      expectEnvelope(await activate(limited.url, { apiKey: key.apiKey, key: uniqueKey() }), 429, "RATE_LIMITED")
    })
  })

  describe("durability", () => {
    it("replays an activation after the server restarts on the same database", async () => {
      const db = await backend.database()
      const first = await startServer(db, backend.env)
      const key = await createKey(db)
      const idempotencyKey = uniqueKey()
      const original = await activate(first.url, { apiKey: key.apiKey, key: idempotencyKey })
      expect(original.status).toBe(200)
      expect(await first.stop("SIGTERM")).toBe(0)

      const second = await startServer(db, backend.env)
      try {
        const replay = await activate(second.url, { apiKey: key.apiKey, key: idempotencyKey })
        expect(replay.status).toBe(200)
        expect(replay.text).toBe(original.text)
        expect(replay.headers.get("idempotent-replayed")).toBe("true")
      } finally {
        await second.stop()
      }
    })
  })

  describe("failures", () => {
    it("is 500 INTERNAL_ERROR with a generic message and no SQL when the schema is broken", async () => {
      const db = await backend.database()
      const local = await startServer(db, backend.env)
      const key = await createKey(db)
      await backend.exec(db, "DROP TABLE activations")
      try {
        const result = await activate(local.url, { apiKey: key.apiKey, key: uniqueKey() })
        expectEnvelope(result, 500, "INTERNAL_ERROR")
        expect(result.json.message).toBe("An unexpected error occurred.")
        expect(result.text).not.toMatch(/activations|SQL|sqlite|at /i)
        // Log lines are written once per turn of the event loop, after the answer.
        await eventually(
          "the cause to be logged",
          () => /no such table: activations|"activations\\?" does not exist/.test(local.logs())
        )
      } finally {
        await local.stop()
      }
    })
  })
})
