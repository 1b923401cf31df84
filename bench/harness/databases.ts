/**
 * Databases made for one measurement: a SQLite file or a new PostgreSQL database migrated with a
 * given set of the service's migrations (a release before some of them, to measure what an upgrade
 * or a migration costs), and dropped at the end. Shared by `analytics.ts`, `first-days.ts` and
 * `shared.ts`.
 */
import { BunContext } from "@effect/platform-bun"
import { PgClient, PgMigrator } from "@effect/sql-pg"
import { SqliteClient, SqliteMigrator } from "@effect/sql-sqlite-bun"
import { SQL } from "bun"
import { Effect, Redacted } from "effect"

type Migrations = Parameters<typeof SqliteMigrator.fromRecord>[0]

export const migrateSqlite = (file: string, record: Migrations) =>
  SqliteMigrator.run({ loader: SqliteMigrator.fromRecord(record) }).pipe(
    Effect.provide(SqliteClient.layer({ filename: file })),
    Effect.provide(BunContext.layer),
    Effect.runPromise
  )

export const migratePostgres = (url: string, record: Migrations) =>
  PgMigrator.run({ loader: PgMigrator.fromRecord(record) }).pipe(
    Effect.provide(PgClient.layer({ url: Redacted.make(url) })),
    Effect.provide(BunContext.layer),
    Effect.runPromise
  )

const admin = (server: string) => new SQL(`${server}/postgres`, { max: 1 })

export const createPostgresDatabase = async (server: string, name: string): Promise<string> => {
  const sql = admin(server)
  try {
    await sql.unsafe(`CREATE DATABASE ${name}`)
  } finally {
    await sql.close()
  }
  return `${server}/${name}`
}

/** Drops the databases at `urls` (on one server), whatever still holds a connection to them. */
export const dropPostgresDatabases = async (server: string, urls: ReadonlyArray<string>) => {
  const sql = admin(server)
  try {
    for (const url of urls) await sql.unsafe(`DROP DATABASE IF EXISTS ${url.split("/").pop()} WITH (FORCE)`)
  } finally {
    await sql.close()
  }
}
