import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Context, Effect, Layer } from "effect"
import { DatabaseFile } from "../Database/Sql.ts"

/** Whether the database answers, for readiness (docs/operators.md, Operating it: Health). */
export class HealthRepo extends Context.Tag("Health/HealthRepo")<HealthRepo, {
  readonly database: "sqlite" | "postgres"
  /**
   * A read of a real table, not `SELECT 1` (that would answer without touching the database
   * file), once the file is checked to be the one opened.
   */
  readonly ping: Effect.Effect<void, SqlError>
}>() {
  static readonly Live = Layer.effect(
    HealthRepo,
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const file = yield* DatabaseFile
      return {
        database: sql.onDialectOrElse({ pg: () => "postgres" as const, orElse: () => "sqlite" as const }),
        ping: Effect.asVoid(
          Effect.zipRight(file.ensurePresent, sql`SELECT COUNT(*) AS n FROM api_keys WHERE key_id = ''`)
        )
      }
    })
  )
}
