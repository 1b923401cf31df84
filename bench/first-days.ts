/**
 * What migration 0007's trigger costs a write (docs/operators.md, Reliability: indexes and counts): new
 * creator-days written as the repository writes them, 64 to a statement in a transaction of their
 * own (a batch of activations, each of a creator new to the campaign that day, the trigger's most
 * work), into a database migrated up to 0006 and one migrated up to 0007, in turns, on SQLite and
 * on PostgreSQL. Prints microseconds per new creator-day.
 *
 *   bun bench/first-days.ts     # FIRST_DAYS_ROWS=100000 FIRST_DAYS_TURNS=2
 *                               # POSTGRES_URL=postgres://postgres@127.0.0.1:5432
 */
import { SQL } from "bun"
import { Database } from "bun:sqlite"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { migrations } from "../src/Database/migrations/index.ts"
import { createPostgresDatabase, dropPostgresDatabases, migratePostgres, migrateSqlite } from "./harness/databases.ts"

const rows = Number(process.env["FIRST_DAYS_ROWS"] ?? 100_000)
const turns = Number(process.env["FIRST_DAYS_TURNS"] ?? 2)
const postgresServer = process.env["POSTGRES_URL"] ?? "postgres://postgres@127.0.0.1:5432"
const batch = 64
const { "0007_creator_first_days": _, ...before0007 } = migrations
const releases = { "up to 0006": before0007, "up to 0007": migrations }

/** Batch `i`'s creator-days: creators never seen, over six days. */
const batchOf = (i: number) =>
  Array.from({ length: batch }, (_, j) => [
    "0b6f8c1e-4f5a-4c2b-9d7e-1a2b3c4d5e6f",
    "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d",
    `2026-03-0${1 + ((i + j) % 6)}`,
    crypto.randomUUID()
  ])
const insertText = (placeholder: (n: number) => string) =>
  `INSERT INTO campaign_creator_days (brand_id, campaign_key, day, creator_key) VALUES ${
    Array.from({ length: batch }, (_, r) => `(${[1, 2, 3, 4].map((c) => placeholder(r * 4 + c)).join(", ")})`).join(
      ", "
    )
  } ON CONFLICT DO NOTHING`

const dir = mkdtempSync(join(tmpdir(), "campaign-api-first-days-"))

const sqlite = async (release: keyof typeof releases, turn: number) => {
  const file = join(dir, `${turn}-${release.replaceAll(" ", "-")}.sqlite`)
  await migrateSqlite(file, releases[release])
  // The server's settings (docs/operators.md, Reliability): WAL and a synchronous commit.
  const db = new Database(file)
  db.run("PRAGMA journal_mode = WAL")
  db.run("PRAGMA synchronous = FULL")
  const insert = db.prepare(insertText(() => "?"))
  const started = performance.now()
  for (let i = 0; i < rows; i += batch) db.transaction(() => insert.run(...batchOf(i).flat()))()
  const perRow = ((performance.now() - started) * 1000) / rows
  db.close()
  return perRow
}

const postgres = async (release: keyof typeof releases, turn: number) => {
  const url = await createPostgresDatabase(
    postgresServer,
    `campaign_api_first_days_${turn}_${release.slice(-4)}_${Date.now().toString(36)}`
  )
  try {
    await migratePostgres(url, releases[release])
    const sql = new SQL(url, { max: 1 })
    const text = insertText((n) => `$${n}`)
    const started = performance.now()
    for (let i = 0; i < rows; i += batch) {
      const values = batchOf(i).flat()
      await sql.begin((tx) => tx.unsafe(text, values))
    }
    const perRow = ((performance.now() - started) * 1000) / rows
    await sql.close()
    return perRow
  } finally {
    await dropPostgresDatabases(postgresServer, [url])
  }
}

try {
  console.log(`${rows} new creator-days, ${batch} to a statement and a transaction; µs per creator-day`)
  console.log("backend     turn  up to 0006  up to 0007  added")
  for (const [backend, run] of [["sqlite", sqlite], ["postgres", postgres]] as const) {
    for (let turn = 1; turn <= turns; turn++) {
      const without = await run("up to 0006", turn)
      const withTrigger = await run("up to 0007", turn)
      console.log(
        `${backend.padEnd(10)}  ${String(turn).padStart(4)}  ${without.toFixed(1).padStart(10)}  ${
          withTrigger.toFixed(1).padStart(10)
        }  ${(withTrigger - without).toFixed(1).padStart(5)}`
      )
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true })
}
