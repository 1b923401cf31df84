/**
 * The benchmark on PostgreSQL + Redis: the service as deployed (the single binary) as one instance
 * and as two instances on one PostgreSQL and one Redis, against `bench/baseline.ts` on the same
 * PostgreSQL doing the same essential work with no framework (`Bun.serve` + `Bun.SQL`).
 *
 *   bun bench/shared.ts          # BENCH_DURATION=10 BENCH_WARMUP=5 BENCH_SCENARIOS=whoami,fresh,replay,mix,get,list
 *                                # POSTGRES_URL=postgres://postgres@127.0.0.1:5432 REDIS_URL=redis://127.0.0.1:6379
 *
 * PostgreSQL and Redis run on the same 2 cores as the servers and wrk, so nothing is pinned: the
 * figures say how the whole machine does, not one core. Two instances get one wrk each (25
 * connections apiece, 50 in all, as the single runs); their requests/s are added and the higher
 * of their two p99 latencies is shown. Each target gets a database of its own (the two instances
 * share theirs), dropped at the end, with the reads' records seeded in it (`get` asks for one by id,
 * `list` for a page of 20 of one campaign). The baseline makes the rate limit's Redis round trip per
 * request as the service does (`bench/baseline.ts` with REDIS_URL), under a limit too high to refuse.
 */
import { spawn, type Subprocess } from "bun"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import {
  apiKeyOf,
  buildArgs,
  freePort,
  keysCreateArgs,
  seedReadsPostgres,
  storeReplayed,
  whoamiOk,
  writeResults,
  wrkArgs,
  wrkKeyPrefix,
  wrkResultOf
} from "./common.ts"
import { createPostgresDatabase, dropPostgresDatabases } from "./harness/databases.ts"

const postgresServer = process.env["POSTGRES_URL"] ?? "postgres://postgres@127.0.0.1:5432"
const redisUrl = process.env["REDIS_URL"] ?? "redis://127.0.0.1:6379"
const durationSeconds = Number(process.env["BENCH_DURATION"] ?? "10")
const warmupSeconds = Number(process.env["BENCH_WARMUP"] ?? "5")
const allScenarios = ["whoami", "fresh", "replay", "mix", "get", "list"] as const
type Scenario = (typeof allScenarios)[number]
const scenarios = (process.env["BENCH_SCENARIOS"]?.split(",").map((s) => s.trim()) ?? [...allScenarios]) as Array<
  Scenario
>
for (const scenario of scenarios) {
  if (!allScenarios.includes(scenario)) throw new Error(`BENCH_SCENARIOS: unknown scenario "${scenario}"`)
}

const root = join(import.meta.dir, "..")

const run = Date.now().toString(36)
const children: Array<Subprocess> = []
const databases: Array<string> = []

const newDatabase = async (name: string): Promise<string> => {
  const url = await createPostgresDatabase(postgresServer, `bench_${run}_${name.replace(/\W/g, "_")}`)
  databases.push(url)
  return url
}

const runToEnd = async (cmd: Array<string>, env: Record<string, string> = {}) => {
  const child = spawn(cmd, { cwd: root, env: { ...process.env, ...env }, stdout: "pipe", stderr: "pipe" })
  const [stdout, stderr, code] = await Promise.all([
    new Response(child.stdout).text(),
    new Response(child.stderr).text(),
    child.exited
  ])
  if (code !== 0) throw new Error(`${cmd.join(" ")} exited with ${code}:\n${stdout}${stderr}`)
  return stdout
}

/** A key in the new `database` (which its creation migrates), and the reads' records beside it. */
const createKey = async (binary: string, database: string): Promise<string> => {
  const apiKey = apiKeyOf(await runToEnd([binary, ...keysCreateArgs], { DATABASE_URL: database }))
  await seedReadsPostgres(database)
  return apiKey
}

const startServer = async (cmd: Array<string>, env: Record<string, string>, apiKey: string): Promise<string> => {
  const port = freePort()
  const child = spawn(cmd, {
    cwd: root,
    env: {
      ...process.env,
      SHUTDOWN_DELAY_SECONDS: "0",
      ...env,
      PORT: String(port),
      HOST: "127.0.0.1",
      LOG_LEVEL: "warn",
      RATE_LIMIT_MAX: "1000000000"
    },
    stdout: "ignore",
    stderr: "inherit"
  })
  children.push(child)
  const url = `http://127.0.0.1:${port}`
  for (let i = 0; i < 300; i++) {
    if (await whoamiOk(url, apiKey)) return url
    await Bun.sleep(50)
  }
  throw new Error(`${cmd.join(" ")} did not answer on ${url}`)
}

const wrk = async (
  url: string,
  scenario: Scenario,
  apiKey: string,
  keyPrefix: string,
  connections: number,
  seconds: number
) => {
  const out = await runToEnd(wrkArgs(url, scenario, apiKey, keyPrefix, connections, seconds))
  const result = wrkResultOf(out)
  if (result === undefined) throw new Error(`wrk printed no result:\n${out}`)
  return result
}

interface Target {
  readonly name: string
  readonly urls: ReadonlyArray<string>
  readonly apiKey: string
}

interface Measured {
  readonly requestsPerSecond: number
  readonly p99Ms: number
  readonly failures: number
}

const measure = async (target: Target, scenario: Scenario): Promise<Measured> => {
  const prefix = `${scenario}-${target.name.replace(/\W/g, "-")}-${Date.now().toString(36)}`
  if (scenario === "replay") await storeReplayed(target.urls[0]!, target.apiKey, prefix, target.name)
  const connections = 50 / target.urls.length
  const all = (seconds: number, keyPrefix: (i: number) => string) =>
    Promise.all(target.urls.map((url, i) => wrk(url, scenario, target.apiKey, keyPrefix(i), connections, seconds)))
  const keyPrefix = (phase: string) => (i: number) =>
    scenario === "replay" ? prefix : wrkKeyPrefix(scenario, `${phase}-${prefix}-${i}`)
  await all(warmupSeconds, keyPrefix("warm"))
  const results = await all(durationSeconds, keyPrefix("run"))
  return {
    requestsPerSecond: results.reduce((sum, r) => sum + r.requests / (r.durationMicros / 1e6), 0),
    p99Ms: Math.max(...results.map((r) => r.latencyMicros.p99 / 1000)),
    failures: results.reduce(
      (sum, r) => sum + r.non2xx + r.errors.connect + r.errors.read + r.errors.write + r.errors.timeout,
      0
    )
  }
}

const main = async () => {
  const dir = mkdtempSync(join(tmpdir(), "campaign-api-bench-shared-"))
  try {
    const binary = join(dir, "campaign-api")
    console.log("building the single binary...")
    await runToEnd(buildArgs(binary, process.execPath))

    const baselineDb = await newDatabase("baseline")
    const baselineKey = await createKey(binary, baselineDb)
    const baseline: Target = {
      name: "baseline",
      urls: [
        await startServer(
          [process.execPath, "bench/baseline.ts"],
          { DATABASE_URL: baselineDb, REDIS_URL: redisUrl },
          baselineKey
        )
      ],
      apiKey: baselineKey
    }
    const shared = { REDIS_URL: redisUrl }
    const oneDb = await newDatabase("one")
    const oneKey = await createKey(binary, oneDb)
    const one: Target = {
      name: "one instance",
      urls: [await startServer([binary, "serve"], { ...shared, DATABASE_URL: oneDb }, oneKey)],
      apiKey: oneKey
    }
    const twoDb = await newDatabase("two")
    const twoKey = await createKey(binary, twoDb)
    const two: Target = {
      name: "two instances",
      urls: [
        await startServer([binary, "serve"], { ...shared, DATABASE_URL: twoDb }, twoKey),
        await startServer([binary, "serve"], { ...shared, DATABASE_URL: twoDb }, twoKey)
      ],
      apiKey: twoKey
    }

    console.log(
      `PostgreSQL ${postgresServer}, Redis ${redisUrl}; ${warmupSeconds} s warm-up, ${durationSeconds} s measured, 50 connections`
    )
    const rows: Array<Record<string, unknown>> = []
    for (const scenario of scenarios) {
      const b = await measure(baseline, scenario)
      const o = await measure(one, scenario)
      const t = await measure(two, scenario)
      const row = {
        scenario,
        baseline: b,
        oneInstance: o,
        twoInstances: t,
        ratioOne: o.requestsPerSecond / b.requestsPerSecond,
        ratioTwo: t.requestsPerSecond / b.requestsPerSecond
      }
      rows.push(row)
      // As bench/run.ts: a failed request makes the run's exit code 1.
      if ([b, o, t].some((m) => m.failures > 0)) process.exitCode = 1
      const f = (m: Measured) =>
        `${m.requestsPerSecond.toFixed(0)} req/s, p99 ${m.p99Ms.toFixed(1)} ms${
          m.failures > 0 ? `, ${m.failures} FAILED` : ""
        }`
      console.log(
        `${scenario.padEnd(7)} baseline ${f(b)} | one instance ${f(o)} (${row.ratioOne.toFixed(3)}) | two instances ${
          f(t)
        } (${row.ratioTwo.toFixed(3)})`
      )
    }
    writeResults("shared", { durationSeconds, warmupSeconds, rows })
  } finally {
    for (const child of children) child.kill("SIGTERM")
    await Promise.all(children.map((child) => child.exited))
    await dropPostgresDatabases(postgresServer, databases)
    rmSync(dir, { recursive: true, force: true })
  }
}

await main()
