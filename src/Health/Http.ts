import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Duration, Effect } from "effect"
import { CampaignApi } from "../Api.ts"
import { DatabaseOutage } from "../Database/Outage.ts"
import { ServiceUnavailable } from "../Domain/Errors.ts"
import { Draining } from "../Draining.ts"
import { RateLimit } from "../RateLimit.ts"
import { Warming } from "../WarmUp.ts"
import { HealthRepo } from "./HealthRepo.ts"

const notReady = new ServiceUnavailable({ message: "The database does not answer." })
const stopping = Effect.fail(new ServiceUnavailable({ message: "The server is shutting down." }))
const starting = Effect.fail(new ServiceUnavailable({ message: "The server is starting; it is ready in a moment." }))
// Frozen: the edge encodes it once (`Endpoint.ts`).
const alive = Effect.succeed(Object.freeze({ ok: true as const, status: "alive" as const }))

/**
 * How long one answer of the database serves readiness: probes, which need no key, may come at any
 * rate, and the database is asked at most once per this long whatever it is (docs/operators.md, Operating it).
 */
const readinessCheckedEvery = Duration.seconds(1)

/** For load balancers and orchestrators: no key, no rate limit. */
export const HealthHandlers = Effect.gen(function*() {
  const repo = yield* HealthRepo
  const rateLimit = yield* RateLimit
  const draining = yield* Draining
  const warming = yield* Warming
  const outage = yield* DatabaseOutage
  // A failure is one the database could not serve, as an activation's would be: counted and logged
  // as the outage's other failures are (docs/operators.md, Operating it), so that an outage with no traffic
  // but the probes shows, and a probe every few milliseconds adds no line of its own.
  const databaseAnswers = yield* Effect.cachedWithTTL(
    repo.ping.pipe(
      Effect.timeoutFail({ duration: Duration.seconds(2), onTimeout: () => notReady }),
      Effect.catchAllCause((cause) => Effect.zipRight(outage.failed(cause), Effect.fail(notReady)))
    ),
    readinessCheckedEvery
  )
  return {
    alive: HttpApiBuilder.handler(CampaignApi, "health", "alive", () => alive),
    // Not ready while it warms up, nor from the moment it is told to stop: meanwhile it serves
    // everything else.
    ready: HttpApiBuilder.handler(
      CampaignApi,
      "health",
      "ready",
      () =>
        draining.started() ? stopping : warming.pending() ? starting : Effect.map(databaseAnswers, () => ({
          ok: true as const,
          status: "ready" as const,
          database: repo.database,
          rateLimiter: rateLimit.status()
        }))
    )
  }
})
