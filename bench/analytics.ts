/**
 * The analytics curve (docs/integrators.md, Analytics): one campaign of 10,000, 100,000 and 1,000,000
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
 *   activation a planned day of its own, from 0001-01-01 on (most outside the window);
 * - `isolation`: not a curve but whether one brand's analytics slows another brand's requests. Brand
 *   A (an `analytics:read` key) has one campaign of 1,000,000 distinct creators, each activated once,
 *   spread evenly over 2026-03-01 … 2026-03-06 (ISOLATION_CREATORS; ANALYTICS_SIZES does not apply);
 *   brand B (the bench's brand, a `campaigns:write` key) has the reads' 10,000 records (`seedReads`).
 *   On one running server (pinned to CPU 1, no rate limit), B runs open loop (`openloop.c` on CPU 0)
 *   at ISOLATION_RATE (200) req/s for ISOLATION_SECONDS (60), whoami and GET of one of its
 *   activations in turns, latency from each request's due time; A meanwhile asks for its campaign's
 *   analytics over the six days (`?from=2026-03-01&to=2026-03-06`) at every whole second of the run
 *   and unranged at every even second, each call at its due time whether or not the last has
 *   answered (open loop too), its latency from that time; a run ends once all of them have answered.
 *   Runs alternate B alone and B with A, ISOLATION_TURNS (2) of each, after an uncounted warm-up;
 *   per run a line, then B's p99 alone against with A (medians over the turns): PASS when with A is
 *   at most 3 times alone, every A call answered 200 and every B request answered 2xx, else FAIL
 *   (exit code 1).
 *
 *   bun bench/analytics.ts     # ANALYTICS_SIZES=10000,100000,1000000 ANALYTICS_BACKENDS=sqlite,postgres
 *                              # ANALYTICS_SHAPES=spread (or widest,stored-before, or isolation)
 *                              # POSTGRES_URL=postgres://postgres@127.0.0.1:5432
 *                              # ANALYTICS_BINARY=<path>: that binary instead of one built from src
 *                              # ISOLATION_SECONDS=60 ISOLATION_TURNS=2 ISOLATION_RATE=200
 *                              # ISOLATION_CREATORS=1000000 ISOLATION_WARMUP_SECONDS=10
 */
import { spawn, spawnSync } from "bun"
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import {
  campaign,
  dateOf,
  day,
  fillPostgres,
  fillSqlite,
  isolationBrand,
  isolationDays,
  isolationFirstDay,
  shapes
} from "./campaigns.ts"
import {
  apiKeyOf,
  brandId,
  buildArgs,
  freePort,
  keysCreateArgs,
  readPaths,
  seedReads,
  seedReadsPostgres,
  waitForReady,
  whoamiOk,
  writeResults
} from "./common.ts"
import { createPostgresDatabase, dropPostgresDatabases } from "./harness/databases.ts"
import { cpuSeconds, machineBusySeconds, ownCpuSeconds, runQueueSeconds } from "./harness/machine.ts"
import { median } from "./harness/report.ts"
import {
  buildGenerator,
  generatorArgs,
  type GeneratorResult,
  generatorResultOf,
  rawRequest,
  readSamples,
  summarize,
  type Summary,
  verdictOf
} from "./openloop.ts"

const sizes = (process.env["ANALYTICS_SIZES"] ?? "10000,100000,1000000").split(",").map(Number)
const backends = (process.env["ANALYTICS_BACKENDS"] ?? "sqlite,postgres").split(",")
const shapeNames = (process.env["ANALYTICS_SHAPES"] ?? "spread").split(",")
const postgresServer = process.env["POSTGRES_URL"] ?? "postgres://postgres@127.0.0.1:5432"

const dir = mkdtempSync(join(tmpdir(), "campaign-api-analytics-"))
const root = join(import.meta.dir, "..")
// A prebuilt binary (ANALYTICS_BINARY), so that one build's figures can be set beside another's.
const givenBinary = process.env["ANALYTICS_BINARY"]
const binary = givenBinary === undefined ? join(dir, "campaign-api") : resolve(givenBinary)
if (givenBinary === undefined) {
  if (
    spawnSync(buildArgs(binary, "bun"), { cwd: root }).exitCode !== 0
  ) {
    throw new Error("building the binary failed")
  }
} else if (!existsSync(binary)) {
  throw new Error(`ANALYTICS_BINARY: no file at ${binary}`)
}
console.log(`binary: ${givenBinary === undefined ? "built from src" : binary}`)

for (const name of shapeNames) {
  if (shapes[name] === undefined) throw new Error(`ANALYTICS_SHAPES: unknown shape "${name}"`)
}

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

/** A new database of `backend` for `label`: a SQLite file in the work directory, or a new PostgreSQL database. */
const newDatabase = async (backend: string, label: string): Promise<string> => {
  if (backend === "sqlite") return join(dir, `analytics-${label}.sqlite`)
  return createPostgresDatabase(
    postgresServer,
    `campaign_api_analytics_${label.replace(/[^a-z0-9]/g, "_")}_${Date.now().toString(36)}`
  )
}

const dropDatabase = async (backend: string, database: string) => {
  if (backend === "sqlite") {
    for (const file of [database, `${database}-wal`, `${database}-shm`]) rmSync(file, { force: true })
  } else {
    await dropPostgresDatabases(postgresServer, [database])
  }
}

// The isolation scenario (header comment; bench/README.md, Analytics curve).
const isolationSeconds = Number(process.env["ISOLATION_SECONDS"] ?? "60")
const isolationTurns = Number(process.env["ISOLATION_TURNS"] ?? "2")
const isolationRate = Number(process.env["ISOLATION_RATE"] ?? "200")
const isolationCreators = Number(process.env["ISOLATION_CREATORS"] ?? "1000000")
const isolationWarmupSeconds = Number(process.env["ISOLATION_WARMUP_SECONDS"] ?? "10")
/** Connections of B's generator: at 200 req/s, a stall of 1.28 s before a request waits for one. */
const isolationConnections = 256
/** B's p99 with A may be at most this many times B's p99 alone. */
const isolationRatioLimit = 3
const rangedQuery = `?from=${dateOf(isolationFirstDay)}&to=${dateOf(isolationFirstDay + (isolationDays - 1) * day)}`
/**
 * An analytics call of A not answered within this long counts as no answer. Long on purpose: a call
 * the client gave up on would still be worked on by the server, and the next run "alone" would not
 * be; each run waits for all of A's answers, so the next starts on a server with nothing left to do.
 */
const analyticsTimeoutMs = 600_000
const serverCpu = "1"
const loadCpu = "0"

const loadAverage = () => readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")

/** One analytics call of A, due at `due` (performance.now()): its status (0: no answer) and latency from `due`. */
interface Call {
  readonly ranged: boolean
  readonly status: number
  readonly ms: number
}

interface IsolationRun {
  readonly turn: string
  readonly withA: boolean
  readonly b: GeneratorResult
  readonly bLatency: Summary
  readonly whoami: Summary
  readonly get: Summary
  readonly flags: ReadonlyArray<string>
  readonly calls: ReadonlyArray<Call>
  /** Shares of a core over the run: the server's, and every other process's but the generator's and this one's. */
  readonly serverCpuPercent: number
  readonly otherCpuPercent: number
  /** Share of the run the server's main thread was ready to run but waited for a CPU. */
  readonly serverWaitedPercent: number
}

const isolation = async (backend: string, generator: string) => {
  const setupStarted = performance.now()
  const database = await newDatabase(backend, `isolation-${isolationCreators}`)
  const filled = performance.now()
  if (backend === "sqlite") {
    await fillSqlite(database, "isolation", isolationCreators)
    seedReads(database)
  } else {
    await fillPostgres(database, "isolation", isolationCreators)
    await seedReadsPostgres(database)
  }
  const fillMs = performance.now() - filled
  const env = { ...process.env, DATABASE_URL: database }
  // A's key first: the first command upgrades the database and fills the counts.
  const upgradeStarted = performance.now()
  const createdA = spawnSync([
    binary,
    ...keysCreateArgs.map((word) =>
      word === brandId
        ? isolationBrand
        : word === "campaigns:write"
        ? "analytics:read"
        : word === "bench"
        ? "bench-a"
        : word
    )
  ], { env })
  const upgradeMs = performance.now() - upgradeStarted
  if (createdA.exitCode !== 0) throw new Error(`keys create for brand A failed: ${createdA.stderr}`)
  const createdB = spawnSync([binary, ...keysCreateArgs], { env })
  if (createdB.exitCode !== 0) throw new Error(`keys create for brand B failed: ${createdB.stderr}`)
  const keyA = apiKeyOf(createdA.stdout.toString())
  const keyB = apiKeyOf(createdB.stdout.toString())
  const port = freePort()
  const url = `http://127.0.0.1:${port}`
  const server = spawn(["taskset", "-c", serverCpu, binary, "serve"], {
    env: {
      ...env,
      PORT: String(port),
      HOST: "127.0.0.1",
      LOG_LEVEL: "warn",
      RATE_LIMIT_MAX: "1000000000",
      // Each run opens the generator's connections anew, and the server counts a connection its
      // client closed for up to 30 s (docs/operators.md, Operating it, Connections): by the fourth run of a
      // minute the one address would be at 1,024, and the server would close the connections it
      // takes for idle, a request written on one but not yet read by a stalled server with it.
      CONNECTIONS_PER_ADDRESS: "65536",
      SHUTDOWN_DELAY_SECONDS: "0"
    },
    stdout: "ignore",
    stderr: "ignore"
  })
  const runs: Array<IsolationRun> = []
  try {
    while (!(await whoamiOk(url, keyB))) await Bun.sleep(50)
    await waitForReady(url, { intervalMs: 50 })
    const setupMs = performance.now() - setupStarted
    // B's two requests answer 200 before anything is measured, and A's counts are the whole campaign.
    for (const path of ["/v1/whoami", readPaths.get]) {
      const answer = await fetch(`${url}${path}`, { headers: { authorization: `Bearer ${keyB}` } })
      if (answer.status !== 200) throw new Error(`brand B: ${path} answered ${answer.status}: ${await answer.text()}`)
    }
    const counted = async (query: string) => {
      const answer = await fetch(`${url}/v1/campaigns/${campaign}/analytics${query}`, {
        headers: { authorization: `Bearer ${keyA}` }
      })
      const { analytics } = (await answer.json()) as { analytics: { activations: number; creators: number } }
      return `${analytics.activations} activations, ${analytics.creators} creators`
    }
    console.log(
      `\n${backend}: isolation, brand A ${isolationCreators} creators over ${isolationDays} days; setup ${
        (setupMs / 1000).toFixed(1)
      } s (fill ${(fillMs / 1000).toFixed(1)} s, upgrade at keys create ${(upgradeMs / 1000).toFixed(1)} s); ` +
        `A ranged: ${await counted(rangedQuery)}; unranged: ${await counted("")}; load average ${loadAverage()}`
    )
    console.log(
      `B: ${isolationRate} req/s open loop (whoami and GET ${readPaths.get} in turns), ${isolationConnections} connections; ` +
        `A: ranged ${rangedQuery} every second, unranged every 2 s, each at its due time; ${isolationSeconds} s runs`
    )
    console.log(
      "run        B with  sent    2xx  non-2xx  timeouts  B p50 ms  B p99 ms  B max ms  whoami p99  get p99  gen lag p99  A calls  A 200s  A p50 ms  A max ms  server CPU %  waited for CPU %  others CPU %  flags"
    )
    const requestFiles = (["whoami", "get"] as const).map((scenario) => {
      const file = join(dir, `isolation-${backend}-${scenario}.http`)
      writeFileSync(file, rawRequest(url, scenario, keyB, "isolation"))
      return file
    })
    const run = async (turn: string, withA: boolean, seconds: number): Promise<IsolationRun> => {
      const samplesFile = join(dir, `isolation-${backend}.latency`)
      const before = {
        server: cpuSeconds(server.pid),
        waited: runQueueSeconds(server.pid),
        machine: machineBusySeconds(),
        own: ownCpuSeconds()
      }
      const startedAt = performance.now()
      const spawned = spawn([
        "taskset",
        "-c",
        loadCpu,
        ...generatorArgs(generator, url, {
          rate: isolationRate,
          seconds,
          connections: isolationConnections,
          requestFile: requestFiles,
          samplesFile
        })
      ], { stdout: "pipe", stderr: "pipe" })
      // A's calls, each at its due second from about when the generator's first request is due.
      const calls: Array<Promise<Call>> = []
      if (withA) {
        for (let second = 0; second < seconds; second++) {
          const due = startedAt + second * 1000
          await Bun.sleep(Math.max(0, due - performance.now()))
          const call = (ranged: boolean) =>
            fetch(`${url}/v1/campaigns/${campaign}/analytics${ranged ? rangedQuery : ""}`, {
              headers: { authorization: `Bearer ${keyA}` },
              signal: AbortSignal.timeout(analyticsTimeoutMs)
            }).then(
              async (answer) => {
                await answer.arrayBuffer()
                return { ranged, status: answer.status, ms: performance.now() - due }
              },
              () => ({ ranged, status: 0, ms: performance.now() - due })
            )
          calls.push(call(true))
          if (second % 2 === 0) calls.push(call(false))
        }
      }
      const [exitCode, stdout, stderr, answered] = await Promise.all([
        spawned.exited,
        new Response(spawned.stdout).text(),
        new Response(spawned.stderr).text(),
        Promise.all(calls)
      ])
      const wallSeconds = (performance.now() - startedAt) / 1000
      const usage = spawned.resourceUsage()
      const generatorCpu = usage === undefined ? 0 : Number(usage.cpuTime.user + usage.cpuTime.system) / 1e6
      const serverCpu = cpuSeconds(server.pid) - before.server
      const otherCpu = machineBusySeconds() - before.machine - serverCpu - generatorCpu - (ownCpuSeconds() - before.own)
      const b = generatorResultOf(stdout)
      if (exitCode !== 0 || b === undefined) {
        throw new Error(`the generator exited with ${exitCode}:\n${stdout}${stderr}`)
      }
      const samples = readSamples(samplesFile)
      rmSync(samplesFile)
      const bLatency = summarize([samples])
      const { overCapacity, untrusted } = verdictOf([b], bLatency)
      const result: IsolationRun = {
        turn,
        withA,
        b,
        bLatency,
        whoami: summarize([samples.filter((_, n) => n % 2 === 0)]),
        get: summarize([samples.filter((_, n) => n % 2 === 1)]),
        flags: [...(overCapacity ? ["over capacity"] : []), ...(untrusted.length > 0 ? ["UNTRUSTED"] : [])],
        calls: answered,
        serverCpuPercent: (serverCpu / wallSeconds) * 100,
        otherCpuPercent: Math.max(0, (otherCpu / wallSeconds) * 100),
        serverWaitedPercent: ((runQueueSeconds(server.pid) - before.waited) / wallSeconds) * 100
      }
      const timeouts = b.unsent + b.unanswered
      const errors = b.errors.connect + b.errors.read + b.errors.write + b.errors.malformed + b.errors.closed
      const aMs = answered.map((c) => c.ms)
      console.log(
        `${turn.padEnd(9)}  ${(withA ? "A" : "alone").padEnd(6)}  ${String(b.sent).padStart(5)}  ${
          String(b.answered - b.non2xx).padStart(5)
        }  ${String(b.non2xx).padStart(7)}  ${String(timeouts).padStart(8)}  ` +
          `${bLatency.p50.toFixed(2).padStart(8)}  ${bLatency.p99.toFixed(2).padStart(8)}  ${
            bLatency.max.toFixed(1).padStart(8)
          }  ${result.whoami.p99.toFixed(2).padStart(10)}  ${result.get.p99.toFixed(2).padStart(7)}  ${
            b.ownLagMs.p99.toFixed(3).padStart(11)
          }  ` +
          `${String(answered.length).padStart(7)}  ${
            String(answered.filter((c) => c.status === 200).length).padStart(6)
          }  ${(aMs.length === 0 ? "-" : median(aMs).toFixed(1)).padStart(8)}  ${
            (aMs.length === 0 ? "-" : Math.max(...aMs).toFixed(1)).padStart(8)
          }  ${result.serverCpuPercent.toFixed(0).padStart(12)}  ${
            result.serverWaitedPercent.toFixed(0).padStart(15)
          }  ${result.otherCpuPercent.toFixed(0).padStart(12)}  ` +
          [
            ...result.flags,
            // On PostgreSQL the database's own work for A's calls is among the others' CPU.
            ...(result.otherCpuPercent > 10 && !(backend === "postgres" && withA) ? ["noisy"] : []),
            ...(errors > 0 ? [`socket errors ${JSON.stringify(b.errors)}`] : [])
          ].join(", ")
      )
      return result
    }
    // Uncounted: the server's code compiled under B's load and A's calls once each.
    if (isolationWarmupSeconds > 0) await run("warm-up", true, Math.min(isolationWarmupSeconds, 2))
    if (isolationWarmupSeconds > 2) await run("warm-up", false, isolationWarmupSeconds - 2)
    for (let turn = 1; turn <= isolationTurns; turn++) {
      for (const withA of [false, true]) {
        await Bun.sleep(1000)
        runs.push(await run(`turn ${turn}`, withA, isolationSeconds))
      }
    }
  } finally {
    server.kill("SIGTERM")
    await server.exited
    await dropDatabase(backend, database)
  }
  const p99s = (withA: boolean) => runs.filter((r) => r.withA === withA).map((r) => r.bLatency.p99)
  const alone = median(p99s(false))
  const withA = median(p99s(true))
  const ratio = withA / alone
  const calls = runs.flatMap((r) => r.calls)
  const byStatus = new Map<number, number>()
  for (const c of calls) byStatus.set(c.status, (byStatus.get(c.status) ?? 0) + 1)
  const statuses = [...byStatus].map(([status, count]) => `${status === 0 ? "no answer" : status}: ${count}`).join(", ")
  const ranged = calls.filter((c) => c.ranged).map((c) => c.ms)
  const unranged = calls.filter((c) => !c.ranged).map((c) => c.ms)
  const bFailed = runs.reduce((n, r) => n + r.b.non2xx + r.b.unsent + r.b.unanswered, 0)
  const reasons = [
    ...(ratio > isolationRatioLimit
      ? [`B's p99 with A is ${ratio.toFixed(2)} times alone (at most ${isolationRatioLimit})`]
      : []),
    ...(calls.some((c) => c.status !== 200) ? ["not every A call answered 200"] : []),
    ...(bFailed > 0 ? [`${bFailed} of B's requests were not answered 2xx within the run and 10 s after`] : [])
  ]
  console.log(
    `${backend}: B p99 alone ${alone.toFixed(2)} ms (median of ${
      p99s(false).map((ms) => ms.toFixed(2)).join(", ")
    }), ` +
      `with A ${withA.toFixed(2)} ms (median of ${p99s(true).map((ms) => ms.toFixed(2)).join(", ")}), ratio ${
        ratio.toFixed(2)
      }; ` +
      `A: ${calls.length} calls (${statuses}), ranged p50 ${median(ranged).toFixed(1)} / max ${
        Math.max(...ranged).toFixed(1)
      } ms, unranged p50 ${median(unranged).toFixed(1)} / max ${
        Math.max(...unranged).toFixed(1)
      } ms; load average ${loadAverage()}`
  )
  console.log(`${backend}: ${reasons.length === 0 ? "PASS" : `FAIL: ${reasons.join("; ")}`}`)
  return {
    backend,
    pass: reasons.length === 0,
    alone,
    withA,
    ratio,
    runs: runs.map(({ b, bLatency, calls: runCalls, flags, get, turn, whoami, withA }) => ({
      turn,
      withA,
      bLatency,
      whoami,
      get,
      flags,
      generator: { ...b, latencyMs: undefined },
      calls: runCalls
    }))
  }
}

const curveShapes = shapeNames.filter((shape) => shape !== "isolation")
try {
  if (curveShapes.length > 0) {
    console.log(
      "backend   shape          activations  counted  entries     bytes  upgrade s  first ms  whole campaign ms (median of 5)  one month ms  /healthz meanwhile ms"
    )
  }
  for (const backend of backends) {
    for (const shape of curveShapes) {
      for (const n of sizes) {
        const database = await newDatabase(backend, `${shape}-${n}`)
        if (backend === "sqlite") await fillSqlite(database, shape, n)
        else await fillPostgres(database, shape, n)
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
        await dropDatabase(backend, database)
      }
    }
  }
  if (shapeNames.includes("isolation")) {
    console.log(`\nisolation: load average at start ${loadAverage()} (${navigator.hardwareConcurrency} cores)`)
    const generator = buildGenerator(dir)
    const results = []
    for (const backend of backends) results.push(await isolation(backend, generator))
    writeResults("isolation", { binary, loadAverageAtEnd: loadAverage(), results })
    if (results.some((r) => !r.pass)) process.exitCode = 1
  }
} finally {
  rmSync(dir, { recursive: true, force: true })
}
