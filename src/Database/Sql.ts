import { BunContext } from "@effect/platform-bun"
import { SqlClient } from "@effect/sql"
import { SqliteClient, SqliteMigrator } from "@effect/sql-sqlite-bun"
import { Effect, Layer } from "effect"
import { chmodSync, closeSync, mkdirSync, openSync } from "node:fs"
import { dirname } from "node:path"
import { DatabaseConfig } from "../Config.ts"
import CreateTables from "./migrations/0001_create_tables.ts"

/** How long a statement waits for another process's write lock before SQLITE_BUSY. */
export const busyTimeoutMs = 5000

/** The file holds key digests and brands' records: only its owner may read it. */
const createPrivateFile = (filename: string) =>
  Effect.sync(() => {
    if (filename === ":memory:") return
    mkdirSync(dirname(filename), { recursive: true })
    closeSync(openSync(filename, "a", 0o600))
    chmodSync(filename, 0o600)
  })

const tune = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql.unsafe(`PRAGMA busy_timeout = ${busyTimeoutMs}`)
  // WAL (set by the client) with FULL syncs the log on every commit: an acknowledged activation survives power loss.
  yield* sql.unsafe("PRAGMA synchronous = FULL")
})

const ClientLive = Layer.unwrapEffect(
  Effect.gen(function*() {
    const { filename } = yield* DatabaseConfig
    yield* createPrivateFile(filename)
    return SqliteClient.layer({ filename })
  })
).pipe(
  Layer.tap((context) => Effect.provide(tune, context))
)

const MigratorLive = SqliteMigrator.layer({
  loader: SqliteMigrator.fromRecord({ "0001_create_tables": CreateTables })
}).pipe(Layer.provide(BunContext.layer))

/** The SQLite database, opened, tuned and migrated. */
export const SqlLive = MigratorLive.pipe(Layer.provideMerge(ClientLive))
