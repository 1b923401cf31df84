/**
 * Two instances of a built binary on one PostgreSQL and one Redis, with a share of one brand's
 * activations sent to both instances at once with the same Idempotency-Key and body (what a
 * client's retry through a balancer does), beside another brand's plain activations: whether
 * the instances' commits deadlock, and what the duplicates cost both brands, against the same
 * load without duplicates. Each binary named gets two instances on a database of its own.
 *
 *   bun run build && DUPLICATES_BINARIES=before=/tmp/before/dist/campaign-api,after=dist/campaign-api \
 *     bun bench/duplicates.ts
 *   # BENCH_DURATION=20 BENCH_WARMUP=3 DUPLICATES_SLICE=5 DUPLICATES_SHARES=0,0.1,0.2,0.3
 *   # POSTGRES_URL=postgres://postgres@127.0.0.1:5432 REDIS_URL=redis://127.0.0.1:6379
 *
 * A Bun client, closed loop: 16 loops of the duplicated brand and 4 of the other, half of each on
 * either instance; a duplicate is sent to both at once and its loop waits for both answers. Every
 * brand activates 8 campaigns × 40 creators, their planned day one of 3 (or none), so that batches
 * of both instances write the same count rows.
 *
 * Every pattern (each binary without duplicates and with each share; a share of 0 is the run
 * without duplicates again, as far from it as two runs of one load are) runs BENCH_DURATION seconds
 * in all, in slices of DUPLICATES_SLICE seconds taken in turns, with a pause between slices for a
 * stalled commit to finish: on a machine shared with other work, the neighbours' load moves one
 * 20 s run's figures far from the next's (bench/BENCHMARKS.md), and slices in turns give every
 * pattern the same share of it. Answers are counted when they arrive within their slice. At the
 * end the instances stop and, once their connections are gone (a backend's counters reach
 * `pg_stat_database` as it exits), each database's deadlocks are read: only the slices with
 * duplicates can make them. Every answer must be a 2xx or a 409 (exit code 1 otherwise).
 */
import { spawn, SQL, type Subprocess } from "bun"
import { join } from "node:path"
import { apiKeyOf, freePort, whoamiOk, writeResults } from "./common.ts"

const postgresServer = process.env["POSTGRES_URL"] ?? "postgres://postgres@127.0.0.1:5432"
const redisUrl = process.env["REDIS_URL"] ?? "redis://127.0.0.1:6379"
const durationSeconds = Number(process.env["BENCH_DURATION"] ?? "20")
const warmupSeconds = Number(process.env["BENCH_WARMUP"] ?? "3")
const sliceSeconds = Number(process.env["DUPLICATES_SLICE"] ?? "5")
const shares = (process.env["DUPLICATES_SHARES"] ?? "0,0.1,0.2,0.3").split(",").map(Number)
/** Time for a commit stalled at a slice's end (a deadlock waits `deadlock_timeout`, 1 s) to finish before the next. */
const pauseMs = 1500
const binaries = (process.env["DUPLICATES_BINARIES"] ?? "after=dist/campaign-api").split(",").map((named) => {
  const [name, path] = named.includes("=") ? named.split("=", 2) as [string, string] : [named, named]
  return { name, path }
})
const duplicatedLoops = 16
const otherLoops = 4

const root = join(import.meta.dir, "..")
const run = Date.now().toString(36)
const children: Array<Subprocess> = []
const databases: Array<string> = []

const admin = () => new SQL(`${postgresServer}/postgres`, { max: 1 })

const newDatabase = async (name: string): Promise<string> => {
  const sql = admin()
  const database = `bench_${run}_${name.replace(/\W/g, "_")}`
  await sql.unsafe(`CREATE DATABASE ${database}`)
  await sql.close()
  databases.push(database)
  return database
}

const runToEnd = async (cmd: Array<string>, env: Record<string, string>) => {
  const child = spawn(cmd, { cwd: root, env: { ...process.env, ...env }, stdout: "pipe", stderr: "pipe" })
  const [stdout, stderr, code] = await Promise.all([
    new Response(child.stdout).text(),
    new Response(child.stderr).text(),
    child.exited
  ])
  if (code !== 0) throw new Error(`${cmd.join(" ")} exited with ${code}:\n${stdout}${stderr}`)
  return stdout
}

const createKey = async (binary: string, url: string, brandId: string) =>
  apiKeyOf(
    await runToEnd([binary, "keys", "create", "--brand", brandId, "--scopes", "campaigns:write", "--json"], {
      DATABASE_URL: url
    })
  )

const startServer = async (binary: string, url: string, apiKey: string) => {
  const port = freePort()
  const child = spawn([binary, "serve"], {
    cwd: root,
    env: {
      ...process.env,
      DATABASE_URL: url,
      REDIS_URL: redisUrl,
      SHUTDOWN_DELAY_SECONDS: "0",
      PORT: String(port),
      HOST: "127.0.0.1",
      LOG_LEVEL: "warn",
      RATE_LIMIT_MAX: "1000000000"
    },
    stdout: "ignore",
    stderr: "inherit"
  })
  children.push(child)
  const address = `http://127.0.0.1:${port}`
  for (let i = 0; i < 300; i++) {
    if (await whoamiOk(address, apiKey)) return { address, child }
    await Bun.sleep(50)
  }
  throw new Error(`${binary} serve did not answer on ${address}`)
}

const pick = <A>(items: ReadonlyArray<A>): A => items[Math.floor(Math.random() * items.length)]!
const hex = (n: number, width: number) => n.toString(16).padStart(width, "0")
const campaigns = Array.from({ length: 8 }, (_, n) => `9a8b7c6d-5e4f-4a3b-9c2d-${hex(n, 12)}`)
const creators = Array.from({ length: 40 }, (_, n) => `5d2a7c3e-1b4f-4e6a-8c9d-${hex(n, 12)}`)
const plannedDays = ["2026-12-01", "2026-12-02", "2026-12-03", undefined]

interface Tally {
  answers: number
  readonly statuses: Record<string, number>
  readonly latenciesMs: Array<number>
}
const tallyOf = (): Tally => ({ answers: 0, statuses: {}, latenciesMs: [] })

/** One activation, timed; counted in `tally` when it is answered before `until`. */
const activate = async (
  address: string,
  apiKey: string,
  idempotencyKey: string,
  path: string,
  body: string,
  tally: Tally,
  until: number
) => {
  const started = performance.now()
  let status: string
  try {
    const response = await fetch(`${address}${path}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${apiKey}`,
        "content-type": "application/json",
        "idempotency-key": idempotencyKey
      },
      body,
      signal: AbortSignal.timeout(30_000)
    })
    await response.arrayBuffer()
    status = String(response.status)
  } catch (error) {
    status = (error as Error).name
  }
  const finished = performance.now()
  tally.statuses[status] = (tally.statuses[status] ?? 0) + 1
  if (finished <= until) {
    tally.answers++
    tally.latenciesMs.push(finished - started)
  }
}

const request = () => {
  const planned = pick(plannedDays)
  return {
    path: `/v1/creators/${pick(creators)}/campaigns/${pick(campaigns)}/activate`,
    body: JSON.stringify(
      planned === undefined ? { socialUsername: "@bench" } : {
        socialUsername: "@bench",
        plannedPostAt: planned
      }
    )
  }
}

interface Pair {
  readonly name: string
  readonly database: string
  readonly addresses: readonly [string, string]
  readonly children: ReadonlyArray<Subprocess>
  readonly duplicatedKey: string
  readonly otherKey: string
}

let sequence = 0

/** Closed loops of both brands on `pair` for `seconds`, `share` of the duplicated brand's requests sent to both instances. */
const load = async (pair: Pair, share: number, seconds: number, into: { duplicated: Tally; other: Tally }) => {
  const until = performance.now() + seconds * 1000
  const brands = [
    { apiKey: pair.duplicatedKey, loops: duplicatedLoops, share, tally: into.duplicated },
    { apiKey: pair.otherKey, loops: otherLoops, share: 0, tally: into.other }
  ]
  await Promise.all(brands.flatMap((brand, b) =>
    Array.from({ length: brand.loops }, async (_, loop) => {
      while (performance.now() < until) {
        const key = `${run}-${b}-${loop}-${++sequence}`
        const { body, path } = request()
        const to = Math.random() < brand.share ? pair.addresses : [pair.addresses[loop % 2]!]
        await Promise.all(to.map((address) => activate(address, brand.apiKey, key, path, body, brand.tally, until)))
      }
    })
  ))
}

const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!

const summary = (tally: Tally) => {
  const sorted = [...tally.latenciesMs].sort((a, b) => a - b)
  return {
    answers: tally.answers,
    requestsPerSecond: tally.answers / durationSeconds,
    p50Ms: percentile(sorted, 50),
    p99Ms: percentile(sorted, 99),
    maxMs: sorted.at(-1) ?? 0,
    statuses: tally.statuses
  }
}

/** Every answer a 2xx or a 409 (the contract's answers to a duplicate). */
const unexpected = (statuses: Record<string, number>) =>
  Object.entries(statuses).filter(([status]) => !/^2\d\d$/.test(status) && status !== "409")
    .reduce((sum, [, n]) => sum + n, 0)

/** Two instances of `binary` on a database of its own, with a key for each brand. */
const startPair = async (binary: { readonly name: string; readonly path: string }): Promise<Pair> => {
  const database = await newDatabase(binary.name)
  const url = `${postgresServer}/${database}`
  const duplicatedKey = await createKey(binary.path, url, "0b6f8c1e-4f5a-4c2b-9d7e-1a2b3c4d5e6f")
  const otherKey = await createKey(binary.path, url, "1c7a9d2f-5a6b-4d3c-8e8f-2b3c4d5e6f70")
  const servers = [
    await startServer(binary.path, url, duplicatedKey),
    await startServer(binary.path, url, duplicatedKey)
  ] as const
  // Both keys are in memory on both instances before anything is timed.
  for (const { address } of servers) {
    if (!(await whoamiOk(address, otherKey))) throw new Error(`${address} does not know the other brand's key`)
  }
  return {
    name: binary.name,
    database,
    addresses: [servers[0].address, servers[1].address],
    children: servers.map(({ child }) => child),
    duplicatedKey,
    otherKey
  }
}

/** Stops the pair and reads its database's deadlocks once its connections are gone. */
const deadlocksOf = async (pair: Pair): Promise<number> => {
  for (const child of pair.children) child.kill("SIGTERM")
  await Promise.all(pair.children.map((child) => child.exited))
  const sql = admin()
  try {
    for (let i = 0; i < 600; i++) {
      const [{ n }] = await sql`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = ${pair.database}`
      if (n === 0) break
      await Bun.sleep(50)
    }
    const [{ deadlocks }] =
      await sql`SELECT deadlocks::int AS deadlocks FROM pg_stat_database WHERE datname = ${pair.database}`
    return deadlocks
  } finally {
    await sql.close()
  }
}

const main = async () => {
  console.log(
    `PostgreSQL ${postgresServer}, Redis ${redisUrl}; ${warmupSeconds} s warm-up, ${durationSeconds} s measured per pattern ` +
      `in slices of ${sliceSeconds} s; ${duplicatedLoops} loops of the duplicated brand, ${otherLoops} of the other`
  )
  // The run without duplicates first, the one the others are held against; a 0 among the shares
  // is that run again, measured alike: how far two runs of the same load differ here.
  const patterns = [0, ...shares]
  const results: Array<{
    binary: string
    pattern: number
    share: number
    duplicated: ReturnType<typeof summary>
    other: ReturnType<typeof summary>
  }> = []
  const deadlocks: Record<string, number> = {}
  const pairs: Array<Pair> = []
  try {
    for (const binary of binaries) pairs.push(await startPair(binary))
    for (const pair of pairs) await load(pair, 0, warmupSeconds, { duplicated: tallyOf(), other: tallyOf() })
    const tallies = new Map(
      pairs.flatMap((pair) =>
        patterns.map((_, pattern) => [`${pair.name} ${pattern}`, { duplicated: tallyOf(), other: tallyOf() }] as const)
      )
    )
    for (let slice = 0; slice < Math.ceil(durationSeconds / sliceSeconds); slice++) {
      for (const [pattern, share] of patterns.entries()) {
        for (const pair of pairs) {
          await load(pair, share, sliceSeconds, tallies.get(`${pair.name} ${pattern}`)!)
          await Bun.sleep(pauseMs)
        }
      }
    }
    for (const pair of pairs) {
      deadlocks[pair.name] = await deadlocksOf(pair)
      for (const [pattern, share] of patterns.entries()) {
        const { duplicated, other } = tallies.get(`${pair.name} ${pattern}`)!
        results.push({ binary: pair.name, pattern, share, duplicated: summary(duplicated), other: summary(other) })
      }
    }
  } finally {
    for (const child of children) if (child.exitCode === null) child.kill("SIGTERM")
    await Promise.all(children.map((child) => child.exited))
    const sql = admin()
    for (const database of databases) await sql.unsafe(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`)
    await sql.close()
  }
  for (const row of results) {
    const without = results.find((r) => r.binary === row.binary && r.pattern === 0)!
    const all = (r: typeof row) => r.duplicated.answers + r.other.answers
    const bad = unexpected(row.duplicated.statuses) + unexpected(row.other.statuses)
    if (bad > 0) process.exitCode = 1
    console.log(
      `${row.binary.padEnd(8)} share ${row.share.toFixed(2)}${row.pattern > 0 && row.share === 0 ? " again" : ""}: ${
        all(row)
      } answers (${(all(row) / all(without)).toFixed(3)} of none), the duplicated brand's p99 ${
        row.duplicated.p99Ms.toFixed(1)
      } ms, the other's ${row.other.p99Ms.toFixed(1)} ms (${
        (row.other.p99Ms / without.other.p99Ms).toFixed(2)
      }x); statuses ${JSON.stringify(row.duplicated.statuses)} / ${JSON.stringify(row.other.statuses)}${
        bad > 0 ? `; ${bad} NEITHER 2xx NOR 409` : ""
      }`
    )
  }
  for (const [binary, n] of Object.entries(deadlocks)) {
    console.log(`${binary.padEnd(8)} deadlocks in its database, over all its slices: ${n}`)
  }
  writeResults("duplicates", {
    durationSeconds,
    warmupSeconds,
    sliceSeconds,
    duplicatedLoops,
    otherLoops,
    binaries,
    deadlocks,
    results
  })
}

await main()
