import * as BunContext from "@effect/platform-bun/BunContext"
import { SqlClient } from "@effect/sql"
import { PgClient, PgMigrator } from "@effect/sql-pg"
import { Duration, Effect, Layer, Redacted } from "effect"
import { databaseName, type DatabaseTarget, StartupError } from "../Config.ts"
import { migrations } from "./migrations/index.ts"
import { DatabaseFile, DatabaseInUse, ReadSql } from "./Services.ts"

type PostgresTarget = Extract<DatabaseTarget, { _tag: "postgres" }>

/** Any number, as long as every instance of this service uses the same one for its migrations. */
const migrationLock = 727_274_001

/**
 * The migrator locks its own table, but creates that table first: two instances starting at
 * once on a new database would race there. An advisory lock, held on a connection of its own
 * around the whole run (which uses other connections of the pool), lets the second wait for the
 * first, then find nothing left to do.
 */
const MigratorLive = Layer.effectDiscard(
  Effect.scoped(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const lockHolder = yield* sql.reserve
    yield* Effect.acquireRelease(
      lockHolder.execute("SELECT pg_advisory_lock($1)", [migrationLock], undefined),
      () => Effect.ignore(lockHolder.execute("SELECT pg_advisory_unlock($1)", [migrationLock], undefined))
    )
    yield* PgMigrator.run({ loader: PgMigrator.fromRecord(migrations) })
  }))
).pipe(Layer.provide(BunContext.layer))

/**
 * PostgreSQL, shared by every instance: a pool of `DATABASE_POOL_MAX` connections, migrated at
 * start. Commits are durable before they are answered (PostgreSQL's default `synchronous_commit`).
 * A server that cannot be reached at start stops the start with one sentence; once started, the
 * pool reconnects by itself, and each request that finds it down is a 503.
 */
export const layer = (target: PostgresTarget) => {
  const client = PgClient.layer({
    url: target.url,
    maxConnections: target.poolSize,
    connectTimeout: Duration.seconds(2),
    idleTimeout: Duration.seconds(30),
    applicationName: "campaign-api"
  }).pipe(
    Layer.mapError((error) =>
      new StartupError({
        variable: "DATABASE_URL",
        message: isMissingDatabase(error.cause)
          ? `DATABASE_URL=${target.display} names a database that does not exist on that server: create it (${
            createdb(target)
          }) or correct the URL.`
          : `DATABASE_URL=${target.display} cannot be reached (${
            reason(error.cause)
          }): start PostgreSQL or correct the URL.`
      })
    )
  )
  return Layer.mergeAll(
    MigratorLive,
    Layer.succeed(ReadSql, ReadSql.asIs),
    Layer.succeed(DatabaseFile, DatabaseFile.none),
    Layer.succeed(DatabaseInUse, { name: databaseName(target), created: false, createdDirectory: undefined })
  ).pipe(Layer.provideMerge(client))
}

/** PostgreSQL's `invalid_catalog_name`: the server answers, the database is not there. */
const isMissingDatabase = (cause: unknown) =>
  typeof cause === "object" && cause !== null && (cause as { code?: unknown }).code === "3D000"

/** A word as a POSIX shell reads it unchanged. */
const shellWord = (word: string) => /^[\w.,:@%+=/-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`

/**
 * The command that makes the database `target` names (PostgreSQL's own `createdb`), as the
 * user it connects as, so that the database is that user's: never with a password.
 */
const createdb = (target: PostgresTarget) => {
  const url = new URL(Redacted.value(target.url))
  const user = decodeURIComponent(url.username)
  return [
    "createdb",
    ...["-h", url.hostname.replace(/^\[(.*)\]$/, "$1"), "-p", url.port === "" ? "5432" : url.port],
    ...(user === "" ? [] : ["-U", user]),
    decodeURIComponent(url.pathname.slice(1))
  ].map(shellWord).join(" ")
}

const reason = (cause: unknown): string => {
  if (typeof cause !== "object" || cause === null) return String(cause)
  const { code, message } = cause as { code?: unknown; message?: unknown }
  if (typeof message === "string" && message !== "") return message
  return typeof code === "string" && code !== "" ? code : "no answer"
}
