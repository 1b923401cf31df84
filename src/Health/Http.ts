import { SqlClient } from "@effect/sql"
import { Duration, Effect } from "effect"
import type { CampaignApi } from "../Api.ts"
import { DatabaseFile } from "../Database/Sql.ts"
import { Draining } from "../Draining.ts"
import { RateLimit } from "../RateLimit.ts"
import { ServiceUnavailable } from "../Domain/Errors.ts"
import { compile } from "../Edge/Endpoint.ts"
import type { Handlers } from "../Edge/Exchange.ts"
import { recorder } from "../Metrics.ts"
import { HealthApi } from "./Api.ts"

const notReady = new ServiceUnavailable({ message: "The database does not answer." })
const stopping = Effect.fail(new ServiceUnavailable({ message: "The server is shutting down." }))
const alive = { status: 200, body: compile(HealthApi.alive).encodeSuccess({ ok: true, status: "alive" }) }
const encodeReady = compile(HealthApi.ready).encodeSuccess

/** For load balancers and orchestrators: no key, no rate limit. */
export const HealthHandlers = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const file = yield* DatabaseFile
  const database = sql.onDialectOrElse({ pg: () => "postgres" as const, orElse: () => "sqlite" as const })
  const rateLimit = yield* RateLimit
  const draining = yield* Draining
  const metrics = yield* recorder
  // A real table, not `SELECT 1`: that would answer without touching the database file. Its
  // failure is a request the database could not serve, as an activation's would be: counted
  // (README, Operating it: Metrics), so that an outage with no traffic but the probes shows.
  const ping = file.ensurePresent.pipe(
    Effect.zipRight(sql`SELECT COUNT(*) AS n FROM api_keys WHERE key_id = ''`),
    Effect.timeoutFail({ duration: Duration.seconds(2), onTimeout: () => notReady }),
    Effect.catchAllCause((cause) =>
      Effect.zipRight(
        Effect.zipRight(Effect.logWarning("readiness check failed", cause), Effect.sync(metrics.databaseUnavailable)),
        notReady
      )
    )
  )
  const handlers: Handlers<typeof CampaignApi>["health"] = {
    alive: () => Effect.succeed(alive),
    // Not ready from the moment the server is told to stop, while it still serves everything else.
    ready: () =>
      draining.started() ? stopping : Effect.as(ping, {
        status: 200,
        body: encodeReady({ ok: true, status: "ready", database, rateLimiter: rateLimit.status() })
      })
  }
  return handlers
})
