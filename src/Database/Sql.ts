import { Duration, Effect, Layer } from "effect"
import { DatabaseConfig } from "../Config.ts"
import { busyTimeout } from "./Services.ts"
import * as Sqlite from "./Sqlite.ts"

export { busyTimeout, DatabaseFile, DatabaseInUse, ReadSql } from "./Services.ts"

const makeSqlLive = (busyTimeoutMs: number) =>
  Layer.unwrapEffect(Effect.map(DatabaseConfig, (target) =>
    target._tag === "sqlite"
      ? Sqlite.layer(target.filename, busyTimeoutMs)
      // Loaded only for a PostgreSQL URL: the embedded default does not pay for its client at start.
      : Layer.unwrapEffect(Effect.map(Effect.promise(() => import("./Postgres.ts")), (Postgres) => Postgres.layer(target)))))

/** The database DATABASE_URL names, opened and migrated; a locked SQLite database blocks up to the busy timeout. */
export const SqlLive = makeSqlLive(Duration.toMillis(busyTimeout))

/**
 * The same for the server, which must never block its event loop on another process's lock
 * (bun:sqlite waits synchronously): SQLITE_BUSY comes back at once and writes are retried
 * asynchronously, up to the busy timeout (GroupCommit).
 */
export const SqlServerLive = makeSqlLive(0)
