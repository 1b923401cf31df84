import { Clock, Context, DateTime, Effect, Layer } from "effect"
import { ActivationsRepo } from "./Activations/ActivationsRepo.ts"
import type { Activation, ActivationRequest } from "./Domain/Activation.ts"
import type { ApiKeyIdentity } from "./Domain/ApiKey.ts"
import { Ids } from "./Ids.ts"
import { span } from "./Edge/Span.ts"

export class Activations extends Context.Tag("Activations")<Activations, {
  readonly activate: (input: {
    readonly creatorId: string
    readonly campaignId: string
    readonly request: ActivationRequest
    readonly by: ApiKeyIdentity
  }) => Effect.Effect<Activation>
}>() {
  static readonly Live = Layer.effect(
    Activations,
    Effect.gen(function*() {
      const repo = yield* ActivationsRepo
      const ids = yield* Ids
      return {
        // A pipeline, not `Effect.gen`, as every step a request runs (Activations/Http.ts says why).
        activate: ({ by, campaignId, creatorId, request }) =>
          Effect.flatMap(ids.uuid, (id) =>
            Effect.flatMap(Clock.currentTimeMillis, (now) => {
              const activation: Activation = {
                id,
                campaignId,
                creatorId,
                status: "ACTIVE",
                socialUsername: request.socialUsername,
                plannedPostAt: request.plannedPostAt,
                activatedAt: DateTime.formatIso(DateTime.unsafeMake(now))
              }
              return Effect.as(repo.insert(activation, { brandId: by.brandId, keyId: by.keyId }), activation)
            })).pipe(span("Activations.activate"))
      }
    })
  )
}
