/**
 * The edge's `fetch` in process, with test doubles where a real store is not the point: each
 * endpoint runs the middleware its definition declares in the order HttpApiBuilder runs them,
 * which is the order of checks (docs/integrators.md, Errors); the same layers served by HttpApiBuilder's own web
 * handler answer the same.
 */
import { HttpApiBuilder, HttpServer } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Deferred, Effect, Exit, Layer, Logger, LogLevel } from "effect"
import { Activations } from "../src/Activations.ts"
import { ActivationsRepo } from "../src/Activations/ActivationsRepo.ts"
import { ActivationsHandlers } from "../src/Activations/Http.ts"
import { JsonBodyLive } from "../src/Activations/JsonBody.ts"
import { Analytics } from "../src/Analytics.ts"
import { AnalyticsHandlers } from "../src/Analytics/Http.ts"
import { CampaignApi } from "../src/Api.ts"
import { ApiKeys } from "../src/ApiKeys.ts"
import { keysMiddlewareOf } from "../src/ApiKeys/Http.ts"
import { KeyUsage } from "../src/ApiKeys/KeyUsage.ts"
import { ApiLive, MiddlewareLive } from "../src/App.ts"
import { DatabaseOutage } from "../src/Database/Outage.ts"
import { declaredEndpoints, middlewareOf } from "../src/Declaration.ts"
import { analyticsLine } from "../src/Domain/Activation.ts"
import type { ApiKeyIdentity, Authenticated, BrandId, KeyId } from "../src/Domain/ApiKey.ts"
import { IdempotencyInProgress, KeyRefused } from "../src/Domain/Errors.ts"
import { Draining } from "../src/Draining.ts"
import { documentHandlers } from "../src/Edge/Documents.ts"
import { makeEdge } from "../src/Edge/Edge.ts"
import { HealthRepo } from "../src/Health/HealthRepo.ts"
import { HealthHandlers } from "../src/Health/Http.ts"
import { Idempotency } from "../src/Idempotency.ts"
import { RequireIdempotencyKeyLive } from "../src/Idempotency/Http.ts"
import { IdentityHandlers } from "../src/Identity/Http.ts"
import { Metrics, MetricsOff } from "../src/Metrics.ts"
import { RateLimit, type RateLimitDecision } from "../src/RateLimit.ts"
import { Warming } from "../src/WarmUp.ts"
import { activatePath } from "./support/client.ts"
import { eventually } from "./support/load.ts"
import { annotationOf, captureLogs } from "./support/telemetry.ts"
import { makeTestLayer } from "./support/testLayer.ts"

const writer: ApiKeyIdentity = {
  keyId: "wr1ter0000000000" as KeyId,
  brandId: "0b6f8c1e-4f5a-4c2b-9d7e-1a2b3c4d5e6f" as BrandId,
  scopes: ["campaigns:write"]
}
const reader: ApiKeyIdentity = { ...writer, keyId: "r3ader0000000000" as KeyId, scopes: ["campaigns:read"] }
const endless = (identity: ApiKeyIdentity): Authenticated => ({
  identity,
  endsAt: null,
  rateLimit: null,
  secretSha256: "00".repeat(32)
})
/** A rolled key's previous secret, in its grace, on a key with a limit of its own. */
const ending: Authenticated = {
  identity: { ...reader, keyId: "end1ng0000000000" as KeyId },
  endsAt: Date.UTC(2026, 11, 1, 9, 30),
  rateLimit: { max: 5, windowSeconds: 30 },
  secretSha256: "ee".repeat(32)
}
const analyst: ApiKeyIdentity = { ...writer, keyId: "analy5t000000000" as KeyId, scopes: ["analytics:read"] }
const tokens: Record<string, Authenticated> = {
  "cak_writer": endless(writer),
  "cak_reader": endless(reader),
  "cak_ending": ending,
  "cak_analyst": endless(analyst)
}

interface Doubles {
  /** What the rate limit decides for every request. */
  decision: RateLimitDecision
  /** How the idempotency double answers: run the operation, or a duplicate still in progress. */
  inProgress: boolean
  activations: number
  /** The secrets whose use the key step noted, by digest. */
  used: Array<string>
  /** Each analytics count asked for, held until the test lets it answer; `stopped` once interrupted before. */
  counts: Array<{ readonly answer: Deferred.Deferred<void>; stopped: boolean }>
}

const makeDoubles = (doubles: Doubles, metrics: Layer.Layer<Metrics> = MetricsOff) =>
  Layer.mergeAll(
    // The analytics as they are, on counts the test holds; the reads are not what these tests are
    // about: any call dies, loudly.
    Analytics.Live.pipe(Layer.provide(
      makeTestLayer(ActivationsRepo)({
        counts: () =>
          Effect.flatMap(Deferred.make<void>(), (answer) => {
            const held = { answer, stopped: false }
            doubles.counts.push(held)
            return Effect.as(Deferred.await(answer), { byDay: [], byPlannedDay: [], unscheduled: 0, creators: 0 }).pipe(
              Effect.onInterrupt(() => Effect.sync(() => held.stopped = true))
            )
          })
      })
    )),
    makeTestLayer(DatabaseOutage)({}),
    metrics,
    makeTestLayer(HealthRepo)({ database: "sqlite", ping: Effect.void }),
    Draining.Live,
    Warming.Live,
    makeTestLayer(ApiKeys)({
      authenticate: (token) =>
        tokens[token] === undefined
          ? Effect.fail(new KeyRefused({ reason: "unknown key", keyId: null, brandId: null }))
          : Effect.succeed(tokens[token]!)
    }),
    makeTestLayer(KeyUsage)({ record: (_, secretSha256) => void doubles.used.push(secretSha256) }),
    makeTestLayer(RateLimit)({
      policy: { max: 120, windowSeconds: 60 },
      consume: () => Effect.sync(() => doubles.decision),
      status: () => "memory"
    }),
    makeTestLayer(Activations)({
      activate: ({ campaignId, creatorId, request }) =>
        Effect.sync(() => {
          doubles.activations++
          return {
            id: "b3af032d-83ae-454d-b26e-68ac511bf8d9",
            campaignId,
            creatorId,
            status: "ACTIVE" as const,
            socialUsername: request.socialUsername,
            plannedPostAt: request.plannedPostAt,
            activatedAt: "2026-11-25T12:00:00.000Z"
          }
        })
    }),
    makeTestLayer(Idempotency)({
      run: (_, operation) =>
        doubles.inProgress
          ? Effect.fail(
            new IdempotencyInProgress({
              message: "A request with this Idempotency-Key is still being processed; retry shortly."
            })
          )
          : Effect.map(operation, ({ body, status }) => ({ status, body, replayed: false }))
    })
  )

const config = ConfigProvider.fromMap(new Map([["PORT", "0"], ["DOCS_ENABLED", "false"]]))

/** The edge as the server builds it, on the doubles: the handlers, and the middleware from their layers. */
const edgeProgramWith = (synchronousGets: boolean) =>
  Effect.gen(function*() {
    return yield* makeEdge({
      api: CampaignApi,
      handlers: {
        activations: yield* ActivationsHandlers,
        analytics: yield* AnalyticsHandlers,
        identity: yield* IdentityHandlers,
        health: yield* HealthHandlers,
        documents: yield* documentHandlers(CampaignApi)
      },
      synchronousGets
    })
  })
const edgeProgram = edgeProgramWith(true)

type Fetch = (request: Request) => Response | Promise<Response>

const edgeOn = (
  doubles: Doubles,
  { logged = LogLevel.None, logs = Layer.empty, metrics = MetricsOff, synchronousGets = true }: {
    readonly logged?: LogLevel.LogLevel
    readonly logs?: Layer.Layer<never>
    readonly metrics?: Layer.Layer<Metrics>
    readonly synchronousGets?: boolean
  } = {}
): Promise<{ readonly fetch: Fetch }> =>
  edgeProgramWith(synchronousGets).pipe(
    Effect.provide(MiddlewareLive),
    Effect.provide(makeDoubles(doubles, metrics)),
    Effect.provide(logs),
    Effect.withConfigProvider(config),
    Logger.withMinimumLogLevel(logged),
    Effect.runPromise
  )

/** The same layers served by HttpApiBuilder's own web handler. */
const libraryOn = (doubles: Doubles): { readonly fetch: Fetch } => {
  const { handler } = HttpApiBuilder.toWebHandler(
    Layer.mergeAll(ApiLive, HttpServer.layerContext).pipe(
      Layer.provide(makeDoubles(doubles)),
      Layer.provide(Logger.minimumLogLevel(LogLevel.None))
    )
  )
  return { fetch: (request) => handler(request) }
}

const fresh = (): Doubles => ({
  decision: { allowed: true, remaining: 119, retryAfterSeconds: 0 },
  inProgress: false,
  activations: 0,
  used: [],
  counts: []
})

const campaignId = "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d"
const analyticsOf = (init: RequestInit = {}) =>
  new Request(`http://localhost/v1/campaigns/${campaignId}/analytics`, {
    ...init,
    headers: { authorization: "Bearer cak_analyst" }
  })
/** A promise's value once it has one: a state waited for, and named if it never comes. */
const settled = async <A>(what: string, promise: Promise<A>): Promise<A> => {
  let done = false
  void promise.finally(() => done = true)
  await eventually(what, () => done)
  return promise
}
/** Lets the held counts answer in the order they were asked for, each once it has been asked for. */
const answerCounts = async (doubles: Doubles, how: number) => {
  for (let i = 0; i < how; i++) {
    await eventually(`count ${i + 1} asked for`, () => doubles.counts.length > i)
    Deferred.unsafeDone(doubles.counts[i]!.answer, Exit.void)
  }
}

/** A request that fails every check that `passing` does not name, in the order of checks. */
const activation = (passing: ReadonlyArray<"key" | "scope" | "idempotencyKey" | "mediaType" | "json" | "valid">) =>
  new Request(`http://localhost${activatePath()}`, {
    method: "POST",
    headers: {
      ...(passing.includes("key")
        ? { authorization: `Bearer ${passing.includes("scope") ? "cak_writer" : "cak_reader"}` }
        : {}),
      ...(passing.includes("idempotencyKey") ? { "idempotency-key": "order-1" } : {}),
      "content-type": passing.includes("mediaType") ? "application/json" : "text/plain"
    },
    body: !passing.includes("json")
      ? "{"
      : passing.includes("valid")
      ? `{"socialUsername":"@jane"}`
      : `{"socialUsername":"jane"}`
  })

const answer = async (response: Response | Promise<Response>) => {
  const resolved = await response
  return {
    status: resolved.status,
    headers: resolved.headers.toJSON() as Record<string, string>,
    json: await resolved.json()
  }
}

const servers = [
  { name: "the edge", on: edgeOn },
  { name: "HttpApiBuilder's web handler", on: (doubles: Doubles) => Promise.resolve(libraryOn(doubles)) }
] as const

describe.each(servers)("$name, in process on test doubles", ({ on }) => {
  it("runs each endpoint's declared middleware in the order of checks: the first that fails answers, and nothing after it runs", async () => {
    const doubles = fresh()
    const { fetch } = await on(doubles)
    const ladder = [
      [[], 401, "UNAUTHORIZED"],
      [["key"], 403, "FORBIDDEN"],
      [["key", "scope"], 400, "IDEMPOTENCY_KEY_REQUIRED"],
      [["key", "scope", "idempotencyKey"], 415, "UNSUPPORTED_MEDIA_TYPE"],
      [["key", "scope", "idempotencyKey", "mediaType"], 400, "MALFORMED_JSON"]
    ] as const
    for (const [passing, status, code] of ladder) {
      const { json, status: got } = await answer(fetch(activation(passing)))
      expect({ passing, status: got, code: json.code }).toEqual({ passing, status, code })
    }
    expect(doubles.activations).toBe(0)
    const passed = await answer(fetch(activation(["key", "scope", "idempotencyKey", "mediaType", "json", "valid"])))
    expect(passed.status).toBe(200)
    expect(passed.json.activation.socialUsername).toBe("@jane")
    expect(doubles.activations).toBe(1)
  })

  it("tells a secret's end in Api-Key-Expires and a key's own limit in its RateLimit headers, on a 200, a 403 and a 429, and notes each use of the secret", async () => {
    const doubles = fresh()
    const { fetch } = await on(doubles)
    const request = (path: string, init: RequestInit = {}) =>
      fetch(
        new Request(`http://localhost${path}`, {
          ...init,
          headers: { authorization: "Bearer cak_ending", ...init.headers }
        })
      )
    const expires = "Tue, 01 Dec 2026 09:30:00 GMT"
    const ok = await answer(request("/v1/whoami"))
    expect(ok.status).toBe(200)
    expect(ok.json.keyId).toBe("end1ng0000000000")
    expect(ok.headers).toMatchObject({ "api-key-expires": expires, "ratelimit-policy": `"default";q=5;w=30` })
    const forbidden = await answer(request(activatePath(), { method: "POST", body: "{}" }))
    expect(forbidden.status).toBe(403)
    expect(forbidden.headers["api-key-expires"]).toBe(expires)
    doubles.decision = { allowed: false, remaining: 0, retryAfterSeconds: 6 }
    const limited = await answer(request("/v1/whoami"))
    expect(limited.status).toBe(429)
    expect(limited.json.message).toBe(
      "Rate limit exceeded: 5 requests per 30 seconds for this API key. Retry after 6 seconds."
    )
    expect(limited.headers).toMatchObject({
      "api-key-expires": expires,
      "ratelimit-policy": `"default";q=5;w=30`,
      "retry-after": "6"
    })
    // A secret without an end says nothing of one; the server's limit is the policy's.
    doubles.decision = { allowed: true, remaining: 119, retryAfterSeconds: 0 }
    const endless = await answer(
      fetch(new Request("http://localhost/v1/whoami", { headers: { authorization: "Bearer cak_writer" } }))
    )
    expect(endless.headers["api-key-expires"]).toBeUndefined()
    expect(endless.headers["ratelimit-policy"]).toBe(`"default";q=120;w=60`)
    expect(doubles.used).toEqual(["ee".repeat(32), "ee".repeat(32), "ee".repeat(32), "00".repeat(32)])
  })

  it("keeps the headers a passed middleware added on a later refusal: a 403 carries the RateLimit headers and the scope's challenge", async () => {
    const { fetch } = await on(fresh())
    const { headers, status } = await answer(fetch(activation(["key"])))
    expect(status).toBe(403)
    expect(headers).toMatchObject({
      "ratelimit-policy": `"default";q=120;w=60`,
      "ratelimit": `"default";r=119;t=0`,
      "www-authenticate": `Bearer error="insufficient_scope", scope="campaigns:write"`
    })
  })

  it("turns the rate limit's decision into a 429 with Retry-After, before the scope is looked at", async () => {
    const doubles = fresh()
    doubles.decision = { allowed: false, remaining: 0, retryAfterSeconds: 7 }
    const { fetch } = await on(doubles)
    const { headers, json, status } = await answer(fetch(activation(["key"])))
    expect({ status, code: json.code }).toEqual({ status: 429, code: "RATE_LIMITED" })
    expect(headers).toMatchObject({ "retry-after": "7", "ratelimit": `"default";r=0;t=7` })
    expect(headers["www-authenticate"]).toBeUndefined()
  })

  it("answers whoami from the key its middleware gave the handler", async () => {
    const { fetch } = await on(fresh())
    const response = fetch(
      new Request("http://localhost/v1/whoami", { headers: { authorization: "Bearer cak_reader" } })
    )
    expect((await answer(response)).json).toStrictEqual({
      ok: true,
      keyId: reader.keyId,
      brandId: reader.brandId,
      scopes: ["campaigns:read"]
    })
  })

  it("turns the idempotency service's plain answer into HTTP: a duplicate still in progress is 409 with Retry-After: 1", async () => {
    const doubles = fresh()
    doubles.inProgress = true
    const { fetch } = await on(doubles)
    const { headers, json, status } = await answer(
      fetch(activation(["key", "scope", "idempotencyKey", "mediaType", "json", "valid"]))
    )
    expect({ status, code: json.code }).toEqual({ status: 409, code: "IDEMPOTENCY_IN_PROGRESS" })
    expect(headers["retry-after"]).toBe("1")
  })
})

/** The servers, and the edge as it serves every request with a promise (PostgreSQL, Redis). */
const waitingServers = [
  ...servers,
  {
    name: "the edge, every request in a promise",
    on: (doubles: Doubles) => edgeOn(doubles, { synchronousGets: false })
  }
] as const

describe.each(waitingServers)("$name, with a brand's analytics calls in line", ({ on }) => {
  it(`answers the call past its line 429 CONCURRENCY_LIMITED with Retry-After and none of the key's RateLimit headers`, async () => {
    const doubles = fresh()
    const { fetch } = await on(doubles)
    const calls = Array.from({ length: 2 + analyticsLine.waiting }, () => Promise.resolve(fetch(analyticsOf())))
    const answered: Array<number> = []
    calls.forEach((call, i) => void call.then(() => answered.push(i)))
    // One is being answered and the line's others wait for it: the one past them is answered first.
    await eventually("a call answered", () => answered.length > 0)
    expect(answered).toEqual([calls.length - 1])
    const refused = await answer(calls.at(-1)!)
    expect({ status: refused.status, code: refused.json.code }).toEqual({ status: 429, code: "CONCURRENCY_LIMITED" })
    expect(refused.headers["retry-after"]).toBe("1")
    expect(refused.headers["ratelimit"]).toBeUndefined()
    expect(refused.headers["ratelimit-policy"]).toBeUndefined()
    await answerCounts(doubles, calls.length - 1)
    for (const call of calls.slice(0, -1)) {
      const answered = await answer(call)
      expect(answered.status).toBe(200)
      // An answer of the line carries the key's quota, as any other.
      expect(answered.headers).toMatchObject({ "ratelimit-policy": `"default";q=120;w=60` })
      expect(answered.headers["retry-after"]).toBeUndefined()
    }
  })
})

describe.each(waitingServers)("$name, when a client goes", ({ on }) => {
  it("interrupts its request: the read stops, the brand's next call is answered at once, and it is answered 499", async () => {
    const doubles = fresh()
    const { fetch } = await on(doubles)
    const client = new AbortController()
    const left = Promise.resolve(fetch(analyticsOf({ signal: client.signal })))
    const next = Promise.resolve(fetch(analyticsOf()))
    await eventually("the first call's read", () => doubles.counts.length === 1)
    client.abort()
    await eventually("the next call's read", () => doubles.counts.length === 2)
    expect(doubles.counts[0]!.stopped).toBe(true)
    expect((await settled("the left call answered", left)).status).toBe(499)
    Deferred.unsafeDone(doubles.counts[1]!.answer, Exit.void)
    expect((await next).status).toBe(200)
  })
})

describe("the edge's own", () => {
  it("logs a request whose client went as its access line with status 499, counts it as 499, and logs nothing unexpected", async () => {
    const doubles = fresh()
    const statuses: Array<number> = []
    const nothing = () => {}
    const metrics = Layer.succeed(Metrics, {
      on: true,
      answered: (_method, _route, status) => void statuses.push(status),
      replayed: nothing,
      conflicted: nothing,
      activationCreated: nothing,
      committed: nothing,
      databaseUnavailable: nothing
    })
    // Tracing is on here (Effect's own tracer): the access line is the message "request" with its fields.
    const { layer: logs, lines } = captureLogs(({ annotations, logLevel, message }) => ({
      level: logLevel.label,
      message: (message as ReadonlyArray<unknown>)[0],
      status: annotationOf(annotations, "status"),
      route: annotationOf(annotations, "route"),
      keyId: annotationOf(annotations, "keyId")
    }))
    const { fetch } = await edgeOn(doubles, { logged: LogLevel.Info, logs, metrics })
    const client = new AbortController()
    const left = Promise.resolve(fetch(analyticsOf({ signal: client.signal })))
    await eventually("the call's read", () => doubles.counts.length === 1)
    client.abort()
    expect((await settled("the left call answered", left)).status).toBe(499)
    expect(lines).toEqual([{
      level: "INFO",
      message: "request",
      status: 499,
      route: "/v1/campaigns/:campaignId/analytics",
      keyId: analyst.keyId
    }])
    expect(statuses).toEqual([499])
  })

  it("answers a valid body's failed validation as VALIDATION_ERROR naming the field (the library's own server says HttpApiDecodeError)", async () => {
    const { fetch } = await edgeOn(fresh())
    const { json, status } = await answer(fetch(activation(["key", "scope", "idempotencyKey", "mediaType", "json"])))
    expect({ status, json }).toEqual({
      status: 400,
      json: { ok: false, code: "VALIDATION_ERROR", message: `socialUsername must start with "@"` }
    })
  })

  it("answers whoami synchronously: nothing it runs waits", async () => {
    const { fetch } = await edgeOn(fresh())
    const response = fetch(
      new Request("http://localhost/v1/whoami", { headers: { authorization: "Bearer cak_reader" } })
    )
    expect(response).toBeInstanceOf(Response)
  })

  it("reads the order from the definition as HttpApiBuilder runs it: the last declared first", () => {
    const declared = Object.fromEntries(
      declaredEndpoints(CampaignApi).map((endpoint) => [
        `${endpoint.group.identifier}.${endpoint.endpoint.name}`,
        middlewareOf(endpoint).map((tag) => tag.key)
      ])
    )
    // The order of checks of docs/integrators.md for its operations (an endpoint added later is read the same way).
    expect(declared).toMatchObject({
      "activations.activate": ["ApiKeys/CampaignsWriteKey", "Idempotency/RequireIdempotencyKey", "JsonBody"],
      "activations.get": ["ApiKeys/CampaignsReadKey"],
      "activations.list": ["ApiKeys/CampaignsReadKey"],
      "analytics.campaign": ["ApiKeys/AnalyticsReadKey"],
      "identity.whoami": ["ApiKeys/ApiKeyAuth"],
      "health.alive": [],
      "health.ready": [],
      "documents.index": [],
      "documents.openApi": []
    })
  })

  it("needs the implementation of every middleware the definition declares: one left out is a type error", () => {
    const withoutJsonBody = edgeProgram.pipe(
      Effect.provide(Layer.merge(keysMiddlewareOf(CampaignApi), RequireIdempotencyKeyLive)),
      Effect.provide(makeDoubles(fresh()))
    )
    // @ts-expect-error activate declares JsonBody, which nothing implements here
    const complete: Effect.Effect<unknown, unknown, never> = withoutJsonBody
    expect(Effect.isEffect(complete)).toBe(true)
    const withAll: Effect.Effect<unknown, unknown, never> = edgeProgram.pipe(
      Effect.provide(Layer.mergeAll(keysMiddlewareOf(CampaignApi), RequireIdempotencyKeyLive, JsonBodyLive)),
      Effect.provide(makeDoubles(fresh()))
    )
    expect(Effect.isEffect(withAll)).toBe(true)
  })
})
