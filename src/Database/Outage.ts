import type { Cause } from "effect"
import { Clock, Context, Duration, Effect, Layer, Schedule } from "effect"
import { Metrics } from "../Metrics.ts"

/** At most one "database unavailable" line per this long: an outage fails every request alike. */
const logInterval = Duration.seconds(10)

/**
 * What a database outage costs the log (docs/operators.md, Operating it): every request, and every readiness
 * probe, that the database could not serve is counted (`db_unavailable_total`), but only an
 * outage's first failure is logged with its cause; those that follow within the interval are
 * counted, and the next line says how many there were (`moreSinceLastLine`). A line for the last
 * seconds of an outage, which no later failure would report, is written once no request has
 * failed for the interval (asked every interval), and whatever is counted when the server stops.
 * A later outage's first failure is logged with its cause.
 */
export class DatabaseOutage extends Context.Tag("Database/DatabaseOutage")<DatabaseOutage, {
  readonly failed: (cause: Cause.Cause<unknown>) => Effect.Effect<void>
}>() {
  static readonly Live = Layer.scoped(
    DatabaseOutage,
    Effect.gen(function*() {
      const metrics = yield* Metrics
      const interval = Duration.toMillis(logInterval)
      let loggedAt = -Infinity
      let failedAt = -Infinity
      let sinceLogged = 0

      const failed = (cause: Cause.Cause<unknown>) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) => {
          metrics.databaseUnavailable()
          failedAt = now
          if (now - loggedAt < interval) {
            sinceLogged++
            return Effect.void
          }
          const more = sinceLogged
          loggedAt = now
          sinceLogged = 0
          return Effect.logWarning("database unavailable", cause).pipe(Effect.annotateLogs({ moreSinceLastLine: more }))
        })

      const summarize = (stopping: boolean) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) => {
          if (sinceLogged === 0 || (!stopping && now - failedAt < interval)) return Effect.void
          const more = sinceLogged
          sinceLogged = 0
          return Effect.logWarning("database unavailable").pipe(Effect.annotateLogs({ moreSinceLastLine: more }))
        })

      yield* summarize(false).pipe(Effect.repeat(Schedule.spaced(logInterval)), Effect.forkScoped)
      // Released after the web server (a layer it is built on): the failures counted until the
      // very end of the drain are logged too.
      yield* Effect.addFinalizer(() => summarize(true))
      return { failed }
    })
  )
}
