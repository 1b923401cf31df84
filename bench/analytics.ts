/**
 * The analytics curve (README, Analytics): one campaign of 10,000, 100,000 and 1,000,000
 * activations, on SQLite and on PostgreSQL, each database made as a database of the release before
 * the counts (migrations 0001–0003), filled with activations directly, then upgraded by the
 * binary's own migrations, which fill the counts as they do for any stored activations. Times one
 * request at a time with the single binary: the whole campaign, and one month of it; and how long
 * a `/healthz` sent just after a whole campaign's request waits for its answer.
 *
 * The campaign's shape (ANALYTICS_SHAPES):
 * - `spread`: 300 days of activations, 5,000 creators, a quarter unscheduled, posts planned 1 to 30
 *   days on (the curve);
 * - `widest`: the longest answer plannedPostAt's window lets a brand make: every activation a pair
 *   of activated day and planned day of its own, the planned days running through the whole window
 *   (36,525 days) and the activated days following (28 at 1,000,000);
 * - `stored-before`: what earlier releases let a brand store, days from 0000 to 9999: every
 *   activation a planned day of its own, from 0001-01-01 on (most outside the window).
 *
 *   bun bench/analytics.ts     # ANALYTICS_SIZES=10000,100000,1000000 ANALYTICS_BACKENDS=sqlite,postgres
 *                              # ANALYTICS_SHAPES=spread (or widest,stored-before)
 *                              # POSTGRES_URL=postgres://postgres@127.0.0.1:5432
 */
import { BunContext } from "@effect/platform-bun"
import { PgClient, PgMigrator } from "@effect/sql-pg"
import { SqliteClient, SqliteMigrator } from "@effect/sql-sqlite-bun"
import { spawn, spawnSync, SQL } from "bun"
import { Database } from "bun:sqlite"
import { Effect, Redacted } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import CreateTables from "../src/Database/migrations/0001_create_tables.ts"
import ApiKeysGeneration from "../src/Database/migrations/0002_api_keys_generation.ts"
import ActivationReads from "../src/Database/migrations/0003_activation_reads.ts"
import { apiKeyOf, brandId, freePort, keysCreateArgs, whoamiOk } from "./common.ts"

const sizes = (process.env["ANALYTICS_SIZES"] ?? "10000,100000,1000000").split(",").map(Number)
const backends = (process.env["ANALYTICS_BACKENDS"] ?? "sqlite,postgres").split(",")
const shapeNames = (process.env["ANALYTICS_SHAPES"] ?? "spread").split(",")
const postgresServer = process.env["POSTGRES_URL"] ?? "postgres://postgres@127.0.0.1:5432"
const campaign = "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d"
const before = {
  "0001_create_tables": CreateTables,
  "0002_api_keys_generation": ApiKeysGeneration,
  "0003_activation_reads": ActivationReads
}

const dir = mkdtempSync(join(tmpdir(), "campaign-api-analytics-"))
const binary = join(dir, "campaign-api")
const root = join(import.meta.dir, "..")
if (
  spawnSync(["bun", "build", "src/main.ts", "--compile", "--bytecode", "--outfile", binary], { cwd: root }).exitCode !==
    0
) {
  throw new Error("building the binary failed")
}

const day = 86_400_000
const windowDays = 36_525
const firstWindowDay = Date.UTC(2000, 0, 1)
const yearOne = new Date(0).setUTCFullYear(1, 0, 1)
const dateOf = (ms: number) => new Date(ms).toISOString().slice(0, 10)

/** Activation `i` of `n` of a shape: when it was activated and the day planned for it, if any. */
const shapes: Record<string, (i: number, n: number) => { readonly at: number; readonly planned: string | null }> = {
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
  })
}
for (const name of shapeNames) {
  if (shapes[name] === undefined) throw new Error(`ANALYTICS_SHAPES: unknown shape "${name}"`)
}

/** Activation `i` of `n` of the shape, as a row: 5,000 creators. */
const activation = (shape: string, i: number, n: number) => {
  const { at, planned } = shapes[shape]!(i, n)
  const hex = at.toString(16).padStart(12, "0")
  return [
    `${hex.slice(0, 8)}-${hex.slice(8, 12)}-7${crypto.randomUUID().slice(15)}`,
    brandId,
    "seeded0000000000",
    `5d2a7c3e-1b4f-4e6a-8c9d-${String(i % 5000).padStart(12, "0")}`,
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

const fillSqlite = async (file: string, shape: string, n: number) => {
  await SqliteMigrator.run({ loader: SqliteMigrator.fromRecord(before) }).pipe(
    Effect.provide(SqliteClient.layer({ filename: file })),
    Effect.provide(BunContext.layer),
    Effect.runPromise
  )
  const db = new Database(file)
  const insert = db.prepare(insertSql(() => "?", 1))
  db.transaction(() => {
    for (let i = 0; i < n; i++) insert.run(...activation(shape, i, n))
  })()
  db.close()
}

const fillPostgres = async (url: string, shape: string, n: number) => {
  await PgMigrator.run({ loader: PgMigrator.fromRecord(before) }).pipe(
    Effect.provide(PgClient.layer({ url: Redacted.make(url) })),
    Effect.provide(BunContext.layer),
    Effect.runPromise
  )
  const sql = new SQL(url, { max: 1 })
  const batch = 5_000
  for (let from = 0; from < n; from += batch) {
    const rows = Math.min(batch, n - from)
    const values = Array.from({ length: rows }, (_, r) => activation(shape, from + r, n)).flat()
    await sql.unsafe(insertSql((k) => `$${k}`, rows), values)
  }
  await sql.close()
}

const median = (values: ReadonlyArray<number>) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!

const measure = async (database: string) => {
  // The first command on the database runs the migrations that fill the counts.
  const upgradeStarted = performance.now()
  const created = spawnSync([
    binary,
    ...keysCreateArgs.map((word) => (word === "campaigns:write" ? "analytics:read" : word))
  ], {
    env: { ...process.env, DATABASE_URL: database }
  })
  const upgradeMs = performance.now() - upgradeStarted
  const apiKey = apiKeyOf(created.stdout.toString())
  const port = freePort()
  const server = spawn([binary, "serve"], {
    env: {
      ...process.env,
      DATABASE_URL: database,
      PORT: String(port),
      HOST: "127.0.0.1",
      LOG_LEVEL: "warn",
      SHUTDOWN_DELAY_SECONDS: "0"
    },
    stdout: "ignore",
    stderr: "ignore"
  })
  const url = `http://127.0.0.1:${port}`
  try {
    while (!(await whoamiOk(url, apiKey))) await Bun.sleep(50)
    const time = async (query: string) => {
      const started = performance.now()
      const response = await fetch(`${url}/v1/campaigns/${campaign}/analytics${query}`, {
        headers: { authorization: `Bearer ${apiKey}` }
      })
      const text = await response.text()
      const { analytics } = JSON.parse(text) as {
        analytics: {
          activations: number
          activationsByDay: ReadonlyArray<unknown>
          plannedPostsByDay: ReadonlyArray<unknown>
        }
      }
      return {
        ms: performance.now() - started,
        activations: analytics.activations,
        entries: analytics.activationsByDay.length + analytics.plannedPostsByDay.length,
        bytes: Buffer.byteLength(text)
      }
    }
    const first = await time("")
    const whole = [] as Array<number>
    for (let i = 0; i < 5; i++) whole.push((await time("")).ms)
    const month = [] as Array<number>
    for (let i = 0; i < 5; i++) month.push((await time("?from=2026-03-01&to=2026-03-31")).ms)
    // A request that needs no key, sent just after the whole campaign's: how long others wait for it.
    const healthz = [] as Array<number>
    for (let i = 0; i < 5; i++) {
      const answer = time("")
      await Bun.sleep(1)
      const started = performance.now()
      await (await fetch(`${url}/healthz`)).arrayBuffer()
      healthz.push(performance.now() - started)
      await answer
    }
    return {
      ...first,
      firstMs: first.ms,
      wholeMs: median(whole),
      monthMs: median(month),
      healthzMs: median(healthz),
      upgradeMs
    }
  } finally {
    server.kill("SIGTERM")
    await server.exited
  }
}

try {
  console.log(
    "backend   shape          activations  counted  entries     bytes  upgrade s  first ms  whole campaign ms (median of 5)  one month ms  /healthz meanwhile ms"
  )
  for (const backend of backends) {
    for (const shape of shapeNames) {
      for (const n of sizes) {
        let database: string
        if (backend === "sqlite") {
          database = join(dir, `analytics-${shape}-${n}.sqlite`)
          await fillSqlite(database, shape, n)
        } else {
          const name = `campaign_api_analytics_${n}_${Date.now().toString(36)}`
          const admin = new SQL(`${postgresServer}/postgres`, { max: 1 })
          await admin.unsafe(`CREATE DATABASE ${name}`)
          await admin.close()
          database = `${postgresServer}/${name}`
          await fillPostgres(database, shape, n)
        }
        const m = await measure(database)
        console.log(
          `${backend.padEnd(8)}  ${shape.padEnd(13)}  ${String(n).padStart(11)}  ${
            String(m.activations).padStart(7)
          }  ` +
            `${String(m.entries).padStart(7)}  ${String(m.bytes).padStart(8)}  ${
              (m.upgradeMs / 1000).toFixed(1).padStart(9)
            }  ` +
            `${m.firstMs.toFixed(1).padStart(8)}  ${m.wholeMs.toFixed(1).padStart(31)}  ${
              m.monthMs.toFixed(1).padStart(12)
            }  ` +
            `${m.healthzMs.toFixed(1).padStart(21)}`
        )
        if (backend === "sqlite") {
          for (const file of [database, `${database}-wal`, `${database}-shm`]) rmSync(file, { force: true })
        } else {
          const admin = new SQL(`${postgresServer}/postgres`, { max: 1 })
          await admin.unsafe(`DROP DATABASE ${database.split("/").pop()} WITH (FORCE)`)
          await admin.close()
        }
      }
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true })
}
