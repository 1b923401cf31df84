import { Duration, Effect } from "effect"
import type { CampaignApi } from "../Api.ts"
import { DatabaseOutage } from "../Database/Outage.ts"
import { Draining } from "../Draining.ts"
import { RateLimit } from "../RateLimit.ts"
import { ServiceUnavailable } from "../Domain/Errors.ts"
import { compile } from "../Edge/Endpoint.ts"
import type { Handlers } from "../Edge/Exchange.ts"
import { HealthApi } from "./Api.ts"
import { HealthRepo } from "./HealthRepo.ts"

const notReady = new ServiceUnavailable({ message: "The database does not answer." })
const stopping = Effect.fail(new ServiceUnavailable({ message: "The server is shutting down." }))
const alive = { status: 200, body: compile(HealthApi.alive).encodeSuccess({ ok: true, status: "alive" }) }
const encodeReady = compile(HealthApi.ready).encodeSuccess

/**
 * How long one answer of the database serves readiness: probes, which need no key, may come at any
 * rate, and the database is asked at most once per this long whatever it is (README, Operating it).
 */
const readinessCheckedEvery = Duration.seconds(1)

/** For load balancers and orchestrators: no key, no rate limit. */
export const HealthHandlers = Effect.gen(function*() {
  const repo = yield* HealthRepo
  const rateLimit = yield* RateLimit
  const draining = yield* Draining
  const outage = yield* DatabaseOutage
  // A failure is one the database could not serve, as an activation's would be: counted and logged
  // as the outage's other failures are (README, Operating it), so that an outage with no traffic
  // but the probes shows, and a probe every few milliseconds adds no line of its own.
  const databaseAnswers = yield* Effect.cachedWithTTL(
    repo.ping.pipe(
      Effect.timeoutFail({ duration: Duration.seconds(2), onTimeout: () => notReady }),
      Effect.catchAllCause((cause) => Effect.zipRight(outage.failed(cause), Effect.fail(notReady)))
    ),
    readinessCheckedEvery
  )
  const handlers: Handlers<typeof CampaignApi>["health"] = {
    alive: () => Effect.succeed(alive),
    // Not ready from the moment the server is told to stop, while it still serves everything else.
    ready: () =>
      draining.started() ? stopping : Effect.map(databaseAnswers, () => ({
        status: 200,
        body: encodeReady({ ok: true, status: "ready", database: repo.database, rateLimiter: rateLimit.status() })
      }))
  }
  return handlers
})
