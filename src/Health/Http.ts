import { HttpApiBuilder } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Duration, Effect } from "effect"
import { CampaignApi } from "../Api.ts"
import { DatabaseFile } from "../Database/Sql.ts"
import { ServiceUnavailable } from "../Domain/Errors.ts"

const notReady = new ServiceUnavailable({ message: "The database does not answer." })

export const HttpHealthLive = HttpApiBuilder.group(CampaignApi, "health", (handlers) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const file = yield* DatabaseFile
    // A real table, not `SELECT 1`: that would answer without touching the database file.
    const ping = file.ensurePresent.pipe(
      Effect.zipRight(sql`SELECT COUNT(*) AS n FROM api_keys WHERE key_id = ''`),
      Effect.timeoutFail({ duration: Duration.seconds(2), onTimeout: () => notReady }),
      Effect.catchAllCause((cause) => Effect.zipRight(Effect.logWarning("readiness check failed", cause), notReady))
    )
    return handlers
      .handle("alive", () => Effect.succeed({ ok: true as const, status: "alive" as const }))
      .handle("ready", () => Effect.as(ping, { ok: true as const, status: "ready" as const }))
  }))
