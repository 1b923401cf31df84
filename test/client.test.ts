import { FetchHttpClient, HttpApiClient, HttpClient, HttpClientRequest } from "@effect/platform"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { CampaignApi } from "../src/Api.ts"
import { campaignId, creatorId } from "./support/client.ts"
import { type InProcessServer, serveInProcess } from "./support/inProcess.ts"
import { createKey, tempDatabase } from "./support/server.ts"

const campaignClient = (baseUrl: string, apiKey: string) =>
  HttpApiClient.make(CampaignApi, {
    baseUrl,
    transformClient: HttpClient.mapRequest(HttpClientRequest.bearerToken(apiKey))
  })

let database: string
let server: InProcessServer

beforeAll(async () => {
  database = tempDatabase()
  server = await serveInProcess(database)
})

afterAll(async () => {
  await server?.stop()
})

describe("the typed client derived from CampaignApi", () => {
  it.effect("resolves its identity and activates a campaign", () =>
    Effect.gen(function*() {
      const key = yield* Effect.promise(() => createKey(database, { scopes: ["campaigns:write"] }))
      const client = yield* campaignClient(server.url, key.apiKey)

      const identity = yield* client.identity.whoami()
      expect(identity).toEqual({ ok: true, keyId: key.keyId, brandId: key.brandId, scopes: ["campaigns:write"] })

      const { activation } = yield* client.activations.activate({
        path: { creatorId, campaignId },
        headers: { "idempotency-key": crypto.randomUUID() },
        payload: { socialUsername: "@janedoe", plannedPostAt: "2026-12-01" }
      })
      expect(activation).toMatchObject({ creatorId, campaignId, status: "ACTIVE", socialUsername: "@janedoe" })

      // Left out, as in the JSON: no planned date.
      const undated = yield* client.activations.activate({
        path: { creatorId, campaignId },
        headers: { "idempotency-key": crypto.randomUUID() },
        payload: { socialUsername: "@janedoe" }
      })
      expect(undated.activation.plannedPostAt).toBeNull()
    }).pipe(Effect.provide(FetchHttpClient.layer)))

  it.effect("fails with the API's tagged errors", () =>
    Effect.gen(function*() {
      const reader = yield* Effect.promise(() => createKey(database, { scopes: ["campaigns:read"] }))
      const writer = yield* Effect.promise(() => createKey(database, { scopes: ["campaigns:write"] }))
      const activate = (apiKey: string, idempotencyKey: string, socialUsername: string) =>
        Effect.flatMap(campaignClient(server.url, apiKey), (client) =>
          client.activations.activate({
            path: { creatorId, campaignId },
            headers: { "idempotency-key": idempotencyKey },
            payload: { socialUsername, plannedPostAt: null }
          }))

      const forbidden = yield* Effect.flip(activate(reader.apiKey, crypto.randomUUID(), "@janedoe"))
      expect(forbidden._tag).toBe("Forbidden")
      expect(forbidden.message).toContain("campaigns:write")

      const idempotencyKey = crypto.randomUUID()
      yield* activate(writer.apiKey, idempotencyKey, "@janedoe")
      const conflict = yield* Effect.flip(activate(writer.apiKey, idempotencyKey, "@someoneelse"))
      expect(conflict._tag).toBe("IdempotencyConflict")
    }).pipe(Effect.provide(FetchHttpClient.layer)))

  it.effect("reads back what it activated: one record, a page, and the campaign's numbers", () =>
    Effect.gen(function*() {
      const key = yield* Effect.promise(() => createKey(database, { scopes: ["campaigns:write", "analytics:read"] }))
      const client = yield* campaignClient(server.url, key.apiKey)
      const campaign = crypto.randomUUID()
      const { activation } = yield* client.activations.activate({
        path: { creatorId, campaignId: campaign },
        headers: { "idempotency-key": crypto.randomUUID() },
        payload: { socialUsername: "@reader", plannedPostAt: "2026-12-01" }
      })
      expect(yield* client.activations.get({ path: { activationId: activation.id } })).toEqual({ ok: true, activation })
      const page = yield* client.activations.list({ urlParams: { campaignId: campaign, limit: "10" } })
      expect(page).toEqual({ ok: true, activations: [activation], hasMore: false })
      const { analytics } = yield* client.analytics.campaign({ path: { campaignId: campaign }, urlParams: {} })
      expect(analytics).toMatchObject({ campaignId: campaign, activations: 1, creators: 1, unscheduled: 0 })
      expect(analytics.plannedPostsByDay).toEqual([{ date: "2026-12-01", posts: 1 }])
      const missing = yield* Effect.flip(client.activations.get({ path: { activationId: crypto.randomUUID() } }))
      expect(missing._tag).toBe("NotFound")
    }).pipe(Effect.provide(FetchHttpClient.layer)))
})
