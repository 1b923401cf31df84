import { Context, Deferred, Effect, Exit, Layer } from "effect"

/**
 * Whether the server has been told to stop, and whether at once (docs/operators.md, Operating it: Shutdown).
 * The web server starts it on SIGTERM or SIGINT; readiness answers 503 from then on, so a load
 * balancer takes the instance out of rotation while its requests are still served. SIGINT, Ctrl-C
 * at a terminal, has no balancer to wait for: from it on, whenever it comes, `atOnce` is true and
 * `whenAtOnce` completes, and the server skips what remains of the shutdown delay.
 */
export class Draining extends Context.Tag("Draining")<Draining, {
  readonly started: () => boolean
  readonly start: () => void
  readonly atOnce: Effect.Effect<boolean>
  readonly whenAtOnce: Effect.Effect<void>
}>() {
  static readonly Live = Layer.scoped(
    Draining,
    Effect.gen(function*() {
      let started = false
      const interrupted = yield* Deferred.make<void>()
      const onInterrupt = () => Deferred.unsafeDone(interrupted, Exit.void)
      // Once: the runtime stops listening on its first signal too, so that another Ctrl-C ends the
      // process outright, as a terminal's user expects.
      yield* Effect.acquireRelease(
        Effect.sync(() => process.once("SIGINT", onInterrupt)),
        () => Effect.sync(() => process.removeListener("SIGINT", onInterrupt))
      )
      return {
        started: () => started,
        start: () => {
          started = true
        },
        atOnce: Deferred.isDone(interrupted),
        whenAtOnce: Deferred.await(interrupted)
      }
    })
  )
}
