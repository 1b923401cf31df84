import { Context, DateTime, Effect, Layer, type Option } from "effect"
import { ActivationsRepo, type Page } from "./Activations/ActivationsRepo.ts"
import type { Activation, ActivationRequest } from "./Domain/Activation.ts"
import type { ApiKeyIdentity } from "./Domain/ApiKey.ts"
import { Ids } from "./Ids.ts"
import { spans } from "./Spans.ts"

export class Activations extends Context.Tag("Activations")<Activations, {
  readonly activate: (input: {
    readonly creatorId: string
    readonly campaignId: string
    readonly request: ActivationRequest
    readonly by: ApiKeyIdentity
  }) => Effect.Effect<Activation>
  /** The brand's activation with this id (in any letter case); none for another brand's. */
  readonly find: (brandId: string, id: string) => Effect.Effect<Option.Option<Activation>>
  /** A page of the brand's activations, newest first (docs/integrators.md, Reads). */
  readonly list: (brandId: string, page: Page) => Effect.Effect<ReadonlyArray<Activation>>
}>() {
  static readonly Live = Layer.effect(
    Activations,
    Effect.gen(function*() {
      const span = yield* spans
      const repo = yield* ActivationsRepo
      const ids = yield* Ids
      // The layer's clock (a test's TestClock, in tests), read without an effect of its own.
      const clock = yield* Effect.clock
      return {
        // A pipeline, not `Effect.gen`, as every step a request runs (docs/contributing.md, Layout: the request path).
        activate: ({ by, campaignId, creatorId, request }) =>
          Effect.flatMap(ids.uuid, (id) => {
            const now = clock.unsafeCurrentTimeMillis()
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
          }).pipe(span("Activations.activate")),
        find: (brandId, id) => span("Activations.find")(repo.findById(brandId, id)),
        list: (brandId, page) => span("Activations.list")(repo.list(brandId, page))
      }
    })
  )
}
