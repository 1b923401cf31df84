import { Context, Effect, Layer } from "effect"

/** Where fresh identifiers and secrets come from; tests swap in a predictable source. */
export class Ids extends Context.Tag("Ids")<Ids, {
  readonly uuid: Effect.Effect<string>
  readonly randomBytes: (size: number) => Effect.Effect<Uint8Array>
}>() {
  static readonly Live = Layer.succeed(Ids, {
    uuid: Effect.sync(() => crypto.randomUUID()),
    randomBytes: (size) => Effect.sync(() => crypto.getRandomValues(new Uint8Array(size)))
  })
}
