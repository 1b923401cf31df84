/**
 * The analytics curve (README, Analytics): one campaign of 10,000, 100,000 and 1,000,000
 * activations, on SQLite and on PostgreSQL, each database made as a database of the release before
 * the counts (migrations 0001–0003), filled with activations directly, then upgraded by the
 * binary's own migrations, which fill the counts as they do for any stored activations. Times one
 * request at a time with the single binary: the whole campaign, and one month of it.
 *
 *   bun bench/analytics.ts     # ANALYTICS_SIZES=10000,100000,1000000 ANALYTICS_BACKENDS=sqlite,postgres
 *                              # POSTGRES_URL=postgres://postgres@127.0.0.1:5432
 */
import { BunContext } from "@effect/platform-bun"
import { PgClient, PgMigrator } from "@effect/sql-pg"
import { SqliteClient, SqliteMigrator } from "@effect/sql-sqlite-bun"
import { SQL, spawn, spawnSync } from "bun"
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
const postgresServer = process.env["POSTGRES_URL"] ?? "postgres://postgres@127.0.0.1:5432"
const campaign = "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d"
const before = { "0001_create_tables": CreateTables, "0002_api_keys_generation": ApiKeysGeneration, "0003_activation_reads": ActivationReads }

const dir = mkdtempSync(join(tmpdir(), "campaign-api-analytics-"))
const binary = join(dir, "campaign-api")
const root = join(import.meta.dir, "..")
if (spawnSync(["bun", "build", "src/main.ts", "--compile", "--bytecode", "--outfile", binary], { cwd: root }).exitCode !== 0) {
  throw new Error("building the binary failed")
}

/** Activation `i` of `n`, spread over 300 days: 5,000 creators, a quarter unscheduled, posts planned 1 to 30 days on. */
const activation = (i: number, n: number) => {
  const at = Date.UTC(2026, 0, 1) + Math.floor((i / n) * 300 * 86_400_000)
  const hex = at.toString(16).padStart(12, "0")
  return [
    `${hex.slice(0, 8)}-${hex.slice(8, 12)}-7${crypto.randomUUID().slice(15)}`,
    brandId,
    "seeded0000000000",
    `5d2a7c3e-1b4f-4e6a-8c9d-${String(i % 5000).padStart(12, "0")}`,
    campaign,
    i % 4 === 0 ? null : new Date(at + 86_400_000 * (1 + (i % 30))).toISOString().slice(0, 10),
    new Date(at).toISOString()
  ] as const
}
const insertSql = (placeholder: (n: number) => string, rows: number) =>
  `INSERT INTO activations (id, brand_id, key_id, creator_id, campaign_id, planned_post_at, activated_at, status, social_username) VALUES ${
    Array.from({ length: rows }, (_, r) => `(${Array.from({ length: 7 }, (_, c) => placeholder(r * 7 + c + 1)).join(", ")}, 'ACTIVE', '@seeded')`).join(", ")
  }`

const fillSqlite = async (file: string, n: number) => {
  await SqliteMigrator.run({ loader: SqliteMigrator.fromRecord(before) }).pipe(
    Effect.provide(SqliteClient.layer({ filename: file })),
    Effect.provide(BunContext.layer),
    Effect.runPromise
  )
  const db = new Database(file)
  const insert = db.prepare(insertSql(() => "?", 1))
  db.transaction(() => {
    for (let i = 0; i < n; i++) insert.run(...activation(i, n))
  })()
  db.close()
}

const fillPostgres = async (url: string, n: number) => {
  await PgMigrator.run({ loader: PgMigrator.fromRecord(before) }).pipe(
    Effect.provide(PgClient.layer({ url: Redacted.make(url) })),
    Effect.provide(BunContext.layer),
    Effect.runPromise
  )
  const sql = new SQL(url, { max: 1 })
  const batch = 5_000
  for (let from = 0; from < n; from += batch) {
    const rows = Math.min(batch, n - from)
    const values = Array.from({ length: rows }, (_, r) => activation(from + r, n)).flat()
    await sql.unsafe(insertSql((k) => `$${k}`, rows), values)
  }
  await sql.close()
}

const median = (values: ReadonlyArray<number>) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!

const measure = async (database: string) => {
  // The first command on the database runs the migrations that fill the counts.
  const upgradeStarted = performance.now()
  const created = spawnSync([binary, ...keysCreateArgs.map((word) => (word === "campaigns:write" ? "analytics:read" : word))], {
    env: { ...process.env, DATABASE_URL: database }
  })
  const upgradeMs = performance.now() - upgradeStarted
  const apiKey = apiKeyOf(created.stdout.toString())
  const port = freePort()
  const server = spawn([binary, "serve"], {
    env: { ...process.env, DATABASE_URL: database, PORT: String(port), HOST: "127.0.0.1", LOG_LEVEL: "warn", SHUTDOWN_DELAY_SECONDS: "0" },
    stdout: "ignore",
    stderr: "ignore"
  })
  const url = `http://127.0.0.1:${port}`
  try {
    while (!(await whoamiOk(url, apiKey))) await Bun.sleep(50)
    const time = async (query: string) => {
      const started = performance.now()
      const response = await fetch(`${url}/v1/campaigns/${campaign}/analytics${query}`, { headers: { authorization: `Bearer ${apiKey}` } })
      const body = await response.json() as { analytics: { activations: number } }
      return { ms: performance.now() - started, activations: body.analytics.activations }
    }
    const first = await time("")
    const whole = [] as Array<number>
    for (let i = 0; i < 5; i++) whole.push((await time("")).ms)
    const month = [] as Array<number>
    for (let i = 0; i < 5; i++) month.push((await time("?from=2026-03-01&to=2026-03-31")).ms)
    return { counted: first.activations, firstMs: first.ms, wholeMs: median(whole), monthMs: median(month), upgradeMs }
  } finally {
    server.kill("SIGTERM")
    await server.exited
  }
}

try {
  console.log("backend     activations  counted  upgrade s  first ms  whole campaign ms (median of 5)  one month ms")
  for (const backend of backends) {
    for (const n of sizes) {
      let database: string
      if (backend === "sqlite") {
        database = join(dir, `analytics-${n}.sqlite`)
        await fillSqlite(database, n)
      } else {
        const name = `campaign_api_analytics_${n}_${Date.now().toString(36)}`
        const admin = new SQL(`${postgresServer}/postgres`, { max: 1 })
        await admin.unsafe(`CREATE DATABASE ${name}`)
        await admin.close()
        database = `${postgresServer}/${name}`
        await fillPostgres(database, n)
      }
      const m = await measure(database)
      console.log(
        `${backend.padEnd(10)}  ${String(n).padStart(11)}  ${String(m.counted).padStart(7)}  ${(m.upgradeMs / 1000).toFixed(1).padStart(9)}  ` +
          `${m.firstMs.toFixed(1).padStart(8)}  ${m.wholeMs.toFixed(1).padStart(31)}  ${m.monthMs.toFixed(1).padStart(12)}`
      )
      if (backend !== "sqlite") {
        const admin = new SQL(`${postgresServer}/postgres`, { max: 1 })
        await admin.unsafe(`DROP DATABASE ${database.split("/").pop()} WITH (FORCE)`)
        await admin.close()
      }
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true })
}
