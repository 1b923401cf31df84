import { FetchHttpClient, HttpApiClient, HttpClient, HttpClientRequest } from "@effect/platform"
import { CampaignApi } from "campaign-api-client"
import { Config, Effect } from "effect"

const program = Effect.gen(function*() {
  const baseUrl = yield* Config.string("API_URL").pipe(Config.withDefault("http://localhost:3000"))
  const apiKey = yield* Config.redacted("API_KEY")
  const client = yield* HttpApiClient.make(CampaignApi, {
    baseUrl,
    transformClient: HttpClient.mapRequest(HttpClientRequest.bearerToken(apiKey))
  })

  const alive = yield* client.health.alive()
  const ready = yield* client.health.ready()
  const whoami = yield* client.identity.whoami()

  const path = { creatorId: crypto.randomUUID(), campaignId: crypto.randomUUID() }
  const idempotencyKey = crypto.randomUUID()
  const { activation } = yield* client.activations.activate({
    path,
    headers: { "idempotency-key": idempotencyKey },
    payload: { socialUsername: "@janedoe", plannedPostAt: "2026-12-01" }
  })
  const fetched = yield* client.activations.get({ path: { activationId: activation.id } })
  const page = yield* client.activations.list({ urlParams: { campaignId: path.campaignId, limit: "10" } })
  const { analytics } = yield* client.analytics.campaign({ path: { campaignId: path.campaignId }, urlParams: {} })

  // The same Idempotency-Key with another body: the error envelope arrives as its tagged error.
  const conflict = yield* client.activations.activate({
    path,
    headers: { "idempotency-key": idempotencyKey },
    payload: { socialUsername: "@someoneelse" }
  }).pipe(
    Effect.as("activated"),
    Effect.catchTag("IdempotencyConflict", (error) => Effect.succeed(error._tag))
  )

  console.log(JSON.stringify({ alive, ready, whoami, activation, fetched, page, analytics, conflict }))
}).pipe(Effect.provide(FetchHttpClient.layer))

void Effect.runPromise(program)
