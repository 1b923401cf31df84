import { Duration, Effect, Layer } from "effect"
import { DatabaseConfig } from "../Config.ts"
import { busyTimeout } from "./Services.ts"
import * as Sqlite from "./Sqlite.ts"

export { busyTimeout, DatabaseFile, DatabaseInUse, NoDatabase, ReadSql } from "./Services.ts"

const makeSqlLive = (options: { readonly busyTimeoutMs: number; readonly create: boolean }) =>
  Layer.unwrapEffect(Effect.map(DatabaseConfig, (target) =>
    target._tag === "sqlite"
      ? Sqlite.layer(target.filename, options)
      // Loaded only for a PostgreSQL URL: the embedded default does not pay for its client at start.
      : Layer.unwrapEffect(
        Effect.map(Effect.promise(() => import("./Postgres.ts")), (Postgres) => Postgres.layer(target))
      )))

/**
 * The database DATABASE_URL names, opened and migrated (a new SQLite file is made where there is
 * none); a locked SQLite database blocks up to the busy timeout.
 */
export const SqlLive = makeSqlLive({ busyTimeoutMs: Duration.toMillis(busyTimeout), create: true })

/**
 * The same for a command that must not make a database (docs/operators.md, The key command line): a SQLite
 * file that is not there fails with `NoDatabase`, and nothing is made, its directory included.
 */
export const SqlExistingLive = makeSqlLive({ busyTimeoutMs: Duration.toMillis(busyTimeout), create: false })

/**
 * The same for the server, which must never block its event loop on another process's lock
 * (bun:sqlite waits synchronously): SQLITE_BUSY comes back at once and writes are retried
 * asynchronously, up to the busy timeout (GroupCommit).
 */
export const SqlServerLive = makeSqlLive({ busyTimeoutMs: 0, create: true })
