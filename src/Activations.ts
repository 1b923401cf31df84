import { Clock, Context, DateTime, Effect, Layer } from "effect"
import { ActivationsRepo } from "./Activations/ActivationsRepo.ts"
import type { Activation, ActivateRequest } from "./Domain/Activation.ts"
import type { ApiKeyIdentity } from "./Domain/ApiKey.ts"
import { Ids } from "./Ids.ts"
import { span } from "./Edge/Span.ts"

export class Activations extends Context.Tag("Activations")<Activations, {
  readonly activate: (input: {
    readonly creatorId: string
    readonly campaignId: string
    readonly request: ActivateRequest
    readonly by: ApiKeyIdentity
  }) => Effect.Effect<Activation>
}>() {
  static readonly Live = Layer.effect(
    Activations,
    Effect.gen(function*() {
      const repo = yield* ActivationsRepo
      const ids = yield* Ids
      return {
        activate: ({ by, campaignId, creatorId, request }) =>
          Effect.gen(function*() {
          const activation: Activation = {
            id: yield* ids.uuid,
            campaignId,
            creatorId,
            status: "ACTIVE",
            socialUsername: request.socialUsername,
            plannedPostAt: request.plannedPostAt,
            activatedAt: DateTime.formatIso(DateTime.unsafeMake(yield* Clock.currentTimeMillis))
          }
          yield* repo.insert(activation, { brandId: by.brandId, keyId: by.keyId })
          return activation
        }).pipe(span("Activations.activate"))
      }
    })
  )
}
