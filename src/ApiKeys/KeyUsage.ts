import { Cause, Context, Duration, Effect, Fiber, Layer, Schedule } from "effect"
import { spans } from "../Spans.ts"
import { ApiKeysRepo, type SecretUse } from "./ApiKeysRepo.ts"

/** How precisely last use is kept, and how often it is written: at most once per key per minute. */
const usageResolution = Duration.minutes(1)

/**
 * When each key's secrets were last used (docs/operators.md, The key command line: last used), to the
 * minute, each secret by its digest. A request only notes it in memory; the notes are written in
 * the background, in one batch a minute, and once more when the server stops gracefully, so
 * nothing noted is lost. A batch that fails is kept and written with the next.
 */
export class KeyUsage extends Context.Tag("ApiKeys/KeyUsage")<KeyUsage, {
  /** Notes that the key's secret with this digest was used now: a map lookup, never a write, a lock or a wait. */
  readonly record: (keyId: string, secretSha256: string) => void
}>() {
  static readonly Live = Layer.scoped(
    KeyUsage,
    Effect.gen(function*() {
      const span = yield* spans
      const repo = yield* ApiKeysRepo
      const clock = yield* Effect.clock
      const resolution = Duration.toMillis(usageResolution)
      /** The minute each secret was last noted in, by digest, to tell a new minute from one noted already. */
      const noted = new Map<string, number>()
      /** Noted and not yet written, by digest. */
      let pending = new Map<string, SecretUse>()

      const record = (keyId: string, secretSha256: string) => {
        const now = clock.unsafeCurrentTimeMillis()
        const minute = now - (now % resolution)
        if (noted.get(secretSha256) === minute) return
        noted.set(secretSha256, minute)
        pending.set(secretSha256, { keyId, secretSha256, at: minute })
      }

      /** Writes what was noted since the last write. */
      const flush = Effect.suspend(() => {
        // Notes of an earlier minute are only needed to tell this minute from theirs.
        const now = clock.unsafeCurrentTimeMillis()
        for (const [digest, minute] of noted) if (minute < now - (now % resolution)) noted.delete(digest)
        if (pending.size === 0) return Effect.void
        const batch = pending
        pending = new Map()
        // Kept for the next write, unless a later use of the secret was noted since.
        const keep = () => {
          for (const [digest, use] of batch) if (!pending.has(digest)) pending.set(digest, use)
        }
        // Never interrupted: a stop waits for the write under way (and an interrupted statement
        // would be cancelled on PostgreSQL, see Database/KeyChanges.ts), then writes what is left.
        return Effect.uninterruptible(repo.recordUsage([...batch.values()])).pipe(
          Effect.catchAllCause((cause) =>
            Effect.zipRight(
              Effect.sync(keep),
              Effect.logWarning("last use of API keys not written; kept for the next write", {
                keys: batch.size,
                error: Cause.pretty(cause).split("\n")[0]
              })
            )
          ),
          span("KeyUsage.flush")
        )
      })

      const writing = yield* flush.pipe(
        Effect.repeat(Schedule.spaced(usageResolution)),
        Effect.delay(usageResolution),
        Effect.forkDaemon
      )
      // At a graceful stop, after the server has answered its last request and before the database
      // closes: the minute's writing stopped (a write under way finished first), then the rest written.
      yield* Effect.addFinalizer(() => Effect.zipRight(Fiber.interrupt(writing), flush))
      return { record }
    })
  )
}
