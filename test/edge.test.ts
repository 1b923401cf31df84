/**
 * The edge's `fetch` in process, with test doubles where a real store is not the point: each
 * endpoint runs the chain its definition declares, in the order of checks (README, Errors), and
 * only the edge turns what steps and handlers return into HTTP.
 */
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Layer, Logger, LogLevel } from "effect"
import { Activations } from "../src/Activations.ts"
import { ActivationsRepo } from "../src/Activations/ActivationsRepo.ts"
import { AnalyticsHandlers } from "../src/Analytics/Http.ts"
import { ActivationsHandlers } from "../src/Activations/Http.ts"
import { CampaignApi } from "../src/Api.ts"
import { ApiKeys } from "../src/ApiKeys.ts"
import { ApiKeysSteps } from "../src/ApiKeys/Http.ts"
import { DatabaseOutage } from "../src/Database/Outage.ts"
import { declaredEndpoints, middlewareOf } from "../src/Declaration.ts"
import type { ApiKeyIdentity, Authenticated, BrandId, KeyId } from "../src/Domain/ApiKey.ts"
import { IdempotencyInProgress, KeyRefused } from "../src/Domain/Errors.ts"
import { makeEdge } from "../src/Edge/Edge.ts"
import type { Handlers, Steps } from "../src/Edge/Exchange.ts"
import { JsonBodySteps } from "../src/Edge/JsonBody.ts"
import { Idempotency } from "../src/Idempotency.ts"
import { IdempotencySteps } from "../src/Idempotency/Http.ts"
import { IdentityHandlers } from "../src/Identity/Http.ts"
import { KeyUsage } from "../src/ApiKeys/KeyUsage.ts"
import { RateLimit, type RateLimitDecision } from "../src/RateLimit.ts"
import { activatePath } from "./support/client.ts"
import { makeTestLayer } from "./support/testLayer.ts"

const writer: ApiKeyIdentity = {
  keyId: "wr1ter0000000000" as KeyId,
  brandId: "0b6f8c1e-4f5a-4c2b-9d7e-1a2b3c4d5e6f" as BrandId,
  scopes: ["campaigns:write"]
}
const reader: ApiKeyIdentity = { ...writer, keyId: "r3ader0000000000" as KeyId, scopes: ["campaigns:read"] }
const endless = (identity: ApiKeyIdentity): Authenticated => ({ identity, endsAt: null, rateLimit: null, secretSha256: "00".repeat(32) })
/** A rolled key's previous secret, in its grace, on a key with a limit of its own. */
const ending: Authenticated = {
  identity: { ...reader, keyId: "end1ng0000000000" as KeyId },
  endsAt: Date.UTC(2026, 11, 1, 9, 30),
  rateLimit: { max: 5, windowSeconds: 30 },
  secretSha256: "ee".repeat(32)
}
const tokens: Record<string, Authenticated> = { "cak_writer": endless(writer), "cak_reader": endless(reader), "cak_ending": ending }

interface Doubles {
  /** What the rate limit decides for every request. */
  decision: RateLimitDecision
  /** How the idempotency double answers: run the operation, or a duplicate still in progress. */
  inProgress: boolean
  activations: number
  /** The secrets whose use the key step noted, by digest. */
  used: Array<string>
}

const makeDoubles = (doubles: Doubles) =>
  Layer.mergeAll(
    // The reads are not what these tests are about: any call to the repository dies, loudly.
    makeTestLayer(ActivationsRepo)({}),
    makeTestLayer(DatabaseOutage)({}),
    makeTestLayer(ApiKeys)({
      authenticate: (token) =>
        tokens[token] === undefined
          ? Effect.fail(new KeyRefused({ reason: "unknown key", keyId: null, brandId: null }))
          : Effect.succeed(tokens[token]!)
    }),
    makeTestLayer(KeyUsage)({ record: (_, secretSha256) => void doubles.used.push(secretSha256) }),
    makeTestLayer(RateLimit)({
      policy: { max: 120, windowSeconds: 60 },
      consume: () => Effect.sync(() => doubles.decision)
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
          ? Effect.fail(new IdempotencyInProgress({ message: "A request with this Idempotency-Key is still being processed; retry shortly." }))
          : Effect.map(operation, ({ body, status }) => ({ status, body, replayed: false }))
    })
  )

const config = ConfigProvider.fromMap(new Map([["PORT", "0"], ["DOCS_ENABLED", "false"]]))

/** The edge as the server builds it, on the doubles; `without` leaves out a middleware tag's step. */
const edgeOn = (doubles: Doubles, without?: string) =>
  Effect.gen(function*() {
    const steps: Steps = { ...(yield* ApiKeysSteps), ...IdempotencySteps, ...JsonBodySteps }
    const health: Handlers<typeof CampaignApi>["health"] = {
      alive: () => Effect.succeed({ status: 200, body: "{}" }),
      ready: () => Effect.succeed({ status: 200, body: "{}" })
    }
    return yield* makeEdge({
      api: CampaignApi,
      handlers: {
        activations: yield* ActivationsHandlers,
        analytics: yield* AnalyticsHandlers,
        identity: yield* IdentityHandlers,
        health
      },
      steps: without === undefined ? steps : Object.fromEntries(Object.entries(steps).filter(([key]) => key !== without)),
      synchronousGets: true
    })
  }).pipe(
    Effect.provide(makeDoubles(doubles)),
    Effect.withConfigProvider(config),
    Logger.withMinimumLogLevel(LogLevel.None),
    Effect.runPromise
  )

const fresh = (): Doubles => ({
  decision: { allowed: true, remaining: 119, retryAfterSeconds: 0 },
  inProgress: false,
  activations: 0,
  used: []
})

/** A request that fails every check that `passing` does not name, in the order of checks. */
const activation = (passing: ReadonlyArray<"key" | "scope" | "idempotencyKey" | "mediaType" | "json" | "valid">) =>
  new Request(`http://localhost${activatePath()}`, {
    method: "POST",
    headers: {
      ...(passing.includes("key") ? { authorization: `Bearer ${passing.includes("scope") ? "cak_writer" : "cak_reader"}` } : {}),
      ...(passing.includes("idempotencyKey") ? { "idempotency-key": "order-1" } : {}),
      "content-type": passing.includes("mediaType") ? "application/json" : "text/plain"
    },
    body: !passing.includes("json") ? "{" : passing.includes("valid") ? `{"socialUsername":"@jane"}` : `{"socialUsername":"jane"}`
  })

const answer = async (response: Response | Promise<Response>) => {
  const resolved = await response
  return { status: resolved.status, headers: resolved.headers.toJSON() as Record<string, string>, json: await resolved.json() }
}

describe("the edge, in process on test doubles", () => {
  it("runs each endpoint's declared middleware in the order of checks: the first that fails answers, and nothing after it runs", async () => {
    const doubles = fresh()
    const { fetch } = await edgeOn(doubles)
    const ladder = [
      [[], 401, "UNAUTHORIZED"],
      [["key"], 403, "FORBIDDEN"],
      [["key", "scope"], 400, "IDEMPOTENCY_KEY_REQUIRED"],
      [["key", "scope", "idempotencyKey"], 415, "UNSUPPORTED_MEDIA_TYPE"],
      [["key", "scope", "idempotencyKey", "mediaType"], 400, "MALFORMED_JSON"],
      [["key", "scope", "idempotencyKey", "mediaType", "json"], 400, "VALIDATION_ERROR"]
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

  it("reads the order from the definition: activate declares key, scope, Idempotency-Key and JSON body; the reads key and scope; whoami the key alone", () => {
    const declared = Object.fromEntries(
      declaredEndpoints(CampaignApi).map((endpoint) => [
        `${endpoint.group.identifier}.${endpoint.endpoint.name}`,
        middlewareOf(endpoint).map((tag) => tag.key)
      ])
    )
    expect(declared).toEqual({
      "activations.activate": ["ApiKeys/ApiKeyAuth", "ApiKeys/RequireScope", "Idempotency/RequireIdempotencyKey", "JsonBody"],
      "activations.get": ["ApiKeys/ApiKeyAuth", "ApiKeys/RequireScope"],
      "activations.list": ["ApiKeys/ApiKeyAuth", "ApiKeys/RequireScope"],
      "analytics.campaign": ["ApiKeys/ApiKeyAuth", "ApiKeys/RequireScope"],
      "identity.whoami": ["ApiKeys/ApiKeyAuth"],
      "health.alive": [],
      "health.ready": []
    })
  })

  it("tells a secret's end in Api-Key-Expires and a key's own limit in its RateLimit headers, on a 200, a 403 and a 429, and notes each use of the secret", async () => {
    const doubles = fresh()
    const { fetch } = await edgeOn(doubles)
    const request = (path: string, init: RequestInit = {}) =>
      fetch(new Request(`http://localhost${path}`, { ...init, headers: { authorization: "Bearer cak_ending", ...init.headers } }))
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
    expect(limited.json.message).toBe("Rate limit exceeded: 5 requests per 30 seconds for this API key. Retry after 6 seconds.")
    expect(limited.headers).toMatchObject({ "api-key-expires": expires, "ratelimit-policy": `"default";q=5;w=30`, "retry-after": "6" })
    // A secret without an end says nothing of one; the server's limit is the policy's.
    doubles.decision = { allowed: true, remaining: 119, retryAfterSeconds: 0 }
    const endless = await answer(fetch(new Request("http://localhost/v1/whoami", { headers: { authorization: "Bearer cak_writer" } })))
    expect(endless.headers["api-key-expires"]).toBeUndefined()
    expect(endless.headers["ratelimit-policy"]).toBe(`"default";q=120;w=60`)
    expect(doubles.used).toEqual(["ee".repeat(32), "ee".repeat(32), "ee".repeat(32), "00".repeat(32)])
  })

  it("refuses to start when a declared middleware has no step, naming the endpoint and the tag", async () => {
    await expect(edgeOn(fresh(), "JsonBody")).rejects.toThrow("activations.activate declares JsonBody, which has no step")
  })

  it("keeps the headers a passed step added on a later refusal: a 403 carries the RateLimit headers and the scope's challenge", async () => {
    const { fetch } = await edgeOn(fresh())
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
    const { fetch } = await edgeOn(doubles)
    const { headers, json, status } = await answer(fetch(activation(["key"])))
    expect({ status, code: json.code }).toEqual({ status: 429, code: "RATE_LIMITED" })
    expect(headers).toMatchObject({ "retry-after": "7", "ratelimit": `"default";r=0;t=7` })
    expect(headers["www-authenticate"]).toBeUndefined()
  })

  it("answers whoami from the key its step gave the handler, synchronously", async () => {
    const { fetch } = await edgeOn(fresh())
    const response = fetch(new Request("http://localhost/v1/whoami", { headers: { authorization: "Bearer cak_reader" } }))
    expect(response).toBeInstanceOf(Response)
    expect((await answer(response)).json).toStrictEqual({ ok: true, keyId: reader.keyId, brandId: reader.brandId, scopes: ["campaigns:read"] })
  })

  it("turns the idempotency service's plain answer into HTTP: a duplicate still in progress is 409 with Retry-After: 1", async () => {
    const doubles = fresh()
    doubles.inProgress = true
    const { fetch } = await edgeOn(doubles)
    const { headers, json, status } = await answer(fetch(activation(["key", "scope", "idempotencyKey", "mediaType", "json", "valid"])))
    expect({ status, code: json.code }).toEqual({ status: 409, code: "IDEMPOTENCY_IN_PROGRESS" })
    expect(headers["retry-after"]).toBe("1")
  })
})
