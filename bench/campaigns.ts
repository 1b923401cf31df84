/**
 * A campaign's activations as the analytics benchmarks make them (`bench/analytics.ts`, and the
 * hostile runner's analytics attacks): one campaign of one of the shapes below, written into a
 * database of the release before the counts (migrations 0001–0003), which the binary's own
 * migrations then fill the counts of, as they do for any stored activations.
 */
import { SQL } from "bun"
import { Database } from "bun:sqlite"
import CreateTables from "../src/Database/migrations/0001_create_tables.ts"
import ApiKeysGeneration from "../src/Database/migrations/0002_api_keys_generation.ts"
import ActivationReads from "../src/Database/migrations/0003_activation_reads.ts"
import { brandId } from "./common.ts"
import { migratePostgres, migrateSqlite } from "./harness/databases.ts"

/** The campaign every shape's activations are of. */
export const campaign = "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d"

const before = {
  "0001_create_tables": CreateTables,
  "0002_api_keys_generation": ApiKeysGeneration,
  "0003_activation_reads": ActivationReads
}

export const day = 86_400_000
const windowDays = 36_525
const firstWindowDay = Date.UTC(2000, 0, 1)
const yearOne = new Date(0).setUTCFullYear(1, 0, 1)
export const dateOf = (ms: number) => new Date(ms).toISOString().slice(0, 10)

/** Brand A of the isolation scenario, the one that asks for analytics (brand B is the bench's `brandId`). */
export const isolationBrand = "4e2c9a7b-1d3f-4b5a-8c6e-0f1a2b3c4d5e"
export const isolationDays = 6
export const isolationFirstDay = Date.UTC(2026, 2, 1)

/**
 * Activation `i` of `n` of a shape: when it was activated, the day planned for it, if any, and its
 * creator's number (by default one of 5,000).
 */
export const shapes: Record<
  string,
  (i: number, n: number) => { readonly at: number; readonly planned: string | null; readonly creator?: number }
> = {
  spread: (i, n) => {
    const at = Date.UTC(2026, 0, 1) + Math.floor((i / n) * 300 * day)
    return { at, planned: i % 4 === 0 ? null : dateOf(at + day * (1 + (i % 30))) }
  },
  widest: (i) => ({
    at: Date.UTC(2026, 0, 1) + Math.floor(i / windowDays) * day + (i % windowDays),
    planned: dateOf(firstWindowDay + (i % windowDays) * day)
  }),
  "stored-before": (i) => ({
    at: Date.UTC(2026, 0, 1) + Math.floor(i / windowDays) * day + (i % windowDays),
    planned: dateOf(yearOne + i * day)
  }),
  // Every activation a creator of its own, spread evenly over six days; a quarter unscheduled.
  isolation: (i, n) => {
    const at = isolationFirstDay + Math.floor((i * isolationDays * day) / n)
    return { at, planned: i % 4 === 0 ? null : dateOf(at + 7 * day), creator: i }
  }
}
/** Activation `i` of `n` of the shape, as a row (the isolation scenario's of brand A). */
const activation = (shape: string, i: number, n: number) => {
  const { at, creator, planned } = shapes[shape]!(i, n)
  const hex = at.toString(16).padStart(12, "0")
  return [
    `${hex.slice(0, 8)}-${hex.slice(8, 12)}-7${crypto.randomUUID().slice(15)}`,
    shape === "isolation" ? isolationBrand : brandId,
    "seeded0000000000",
    `5d2a7c3e-1b4f-4e6a-8c9d-${String(creator ?? i % 5000).padStart(12, "0")}`,
    campaign,
    planned,
    new Date(at).toISOString()
  ] as const
}

const insertSql = (placeholder: (n: number) => string, rows: number) =>
  `INSERT INTO activations (id, brand_id, key_id, creator_id, campaign_id, planned_post_at, activated_at, status, social_username) VALUES ${
    Array.from({ length: rows }, (_, r) =>
      `(${
        Array.from({ length: 7 }, (_, c) => placeholder(r * 7 + c + 1)).join(", ")
      }, 'ACTIVE', '@seeded')`).join(", ")
  }`

export const fillSqlite = async (file: string, shape: string, n: number) => {
  await migrateSqlite(file, before)
  const db = new Database(file)
  const insert = db.prepare(insertSql(() => "?", 1))
  db.transaction(() => {
    for (let i = 0; i < n; i++) insert.run(...activation(shape, i, n))
  })()
  db.close()
}

export const fillPostgres = async (url: string, shape: string, n: number) => {
  await migratePostgres(url, before)
  const sql = new SQL(url, { max: 1 })
  const batch = 5_000
  for (let from = 0; from < n; from += batch) {
    const rows = Math.min(batch, n - from)
    const values = Array.from({ length: rows }, (_, r) => activation(shape, from + r, n)).flat()
    await sql.unsafe(insertSql((k) => `$${k}`, rows), values)
  }
  await sql.close()
}
