import { Context, Effect, Layer } from "effect"

/**
 * Where fresh identifiers and secrets come from; tests swap in a predictable source. A new
 * record's id is a UUID of version 7 (time first): a batch's rows go to the end of the id index,
 * not each to a random page, so each commit writes fewer pages to the log (bench/BENCHMARKS.md).
 */
export class Ids extends Context.Tag("Ids")<Ids, {
  readonly uuid: Effect.Effect<string>
  readonly randomBytes: (size: number) => Effect.Effect<Uint8Array>
}>() {
  static readonly Live = Layer.succeed(Ids, {
    uuid: Effect.sync(() => Bun.randomUUIDv7()),
    randomBytes: (size) => Effect.sync(() => crypto.getRandomValues(new Uint8Array(size)))
  })
}
