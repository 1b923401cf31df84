import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { spawn } from "bun"
import { chownSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { request as httpRequest } from "node:http"
import { join } from "node:path"
import { activate, activateRoute, type Answer, call, exchange, rawRequest, responseOf } from "./support/client.ts"
import { expectEnvelope } from "./support/contract.ts"
import { inspect, lockDatabase } from "./support/database.ts"
import { eventually } from "./support/load.ts"
import {
  createKey,
  type Environment,
  program,
  revokeKey,
  root,
  type RunningServer,
  session,
  startServer,
  tempDatabase,
  testTmp
} from "./support/server.ts"
import {
  accessLog,
  logLines,
  type OtlpCollector,
  otlpCollector,
  type OtlpSpan,
  spanAttribute
} from "./support/telemetry.ts"

const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

let database: string
let server: RunningServer

beforeAll(async () => {
  database = tempDatabase()
  // Without a heap size of the operator's (whatever this machine sets): serve chooses its own.
  server = await startServer(database, { RATE_LIMIT_MAX: "1", BUN_JSC_forceRAMSize: undefined })
})

afterAll(async () => {
  await server?.stop()
})

describe("the documents", () => {
  const get = (path: string, headers: Array<[string, string]> = []) =>
    exchange(server.url, rawRequest("GET", path, headers)).then(responseOf)

  it("serves /docs compressed when asked, with an ETag of each form and Cache-Control, and 304 for the same ETag", async () => {
    const plain = await get("/docs")
    const gzipped = await get("/docs", [["accept-encoding", "gzip, br"]])
    expect(plain.status).toBe(200)
    expect(plain.headers["content-type"]).toMatch(/^text\/html/)
    expect(plain.headers["content-encoding"]).toBeUndefined()
    expect(gzipped.headers["content-encoding"]).toBe("gzip")
    expect(Number(gzipped.headers["content-length"])).toBeLessThan(Number(plain.headers["content-length"]) / 2)
    expect(gzipped.headers["etag"]).toMatch(/^"[\w-]+"$/)
    // Each form its own validator (RFC 9110 §8.8.3): the gzip form's is not the page's.
    expect(gzipped.headers["etag"]).not.toBe(plain.headers["etag"])
    expect(gzipped.headers["cache-control"]).toBe("no-cache")
    // No other site may frame the one HTML page (docs/http-reference.md, Headers on every answer).
    expect(plain.headers["content-security-policy"]).toBe("frame-ancestors 'none'")
    expect(plain.headers["x-content-type-options"]).toBe("nosniff")
    const again = await get("/docs", [["if-none-match", plain.headers["etag"]!]])
    expect(again.status).toBe(304)
    expect(again.body).toBe("")
  })

  it("DOCS_ENABLED=false turns /docs off and leaves /openapi.json; the index says there are no docs", async () => {
    const { result } = await session(tempDatabase(), { DOCS_ENABLED: "false" }, async (url) => [
      await call(url, { path: "/docs" }),
      await call(url, { path: "/openapi.json" }),
      await call(url, { path: "/" })
    ])
    expectEnvelope(result[0]!, 404, "NOT_FOUND")
    expect(result[1]!.status).toBe(200)
    expect(result[2]!.json).toMatchObject({ ok: true, docs: null, openApi: "/openapi.json" })
  })

  it("names the documents at PUBLIC_URL in the index when it is set", async () => {
    const { result } = await session(
      tempDatabase(),
      { PUBLIC_URL: "https://api.example.com/campaigns/" },
      (url) => call(url, { path: "/" })
    )
    expect(result.json).toMatchObject({
      docs: "https://api.example.com/campaigns/docs",
      openApi: "https://api.example.com/campaigns/openapi.json"
    })
  })
})

describe("health", () => {
  it("GET /healthz is 200 alive, without a key and without RateLimit headers", async () => {
    const answer = await call(server.url, { path: "/healthz" })
    expect(answer.status).toBe(200)
    expect(answer.headers.get("content-type")).toMatch(/^application\/json/)
    expect(answer.json).toStrictEqual({ ok: true, status: "alive" })
    expect(answer.headers.get("ratelimit")).toBeNull()
    expect(answer.headers.get("ratelimit-policy")).toBeNull()
  })

  it("GET /readyz is 200 ready while the database answers", async () => {
    const answer = await call(server.url, { path: "/readyz" })
    expect(answer.status).toBe(200)
    expect(answer.json).toStrictEqual({ ok: true, status: "ready", database: "sqlite", rateLimiter: "memory" })
    expect(answer.headers.get("ratelimit")).toBeNull()
  })

  it("is never rate limited, even where a key gets one request per window", async () => {
    const key = await createKey(database)
    expect((await call(server.url, { path: "/v1/whoami", apiKey: key.apiKey })).status).toBe(200)
    expect((await call(server.url, { path: "/v1/whoami", apiKey: key.apiKey })).status).toBe(429)
    for (let i = 0; i < 20; i++) {
      for (const path of ["/healthz", "/readyz"]) {
        const answer = await call(server.url, { path, apiKey: key.apiKey })
        expect({ path, status: answer.status }).toEqual({ path, status: 200 })
      }
    }
  })

  it("GET /readyz is 503 SERVICE_UNAVAILABLE while the database does not answer, then ready again", async () => {
    const lockedDatabase = tempDatabase()
    const { result, stderr } = await session(lockedDatabase, {}, async (url) => {
      const before = await call(url, { path: "/readyz" })
      const release = lockDatabase(lockedDatabase, "everything")
      // The database is asked at most once a second: the answer before serves until then.
      let during: Answer | undefined
      await eventually(
        "/readyz to answer 503",
        async () => (during = await call(url, { path: "/readyz" })).status === 503
      )
        .finally(release)
      let after: Answer | undefined
      await eventually(
        "/readyz to answer 200",
        async () => (after = await call(url, { path: "/readyz" })).status === 200
      )
      return { before, during: during!, after: after! }
    })
    expect(result.before.status).toBe(200)
    expectEnvelope(result.during, 503, "SERVICE_UNAVAILABLE")
    expect(result.after.json).toStrictEqual({ ok: true, status: "ready", database: "sqlite", rateLimiter: "memory" })
    const requestId = result.during.headers.get("x-request-id")
    expect(requestId).toMatch(uuid)
    const ofRequest = logLines(stderr).filter((line) => line.annotations?.requestId === requestId)
    expect(ofRequest.map((line) => [line.logLevel, line.message])).toEqual([
      ["WARN", "database unavailable"],
      ["INFO", "request"]
    ])
  })
})

describe("the warm-up (docs/operators.md, Operating it: Start-up)", () => {
  it("by default /readyz is 503 until the request path has run on a private copy, and the copy leaves nothing in the database, the log, the metrics or the network", async () => {
    const warmed = tempDatabase()
    const key = await createKey(warmed)
    // A proxy of the test's own, which every variable names (Bun's fetch sends loopback requests to
    // it too): it counts the connections it is sent and closes them.
    let proxied = 0
    const proxy = Bun.listen({
      hostname: "127.0.0.1",
      port: 0,
      socket: {
        open: (socket) => {
          proxied++
          socket.end()
        },
        data: () => {}
      }
    })
    const proxyUrl = `http://127.0.0.1:${proxy.port}`
    // WARM_UP unset: the server's default.
    const warming = await startServer(warmed, {
      WARM_UP: undefined,
      METRICS_PORT: "0",
      HTTP_PROXY: proxyUrl,
      HTTPS_PROXY: proxyUrl,
      http_proxy: proxyUrl,
      https_proxy: proxyUrl,
      NO_PROXY: undefined,
      no_proxy: undefined
    })
    try {
      // A request the moment the server listens is answered, ready or not.
      expect((await call(warming.url, { path: "/v1/whoami", apiKey: key.apiKey })).status).toBe(200)
      const probes: Array<Answer> = []
      await eventually("/readyz to answer 200", async () => {
        const answer = await call(warming.url, { path: "/readyz" })
        probes.push(answer)
        return answer.status === 200
      })
      // Each answer before it: the warm-up still running (how many there are is the machine's speed).
      for (const probe of probes.slice(0, -1)) {
        expectEnvelope(probe, 503, "SERVICE_UNAVAILABLE")
        expect(probe.json.message).toBe("The server is starting; it is ready in a moment.")
      }
      await eventually(
        "the ready answer's access line",
        async () => accessLog(warming.logs()).some((line) => line.route === "/readyz" && line.status === 200)
      )
      const lines = logLines(warming.logs())
      const warmedUp = lines.find((line) => line.message === "warmed up")
      expect(warmedUp?.annotations).toMatchObject({ rounds: 300, milliseconds: expect.any(Number) })
      const ready = lines.find((line) =>
        line.message === "request" && line.annotations.route === "/readyz" && line.annotations.status === 200
      )
      expect(Date.parse(ready!.timestamp)).toBeGreaterThanOrEqual(Date.parse(warmedUp!.timestamp))
      // Its own requests only: one whoami and the probes, nothing of the copy's.
      expect(accessLog(warming.logs()).map((line) => line.route).sort()).toEqual(
        ["/v1/whoami", ...probes.map(() => "/readyz")].sort()
      )
      expect(lines.filter((line) => line.logLevel !== "INFO")).toEqual([])
      expect(inspect(warmed, (db) => db.query("SELECT count(*) AS n FROM activations").get())).toEqual({ n: 0 })
      expect(inspect(warmed, (db) => db.query("SELECT count(*) AS n FROM api_keys").get())).toEqual({ n: 1 })
      const metricsUrl = lines.find((line) => line.message === "metrics")!.annotations.url
      const metrics = await (await fetch(metricsUrl)).text()
      const valueOf = (series: string) =>
        metrics.split("\n").filter((line) => line.startsWith(series)).map((line) => Number(line.split(" ").at(-1)))
      for (
        const series of ["api_activations_created_total", "api_unauthorized_total", "api_idempotent_replays_total"]
      ) {
        expect(valueOf(series).every((value) => value === 0)).toBe(true)
      }
      expect(metrics).not.toMatch(/route="\/v1\/activations/)
      expect(proxied).toBe(0)
    } finally {
      await warming.stop()
      proxy.stop(true)
    }
  })
})

describe("what a killed warm-up leaves (docs/operators.md, Operating it: Start-up)", () => {
  it("a start removes the private directories its user's killed servers left, and nothing of another's", async () => {
    const temporary = mkdtempSync(join(testTmp(), "campaign-api-tmp-"))
    const database = tempDatabase()
    const warmUps = () => readdirSync(temporary).filter((name) => name.startsWith("campaign-api-warm-up-"))
    // Another server's, alive (this process), another user's, and what only looks like one: all kept.
    const dead = Bun.spawnSync(["true"]).pid
    const kept = [
      `campaign-api-warm-up-${process.pid}-live00`,
      `campaign-api-warm-up-${dead}-other0`,
      "campaign-api-warm-up-notapid",
      "campaign-api-something-else"
    ]
    for (const name of kept) mkdirSync(join(temporary, name))
    chownSync(join(temporary, kept[1]!), 65534, 65534)

    // Killed while it warms up: its directory and socket stay behind.
    const killed = await startServer(database, { WARM_UP: undefined, TMPDIR: temporary })
    const left = `campaign-api-warm-up-${killed.process.pid}-`
    await eventually(
      "the warm-up's socket",
      () => warmUps().some((name) => name.startsWith(left) && readdirSync(join(temporary, name)).includes("copy.sock"))
    )
    await killed.stop("SIGKILL")
    expect(warmUps().filter((name) => name.startsWith(left))).toHaveLength(1)

    const next = await startServer(database, { WARM_UP: undefined, TMPDIR: temporary })
    try {
      await eventually("the warm-up to end", () => logLines(next.logs()).some((line) => line.message === "warmed up"))
      // Its own is gone with its warm-up, the killed one's with its start.
      expect(readdirSync(temporary).sort()).toEqual([...kept].sort())
    } finally {
      await next.stop()
      rmSync(temporary, { recursive: true, force: true })
    }
  })
})

describe("the heap's sizing (docs/operators.md, Operating it)", () => {
  /** A NUL-separated file of /proc/<pid> (`environ`, `cmdline`) as its entries (as src/Memory.ts reads its own: importing it would run it). */
  const procEntries = (pid: number, file: "environ" | "cmdline") =>
    readFileSync(`/proc/${pid}/${file}`, "utf8").split("\0").slice(0, -1)
  const environOf = (pid: number) => procEntries(pid, "environ")
  const commandLineOf = (pid: number) => procEntries(pid, "cmdline")

  it("serve tells JavaScriptCore the machine has 1 GiB, in its own process (the pid it was started as)", () => {
    expect(environOf(server.process.pid)).toContain("BUN_JSC_forceRAMSize=1073741824")
  })

  /**
   * Starts a server of its own, without the heap setting of this process's environment unless
   * `env` gives one (in a directory whose `.env` file holds `dotenv`, and with the command line
   * `runtime`, when given), runs `check` on it, and stops it.
   */
  const withOwnServer = async (
    options: { readonly env?: Environment; readonly dotenv?: string; readonly runtime?: ReadonlyArray<string> },
    check: (own: RunningServer) => Promise<void> | void
  ) => {
    let cwd = root
    if (options.dotenv !== undefined) {
      cwd = mkdtempSync(join(testTmp(), "campaign-api-dotenv-"))
      writeFileSync(join(cwd, ".env"), options.dotenv)
    }
    const own = await startServer(tempDatabase(), { BUN_JSC_forceRAMSize: undefined, ...options.env }, {
      cwd,
      ...(options.runtime === undefined ? {} : { runtime: options.runtime })
    })
    try {
      await check(own)
    } finally {
      await own.stop()
    }
  }

  it("runs again with the command line it was started with, as ps shows it", () =>
    // A relative script: rebuilt from Bun's view of its arguments, it had read `bun /abs/path/src/main.ts serve`.
    withOwnServer({ runtime: ["./src/main.ts"] }, (own) => {
      expect(environOf(own.process.pid)).toContain("BUN_JSC_forceRAMSize=1073741824")
      expect(commandLineOf(own.process.pid)).toEqual(["bun", "./src/main.ts", "serve"])
    }))

  it("starts with a relative --cwd: Bun has moved into it, so it is passed on as an absolute path", () =>
    withOwnServer({ runtime: ["--cwd", "src", "main.ts"] }, async (own) => {
      expect(environOf(own.process.pid)).toContain("BUN_JSC_forceRAMSize=1073741824")
      expect(commandLineOf(own.process.pid)).toEqual(["bun", "--cwd", join(root, "src"), "main.ts", "serve"])
      expect((await call(own.url, { path: "/healthz" })).status).toBe(200)
    }))

  it("does not turn what Bun loads from a .env file into the server's environment", () =>
    withOwnServer({ dotenv: "CAMPAIGN_API_DOTENV_SECRET=from-the-file\n" }, (own) => {
      const environment = environOf(own.process.pid)
      expect(environment).toContain("BUN_JSC_forceRAMSize=1073741824")
      expect(environment.filter((entry) => entry.startsWith("CAMPAIGN_API_DOTENV_SECRET"))).toEqual([])
    }))

  it("passes on a value from a .env file, which JavaScriptCore would not read there", () =>
    withOwnServer({ dotenv: "BUN_JSC_forceRAMSize=536870912\nCAMPAIGN_API_DOTENV_SECRET=from-the-file\n" }, (own) => {
      const environment = environOf(own.process.pid)
      expect(environment.filter((entry) => entry.startsWith("BUN_JSC_forceRAMSize="))).toEqual([
        "BUN_JSC_forceRAMSize=536870912"
      ])
      expect(environment.filter((entry) => entry.startsWith("CAMPAIGN_API_DOTENV_SECRET"))).toEqual([])
    }))

  it("keeps the value an operator set, 0 (JavaScriptCore's own sizing) included", () =>
    withOwnServer({ env: { BUN_JSC_forceRAMSize: "0" } }, async (own) => {
      expect(environOf(own.process.pid).filter((entry) => entry.startsWith("BUN_JSC_forceRAMSize="))).toEqual([
        "BUN_JSC_forceRAMSize=0"
      ])
      expect((await call(own.url, { path: "/healthz" })).status).toBe(200)
    }))
})

describe("X-Request-Id", () => {
  const idOf = async (headers: Record<string, string>) =>
    (await call(server.url, { path: "/healthz", headers })).headers.get("x-request-id")

  it.each([
    ["absent", {}],
    ["sane", { "x-request-id": "abc-123" }],
    ["with spaces", { "x-request-id": "abc 123" }],
    ["200 characters long", { "x-request-id": "a".repeat(200) }],
    ["with a control character", { "x-request-id": "abc\t123" }],
    ["empty", { "x-request-id": "" }]
  ])(
    "is a new UUID of the server's when the caller's is %s: a caller cannot make its requests collide with another's",
    async (_, headers: Record<string, string>) => {
      const first = await idOf(headers)
      const second = await idOf(headers)
      expect(first).toMatch(uuid)
      expect(second).toMatch(uuid)
      expect(second).not.toBe(first)
    }
  )

  it("is on 401, 404 and 405 answers too", async () => {
    const answers: Array<[Answer, number]> = [
      [await call(server.url, { path: "/v1/whoami", headers: { "x-request-id": "id-401" } }), 401],
      [await call(server.url, { path: "/nowhere", headers: { "x-request-id": "id-404" } }), 404],
      [await call(server.url, { path: "/v1/whoami", method: "DELETE", headers: { "x-request-id": "id-405" } }), 405]
    ]
    for (const [answer, status] of answers) {
      expect(answer.status).toBe(status)
      expect(answer.headers.get("x-request-id")).toMatch(uuid)
    }
  })
})

describe("the client behind a trusted proxy (TRUSTED_PROXIES)", () => {
  const badKey = `cak_${"b".repeat(16)}_${"0".repeat(64)}`

  it("is the socket's peer unless the peer is a trusted proxy: then the client it names, its request id, and the 401s counted per client", async () => {
    const { result, stderr } = await session(
      tempDatabase(),
      { TRUSTED_PROXIES: "127.0.0.1, 10.0.0.0/8" },
      async (url) => {
        const via = (localAddress: string, headers: Record<string, string>) =>
          new Promise<{ status: number; requestId: string | undefined }>((resolve, reject) => {
            const { hostname, port } = new URL(url)
            const sent = httpRequest({
              host: hostname,
              port,
              path: "/v1/whoami",
              localAddress,
              headers: { ...headers, authorization: `Bearer ${badKey}` }
            }, (response) => {
              response.resume()
              response.on("end", () =>
                resolve({
                  status: response.statusCode!,
                  requestId: response.headers["x-request-id"] as string | undefined
                }))
            })
            sent.on("error", reject)
            sent.end()
          })
        return {
          // From the trusted proxy: the client it appended, not what a client wrote before it, nor a
          // trusted hop; its own request id.
          proxied: await via("127.0.0.1", {
            "x-forwarded-for": "6.6.6.6, 203.0.113.9, 10.1.2.3",
            "x-request-id": "proxy-1"
          }),
          again: await via("127.0.0.1", { "x-forwarded-for": "203.0.113.9", "x-request-id": "proxy-2" }),
          // Forwarded, when the proxies write X-Forwarded-For (TRUSTED_PROXY_HEADER's default), is a
          // client's own: the proxy is named.
          forwarded: await via("127.0.0.1", {
            forwarded: "for=198.51.100.1, for=\"[2001:db8::7]:4711\"",
            "x-request-id": "proxy-3"
          }),
          // From an address that is not a proxy: its forwarding headers and request id are not believed.
          direct: await via("127.0.0.2", { "x-forwarded-for": "203.0.113.50", "x-request-id": "caller-1" })
        }
      }
    )
    expect(result.proxied).toEqual({ status: 401, requestId: "proxy-1" })
    expect(result.forwarded).toEqual({ status: 401, requestId: "proxy-3" })
    expect(result.direct.requestId).toMatch(uuid)
    const entries = accessLog(stderr)
    expect(
      entries.map(({ clientAddress, clientRequestId, requestId }) => ({ clientAddress, clientRequestId, requestId }))
    ).toEqual([
      { clientAddress: "203.0.113.9", clientRequestId: null, requestId: "proxy-1" },
      { clientAddress: "127.0.0.1", clientRequestId: null, requestId: "proxy-3" },
      { clientAddress: "127.0.0.2", clientRequestId: "caller-1", requestId: result.direct.requestId }
    ])
    // The second 401 of 203.0.113.9 in the minute is counted under it, not under the proxy.
    const summaries = logLines(stderr).filter((line) => line.message === "repeated unauthorized requests")
    expect(summaries.map((line) => line.annotations)).toEqual([
      expect.objectContaining({ clientAddress: "203.0.113.9", count: 1 })
    ])
  })
})

describe("structured logs", () => {
  it("writes one JSON access-log line per request, with its request id and never the key", async () => {
    const logged = tempDatabase()
    const key = await createKey(logged, { scopes: ["campaigns:write"] })
    const wrongSecret = `${key.apiKey.slice(0, -8)}deadbeef`
    const identity = { keyId: key.keyId, brandId: key.brandId, reason: null }
    const anonymous = { keyId: null, brandId: null, reason: null }
    const { result: calls, stderr, stdout } = await session(logged, {}, async (url) => [
      {
        answer: await call(url, { path: "/v1/whoami", apiKey: key.apiKey, headers: { "x-request-id": "log-whoami" } }),
        expected: { method: "GET", route: "/v1/whoami", status: 200, ...identity }
      },
      {
        answer: await call(url, { path: "/v1/whoami", apiKey: wrongSecret }),
        expected: { method: "GET", route: "/v1/whoami", status: 401, ...identity, reason: "wrong secret" }
      },
      {
        answer: await activate(url, { apiKey: key.apiKey, key: crypto.randomUUID() }),
        expected: { method: "POST", route: activateRoute, status: 200, ...identity }
      },
      {
        answer: await call(url, { path: "/nowhere" }),
        expected: { method: "GET", route: expect.any(String), status: 404, ...anonymous }
      },
      {
        answer: await call(url, { path: "/v1/whoami", method: "DELETE" }),
        expected: { method: "DELETE", route: "/v1/whoami", status: 405, ...anonymous }
      },
      {
        answer: await call(url, { path: "/healthz" }),
        expected: { method: "GET", route: "/healthz", status: 200, ...anonymous }
      }
    ])
    expect(stdout).toBe("")
    // One shape for every line, the start and the drain included: the message is always text.
    const lines = logLines(stderr)
    expect(lines.map((line) => line.message)).toEqual(expect.arrayContaining(["draining", "stopped"]))
    for (const line of lines) {
      expect(line).toEqual(expect.objectContaining({
        message: expect.stringMatching(/\S/),
        logLevel: expect.any(String),
        annotations: expect.any(Object)
      }))
    }
    const entries = accessLog(stderr)
    expect(entries).toHaveLength(calls.length)
    for (const { answer, expected } of calls) {
      const requestId = answer.headers.get("x-request-id")
      expect(answer.status).toBe(expected.status)
      expect(entries.filter((entry) => entry.requestId === requestId)).toEqual([
        {
          ...expected,
          requestId,
          durationMs: expect.any(Number),
          clientAddress: "127.0.0.1",
          // The caller's own request id is logged beside the server's, never as it.
          clientRequestId: answer === calls[0]!.answer ? "log-whoami" : null
        }
      ])
    }
    expect(calls[0]!.answer.headers.get("x-request-id")).toMatch(uuid)
    for (const secret of [key.apiKey, key.apiKey.split("_")[2]!, wrongSecret, wrongSecret.split("_")[2]!]) {
      expect(stderr).not.toContain(secret)
    }
  })

  /**
   * A GET of whoami from `localAddress`, one of loopback's many (127.0.0.0/8 is all local on
   * Linux): the 401s of one address after its first are only counted, so each refusal below comes
   * from an address of its own. The answer as sent: status, header lines in order, body.
   */
  const whoamiFrom = (url: string, localAddress: string, headers: Record<string, string>) =>
    new Promise<{ status: number; headers: Array<string>; body: string }>((resolve, reject) => {
      const { hostname, port } = new URL(url)
      const sent = httpRequest({ host: hostname, port, path: "/v1/whoami", localAddress, headers }, (response) => {
        let body = ""
        response.setEncoding("utf8")
        response.on("data", (chunk: string) => (body += chunk))
        response.on("end", () => resolve({ status: response.statusCode!, headers: response.rawHeaders, body }))
        response.on("error", reject)
      })
      sent.on("error", reject)
      sent.end()
    })

  it("says in the access line why a key was refused (its id when it parses, its brand when known), never in the answer", async () => {
    const logged = tempDatabase()
    const known = await createKey(logged)
    const revoked = await createKey(logged)
    const expired = await createKey(logged, { expiresInDays: 1 })
    expect(await revokeKey(logged, revoked.keyId)).toBe(true)
    inspect(
      logged,
      (db) => db.run("UPDATE api_keys SET expires_at = ? WHERE key_id = ?", [Date.now() - 1000, expired.keyId])
    )
    const secret = known.apiKey.split("_")[2]!
    const wrongSecret = [...secret].map((c) => (c === "0" ? "1" : "0")).join("")
    const unknownId = "z".repeat(16)
    const bearer = (token: string) => ({ authorization: `Bearer ${token}` })
    const refusals: ReadonlyArray<{
      readonly headers: Record<string, string>
      readonly expected: { readonly reason: string; readonly keyId: string | null; readonly brandId: string | null }
    }> = [
      { headers: {}, expected: { reason: "missing", keyId: null, brandId: null } },
      {
        headers: { authorization: `Basic ${btoa(`${known.keyId}:${secret}`)}` },
        expected: { reason: "missing", keyId: null, brandId: null }
      },
      { headers: { authorization: "Bearer" }, expected: { reason: "missing", keyId: null, brandId: null } },
      { headers: bearer(`${known.apiKey} ${secret}`), expected: { reason: "malformed", keyId: null, brandId: null } },
      { headers: bearer(`${known.apiKey}0`), expected: { reason: "malformed", keyId: null, brandId: null } },
      {
        headers: bearer(`cak_${unknownId}_${secret}`),
        expected: { reason: "unknown key", keyId: unknownId, brandId: null }
      },
      {
        headers: bearer(`cak_${known.keyId}_${wrongSecret}`),
        expected: { reason: "wrong secret", keyId: known.keyId, brandId: known.brandId }
      },
      {
        headers: bearer(revoked.apiKey),
        expected: { reason: "revoked", keyId: revoked.keyId, brandId: revoked.brandId }
      },
      {
        headers: bearer(expired.apiKey),
        expected: { reason: "expired", keyId: expired.keyId, brandId: expired.brandId }
      }
    ]
    const { result: answers, stderr } = await session(logged, {}, async (url) => {
      const answers = []
      for (const [i, { headers }] of refusals.entries()) {
        answers.push(await whoamiFrom(url, `127.0.0.${10 + i}`, { ...headers, "x-request-id": `refusal-${i}` }))
      }
      return answers
    })
    // What the client gets, but for the date and the request id it sent: the same for every reason.
    const seen = ({ body, headers, status }: (typeof answers)[number]) => ({
      status,
      headers: headers
        .flatMap((value, i) => (i % 2 === 1 ? [[headers[i - 1]!.toLowerCase(), value] as const] : []))
        .filter(([name]) => name !== "date" && name !== "x-request-id"),
      body
    })
    const first = seen(answers[0]!)
    expect(first.status).toBe(401)
    expect(JSON.parse(first.body)).toStrictEqual({
      ok: false,
      code: "UNAUTHORIZED",
      message: "The API key is missing or invalid."
    })
    expect(first.headers).toContainEqual(["www-authenticate", "Bearer"])
    const entries = accessLog(stderr)
    for (const [i, { expected }] of refusals.entries()) {
      expect(seen(answers[i]!)).toStrictEqual(first)
      const clientRequestId = `refusal-${i}`
      expect(entries.filter((entry) => entry.clientRequestId === clientRequestId)).toEqual([
        {
          method: "GET",
          route: "/v1/whoami",
          status: 401,
          durationMs: expect.any(Number),
          requestId: expect.stringMatching(uuid),
          clientAddress: `127.0.0.${10 + i}`,
          clientRequestId,
          ...expected
        }
      ])
    }
    expect(new Set(refusals.map(({ expected }) => expected.reason))).toEqual(
      new Set(["missing", "malformed", "unknown key", "wrong secret", "revoked", "expired"])
    )
    for (const plaintext of [secret, wrongSecret, known.apiKey, revoked.apiKey, expired.apiKey]) {
      expect(stderr).not.toContain(plaintext)
    }
  })

  it("logs the first 401 from a client address as usual, and the rest as one line with their count", async () => {
    const { result, stderr } = await session(tempDatabase(), {}, async (url) => {
      const answers = []
      for (let i = 0; i < 30; i++) {
        answers.push(await call(url, { path: "/v1/whoami", apiKey: `cak_${"a".repeat(16)}_${"0".repeat(64)}` }))
      }
      return answers
    })
    expect(result.every((answer) => answer.status === 401)).toBe(true)
    expect(accessLog(stderr).filter((entry) => entry.status === 401)).toHaveLength(1)
    const summaries = logLines(stderr).filter((line) => line.message === "repeated unauthorized requests")
    expect(summaries.map((line) => line.annotations)).toEqual([
      expect.objectContaining({ clientAddress: "127.0.0.1", count: 29, status: 401 })
    ])
  })

  it("keeps serving when nobody reads its log any more (the reader of stderr went away)", async () => {
    const port = 20_000 + Math.floor(Math.random() * 20_000)
    const proc = spawn([...program, "serve"], {
      cwd: root,
      env: {
        ...process.env,
        DATABASE_URL: tempDatabase(),
        HOST: "127.0.0.1",
        PORT: String(port),
        LOG_LEVEL: "info",
        SHUTDOWN_DELAY_SECONDS: "0"
      },
      stdout: "ignore",
      stderr: "pipe"
    })
    try {
      const url = `http://127.0.0.1:${port}`
      await eventually(
        "the server to listen",
        async () => (await call(url, { path: "/healthz" }).catch(() => undefined))?.status === 200
      )
      await proc.stderr.cancel()
      for (let i = 0; i < 50; i++) expect((await call(url, { path: "/healthz" })).status).toBe(200)
      await Bun.sleep(100)
      expect(proc.exitCode).toBeNull()
      expect((await call(url, { path: "/healthz" })).status).toBe(200)
    } finally {
      proc.kill("SIGKILL")
    }
  })

  it("LOG_LEVEL=warning leaves the access log out", async () => {
    const { result, stderr } = await session(tempDatabase(), { LOG_LEVEL: "warning" }, async (url) => [
      await call(url, { path: "/healthz" }),
      await call(url, { path: "/nowhere" })
    ])
    expect(result.map((answer) => answer.status)).toEqual([200, 404])
    expect(accessLog(stderr)).toEqual([])
    // The one line it always writes: with PORT=0 the only way to learn the port.
    expect(logLines(stderr).map((line) => line.message)).toContainEqual(
      expect.stringMatching(/^Listening on http:\/\/127\.0\.0\.1:\d+$/)
    )
  })
})

describe("tracing", () => {
  const isServerSpan = (span: OtlpSpan) => span.name.startsWith("http.server")

  describe("with OTEL_EXPORTER_OTLP_ENDPOINT", () => {
    const traced = tempDatabase()
    let collector: OtlpCollector
    let apiKey: string
    let whoamiId: string
    let activateId: string
    let healthId: string

    beforeAll(async () => {
      collector = otlpCollector()
      const key = await createKey(traced)
      apiKey = key.apiKey
      const env = { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url, OTEL_SERVICE_NAME: undefined }
      const { code, result } = await session(traced, env, async (url) => ({
        whoami: await call(url, { path: "/v1/whoami", apiKey }),
        activate: await activate(url, { apiKey, key: crypto.randomUUID() }),
        health: await call(url, { path: "/healthz" })
      }))
      expect(code).toBe(0)
      whoamiId = result.whoami.headers.get("x-request-id")!
      activateId = result.activate.headers.get("x-request-id")!
      healthId = result.health.headers.get("x-request-id")!
    })

    afterAll(() => collector?.stop())

    const serverSpan = (requestId: string) => {
      const found = collector.spans().filter((span) =>
        isServerSpan(span) && spanAttribute(span, "http.response.header.x-request-id") === requestId
      )
      expect(found).toHaveLength(1)
      return found[0]!
    }

    it("exports OTLP/JSON to <endpoint>/v1/traces (and the metrics to /v1/metrics) as service campaign-api", () => {
      expect(collector.received.length).toBeGreaterThan(0)
      expect(new Set(collector.received.map(({ path }) => path))).toEqual(new Set(["/v1/traces", "/v1/metrics"]))
      for (const resource of collector.resources()) {
        expect(resource.attributes).toContainEqual({ key: "service.name", value: { stringValue: "campaign-api" } })
      }
    })

    it("has one http.server span per request, with its route and status", () => {
      expect(collector.spans().filter(isServerSpan)).toHaveLength(3)
      const expected: Array<[string, string, string, number]> = [
        [whoamiId, "GET", "/v1/whoami", 200],
        [activateId, "POST", activateRoute, 200],
        [healthId, "GET", "/healthz", 200]
      ]
      for (const [id, method, route, status] of expected) {
        const span = serverSpan(id)
        expect([
          spanAttribute(span, "http.request.method"),
          spanAttribute(span, "http.route"),
          Number(spanAttribute(span, "http.response.status_code"))
        ]).toEqual([method, route, status])
      }
    })

    it("records the access-log line on the request's span as an event named request, with its fields", () => {
      const events = serverSpan(whoamiId).events ?? []
      const logged = events.filter((event) => event.name === "request")
      expect(logged).toHaveLength(1)
      const fields = Object.fromEntries(logged[0]!.attributes.map(({ key, value }) => [key, Object.values(value)[0]]))
      expect(fields).toMatchObject({
        requestId: whoamiId,
        method: "GET",
        route: "/v1/whoami",
        keyId: expect.any(String)
      })
    })

    it("nests the request's work under its span: ApiKeys.authenticate is a child of whoami's", () => {
      const parent = serverSpan(whoamiId)
      const children = collector.spans().filter((span) => span.parentSpanId === parent.spanId)
      expect(children.map((span) => span.name)).toContain("ApiKeys.authenticate")
      expect(children.every((span) => span.traceId === parent.traceId)).toBe(true)
    })

    it("keeps the activation's own spans in the activate request's trace", () => {
      const parent = serverSpan(activateId)
      const activation = collector.spans().filter((span) => span.name === "Activations.activate")
      expect(activation).toHaveLength(1)
      expect(activation[0]!.traceId).toBe(parent.traceId)
    })

    it("exports the metrics next to the spans: the requests by route and status, the activation created (docs/operators.md, Operating it: Metrics)", () => {
      // The last export, made when the server stopped, holds every count.
      const last = (name: string) => collector.metrics().filter((metric) => metric.name === name).at(-1)
      const whoamiPoints = last("http_server_request_duration_seconds")!.histogram.dataPoints.filter((point: any) =>
        point.attributes.some((a: any) => a.key === "http.route" && a.value.stringValue === "/v1/whoami")
      )
      expect(whoamiPoints).toHaveLength(1)
      expect(whoamiPoints[0].count).toBe(1)
      expect(whoamiPoints[0].attributes).toContainEqual({
        key: "http.response.status_code",
        value: { stringValue: "200" }
      })
      expect(last("api_activations_created_total")!.sum.dataPoints[0].asDouble).toBe(1)
    })

    it("never exports the API key or its secret", () => {
      const exported = JSON.stringify(collector.received)
      expect(exported).not.toContain(apiKey)
      expect(exported).not.toContain(apiKey.split("_")[2]!)
    })
  })

  describe("without OTEL_EXPORTER_OTLP_ENDPOINT", () => {
    let defaultCollector: OtlpCollector

    // 4318 is OTLP/HTTP's default port: a tracer left on by default would send here.
    beforeAll(() => {
      defaultCollector = otlpCollector(4318)
    })

    afterAll(() => defaultCollector?.stop())

    it.each([
      ["unset", { OTEL_EXPORTER_OTLP_ENDPOINT: undefined }],
      ["empty (OpenTelemetry reads an empty variable as unset)", { OTEL_EXPORTER_OTLP_ENDPOINT: "" }]
    ])("exports nothing when the variable is %s", async (_, env: Environment) => {
      const { code, result } = await session(tempDatabase(), env, async (url) => [
        (await call(url, { path: "/healthz" })).status,
        (await call(url, { path: "/v1/whoami" })).status
      ])
      expect(code).toBe(0)
      expect(result).toEqual([200, 401])
      expect(defaultCollector.received).toEqual([])
    })
  })
})
