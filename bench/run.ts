/**
 * The benchmark: the real service against a framework-free baseline on the same machine.
 *
 *   bun bench/run.ts                      # BENCH_DURATION=10 (seconds per measured run), BENCH_WARMUP=15,
 *                                         # BENCH_STARTUP_ONLY=1 (start-up against a bare Bun.serve only),
 *                                         # BENCH_SCENARIOS=pages (a page of each combination of filters
 *                                         # among 300,000 activations of one campaign, the service alone),
 *                                         # BENCH_LOG_RUNS=4, BENCH_LOG_SECONDS=5 (the access log's runs)
 *                                         # BENCH_METRICS_ONLY=1 (only metrics on against off, side by side;
 *                                         # BENCH_METRICS_AGAINST=<binary>: that binary against this one, metrics off)
 *                                         # BENCH_OPEN_LOOP=1 (only latency at constant rates, from each request's
 *                                         # due time, and a fresh instance's first seconds: bench/README.md)
 *
 * Each server runs on its own temporary database (prepared by the service's `keys create`), pinned
 * to CPU 1; wrk is pinned to CPU 0. For every scenario and server: a warm-up run, then a measured
 * run at 50 connections; then the access log's runs, the warn and info servers side by side.
 * Prints a table per scenario and writes everything to
 * bench/results/<timestamp>.json. Also builds the single binary and times its start.
 *
 * Every child process is started under `setpriv --pdeathsig KILL` (it dies with this process, even
 * on SIGKILL) with a hard timeout, and is killed on exit, on error and on SIGINT/SIGTERM.
 */
import type { Subprocess } from "bun"
import { Database } from "bun:sqlite"
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { cpus, release, tmpdir } from "node:os"
import { join } from "node:path"
import {
  apiKeyOf,
  freePort,
  keysCreateArgs,
  pagedActivations,
  pagePaths,
  type PageScenario,
  readPaths,
  seededActivations,
  seedPages,
  seedReads,
  storeReplayed,
  whoamiOk,
  writeResults,
  wrkArgs,
  wrkResultOf,
  wrkThreads
} from "./common.ts"
import {
  buildGenerator,
  generatorArgs,
  generatorProblems,
  type GeneratorResult,
  generatorResultOf,
  heldNote,
  type OpenLoopScenario,
  openLoopScenarios,
  perSecond,
  rawRequest,
  readinessRequest,
  readSamples,
  summarize,
  type Summary,
  type Verdict,
  verdictOf
} from "./openloop.ts"

// ---------------------------------------------------------------------------------------------
// Settings

const root = join(import.meta.dir, "..")
const bun = process.execPath

const fail = (message: string): never => {
  console.error(`bench: ${message}`)
  process.exit(2)
}

const envWhole = (name: string, fallback: number, unit: string): number => {
  const raw = process.env[name]
  if (raw === undefined || raw.trim() === "") return fallback
  const value = Number(raw)
  if (!Number.isInteger(value) || value <= 0) fail(`${name} must be a whole number of ${unit} above 0, got "${raw}"`)
  return value
}
const envSeconds = (name: string, fallback: number) => envWhole(name, fallback, "seconds")

const durationSeconds = envSeconds("BENCH_DURATION", 10)
/**
 * JavaScriptCore keeps compiling the service's hot paths for many seconds under load (`perf`
 * showed its JIT thread taking a fifth of the server's core 4 s in, next to nothing after 18 s),
 * so a short warm-up measures the compiler as much as the service.
 */
const warmupSeconds = envSeconds("BENCH_WARMUP", 15)
const connections = 50
const serverCpu = "1"
const loadCpu = "0"
const startupRuns = 9
/** Pause after each wrk run so the requests still queued in the server finish. */
const settleMs = 1000
/** Other processes using more CPU than this (100 = one core) during a measured run make it noisy. */
const otherCpuWarningPercent = 10
/** Effect's names for log levels: README's `warning` is refused by Config.logLevel (only `warn` parses). */
const serviceLogLevel = "warn"

type ScenarioName = "whoami" | "fresh" | "replay" | "mix" | "get" | "list" | PageScenario

const isPage = (scenario: ScenarioName): scenario is PageScenario => scenario in pagePaths

/** The page scenarios: run only when named (`pages` names them all), on the service alone. */
const pageScenarios = (Object.keys(pagePaths) as Array<PageScenario>).map((name) => ({
  name,
  title: `(g) a page of 20 among ${pagedActivations.toLocaleString("en-US")} activations of one campaign: GET ${
    pagePaths[name]
  }`
}))

const allScenarios: ReadonlyArray<{ readonly name: ScenarioName; readonly title: string }> = [
  { name: "whoami", title: "(a) whoami: GET /v1/whoami" },
  { name: "fresh", title: "(b) activate, a fresh Idempotency-Key per request" },
  { name: "replay", title: "(c) activate replays: the same key and body every request" },
  { name: "mix", title: "(d) mix: 90% whoami, 10% activate with a fresh key" },
  { name: "get", title: `(e) get an activation by id (GET ${readPaths.get.replace(/[^/]+$/, "{id}")})` },
  { name: "list", title: "(f) a page of 20 activations of one campaign (GET /v1/activations?limit=20&campaignId=…)" }
]

/** What a wrk run of `scenario` passes as its key prefix: the path itself for a read. */
const keyPrefixOf = (scenario: ScenarioName, prefix: string) =>
  scenario === "get" || scenario === "list" ? readPaths[scenario] : isPage(scenario) ? pagePaths[scenario] : prefix

/** BENCH_STARTUP_ONLY=1 measures the binary's start-up against the bare server's, and stops there. */
const startupOnly = process.env["BENCH_STARTUP_ONLY"] === "1"

const envList = (name: string, fallback: string): Array<string> =>
  (process.env[name]?.trim() || fallback).split(",").map((item) => item.trim()).filter((item) => item !== "")

const envNumbers = (name: string, fallback: string, valid: (value: number) => boolean, what: string): Array<number> =>
  envList(name, fallback).map((raw) => {
    const value = Number(raw)
    if (!valid(value)) fail(`${name} must be a comma-separated list of ${what}, got "${raw}"`)
    return value
  })

/**
 * BENCH_OPEN_LOOP=1: latency at constant rates measured from each request's due time (the
 * generator `bench/openloop.c`), the service and the baseline in turns, then a fresh instance's
 * first seconds against the same instance warm; nothing else is run. bench/README.md says how.
 */
const openLoop = process.env["BENCH_OPEN_LOOP"] === "1"
/** The rates, as shares of the baseline's closed-loop peak in the same run; BENCH_OPEN_LOOP_RATES gives them in req/s instead. */
const openLoopFractions = envNumbers(
  "BENCH_OPEN_LOOP_FRACTIONS",
  "0.25,0.5,0.75",
  (f) => f > 0 && f <= 2,
  "shares of the peak (0.5)"
)
const openLoopRates = process.env["BENCH_OPEN_LOOP_RATES"]?.trim()
  ? envNumbers("BENCH_OPEN_LOOP_RATES", "", (r) => Number.isInteger(r) && r > 0, "whole requests per second")
  : undefined
const openLoopRounds = envWhole("BENCH_OPEN_LOOP_ROUNDS", 2, "rounds")
const openLoopConnections = envWhole("BENCH_OPEN_LOOP_CONNECTIONS", 256, "connections")
/** As users run it by default: one access-log line per request, to a file. */
const openLoopLogLevel = process.env["BENCH_OPEN_LOOP_LOG_LEVEL"]?.trim() || "info"
if (!["info", "warn"].includes(openLoopLogLevel)) {
  fail(`BENCH_OPEN_LOOP_LOG_LEVEL must be info or warn, got "${openLoopLogLevel}"`)
}
/** Which servers run at each rate (the calibration of the generator runs the baseline alone). */
const openLoopServers = envList("BENCH_OPEN_LOOP_SERVERS", "service,baseline")
for (const name of openLoopServers) {
  if (name !== "service" && name !== "baseline") {
    fail(`BENCH_OPEN_LOOP_SERVERS: "${name}" is neither service nor baseline`)
  }
}
if (openLoopRates === undefined && !openLoopServers.includes("baseline")) {
  fail(
    "BENCH_OPEN_LOOP_SERVERS without the baseline needs BENCH_OPEN_LOOP_RATES (the rates are shares of the baseline's peak)"
  )
}
/** The fresh-instance curve: these scenarios (`none` for none), at this rate, for these seconds. */
const startScenarios = envList("BENCH_START_SCENARIOS", "whoami,get").filter((name) => name !== "none")
for (const name of startScenarios) {
  if (!openLoopScenarios.includes(name as OpenLoopScenario)) {
    fail(`BENCH_START_SCENARIOS: "${name}" is not one of ${openLoopScenarios.join(", ")}`)
  }
}
const startRate = envWhole("BENCH_START_RATE", 5000, "requests per second")
const startSeconds = envSeconds("BENCH_START_SECONDS", 10)

/** BENCH_SCENARIOS=whoami,fresh runs only those (all but the pages by default; `pages` is every page scenario). */
const scenarios = (() => {
  const wanted = (process.env["BENCH_SCENARIOS"] ?? "").split(",").map((name) => name.trim()).filter((name) =>
    name !== ""
  )
    .flatMap((name) => (name === "pages" ? pageScenarios.map((page) => page.name) : [name]))
  if (openLoop) {
    for (const name of wanted) {
      if (!openLoopScenarios.includes(name as OpenLoopScenario)) {
        fail(`BENCH_SCENARIOS: the open loop runs ${openLoopScenarios.join(", ")}, not "${name}"`)
      }
    }
    const names: ReadonlyArray<string> = wanted.length === 0 ? openLoopScenarios : wanted
    return allScenarios.filter((scenario) => names.includes(scenario.name))
  }
  const known = [...allScenarios, ...pageScenarios]
  for (const name of wanted) {
    if (!known.some((scenario) => scenario.name === name)) {
      fail(`BENCH_SCENARIOS: unknown scenario "${name}" (${known.map((s) => s.name).join(", ")}, pages)`)
    }
  }
  return wanted.length === 0 ? allScenarios : known.filter((scenario) => wanted.includes(scenario.name))
})()

const runsPages = scenarios.some((scenario) => isPage(scenario.name))

/** The records every server's database holds before it starts: the reads', and the pages' when a page scenario runs. */
const seed = (databaseFile: string) => {
  seedReads(databaseFile)
  if (runsPages) seedPages(databaseFile)
}

/**
 * The access log's cost (LOG_LEVEL=info over warn) is measured apart, in short runs of the two
 * servers side by side: bench/README.md says how and why.
 */
const accessLogRuns = envWhole("BENCH_LOG_RUNS", 4, "runs")
if (accessLogRuns % 2 === 1) {
  fail(`BENCH_LOG_RUNS must be even (each server's wrk starts first equally often), got ${accessLogRuns}`)
}
const accessLogSeconds = envSeconds("BENCH_LOG_SECONDS", 5)

/**
 * BENCH_METRICS_ONLY=1: only what metrics cost, the service with METRICS_PORT set against the same
 * binary without it, side by side as the access log is measured (`BENCH_LOG_RUNS` runs of
 * `BENCH_LOG_SECONDS` per scenario, after a side-by-side warm-up of BENCH_WARMUP). With
 * BENCH_METRICS_AGAINST=<a binary>, that binary against this build with metrics off: what "off" costs.
 */
const metricsOnly = process.env["BENCH_METRICS_ONLY"] === "1"
const metricsAgainst = process.env["BENCH_METRICS_AGAINST"]?.trim() || undefined

/** The longest an open-loop run may take: its seconds, the generator's drain, a server's start. */
const openLoopRunBudgetSeconds = (seconds: number) => seconds + 10 + 60 + 20

/** Everything stops by itself after this, whatever happens. */
const budgetMs = (openLoop
  ? 300 + scenarios.length * (2 * (warmupSeconds + 40) + 2 * (durationSeconds + 40) +
        (openLoopRates ?? openLoopFractions).length * openLoopRounds * 2 * openLoopRunBudgetSeconds(durationSeconds)) +
    startScenarios.length * 2 * (warmupSeconds + 120 + 2 * openLoopRunBudgetSeconds(startSeconds))
  : 300 +
    scenarios.length * (3 * (warmupSeconds + durationSeconds + 40) + (accessLogRuns + 1) * (accessLogSeconds + 20))) *
  1000

// ---------------------------------------------------------------------------------------------
// Child processes: all tracked, all killed at the end

type Child = Subprocess<"ignore", "pipe", "pipe">
const children = new Set<Child>()

/** The temporary directory with the databases and the binary, once made. */
let workDir: string | undefined

const killAll = () => {
  for (const child of children) child.kill("SIGKILL")
}

const cleanUp = () => {
  killAll()
  if (workDir !== undefined) rmSync(workDir, { recursive: true, force: true })
  workDir = undefined
}

process.on("exit", cleanUp)
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, () => {
    console.error(`bench: ${signal}, stopping every process it started`)
    process.exit(130)
  })
}
setTimeout(() => {
  console.error(`bench: over its time budget of ${budgetMs / 1000} s, stopping every process it started`)
  process.exit(1)
}, budgetMs).unref()

/** The last 64 KiB a stream printed, drained in the background so the child never blocks on a full pipe. */
class Output {
  private text = ""
  readonly done: Promise<void>

  constructor(stream: ReadableStream<Uint8Array>) {
    this.done = this.drain(stream)
  }

  private async drain(stream: ReadableStream<Uint8Array>) {
    const decoder = new TextDecoder()
    const reader = stream.getReader()
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) {
      this.text = (this.text + decoder.decode(chunk.value, { stream: true })).slice(-65536)
    }
  }

  toString() {
    return this.text
  }
}

interface Spawned {
  readonly process: Child
  readonly stdout: Output
  readonly stderr: Output
}

const spawn = (
  cmd: ReadonlyArray<string>,
  options: { env?: Record<string, string>; timeoutMs: number; stderrFile?: string }
): Spawned => {
  const child = Bun.spawn(["setpriv", "--pdeathsig", "KILL", ...cmd], {
    cwd: root,
    env: { ...process.env, ...options.env },
    stdin: "ignore",
    stdout: "pipe",
    // A server's access log goes to a file, as an operator would keep it; read back at the end.
    stderr: options.stderrFile === undefined ? "pipe" : Bun.file(options.stderrFile),
    timeout: options.timeoutMs,
    killSignal: "SIGKILL"
  })
  children.add(child)
  void child.exited.finally(() => children.delete(child))
  const stderr = options.stderrFile === undefined ? child.stderr as ReadableStream<Uint8Array> : new Response("").body!
  return { process: child, stdout: new Output(child.stdout), stderr: new Output(stderr) }
}

/** Runs a command to its end; throws with its output when it fails. */
const runCommand = async (
  cmd: ReadonlyArray<string>,
  options: { env?: Record<string, string>; timeoutMs: number }
): Promise<{ readonly stdout: string; readonly stderr: string }> => {
  const spawned = spawn(cmd, options)
  const exitCode = await spawned.process.exited
  await Promise.all([spawned.stdout.done, spawned.stderr.done])
  if (exitCode !== 0) {
    throw new Error(`${cmd.join(" ")} exited with ${exitCode}:\n${spawned.stderr}${spawned.stdout}`)
  }
  return { stdout: spawned.stdout.toString(), stderr: spawned.stderr.toString() }
}

/** SIGTERM, then SIGKILL if it has not stopped within 5 s. */
const stop = async (child: Child) => {
  child.kill("SIGTERM")
  const stopped = await Promise.race([child.exited.then(() => true), Bun.sleep(5000).then(() => false)])
  if (!stopped) {
    child.kill("SIGKILL")
    await child.exited
  }
}

// ---------------------------------------------------------------------------------------------
// Measuring a process from /proc

/** Clock ticks per second of /proc's CPU times (almost always 100). */
const clockTicks = (() => {
  const getconf = Bun.which("getconf")
  return (getconf === null ? 0 : Number(Bun.spawnSync([getconf, "CLK_TCK"]).stdout.toString().trim())) || 100
})()

const statusKb = (pid: number, field: "VmRSS" | "VmHWM"): number => {
  try {
    const match = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(readFileSync(`/proc/${pid}/status`, "utf8"))
    return match === null ? 0 : Number(match[1])
  } catch {
    return 0
  }
}

/** User + system CPU seconds of the whole process (all its threads). */
const cpuSeconds = (pid: number): number => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return (Number(fields[11]) + Number(fields[12])) / clockTicks // utime and stime, fields 14 and 15
}

/** Polls VmRSS every 50 ms; `stop` returns the highest value seen, in kB. */
const sampleRss = (pid: number) => {
  let peak = statusKb(pid, "VmRSS")
  const timer = setInterval(() => {
    peak = Math.max(peak, statusKb(pid, "VmRSS"))
  }, 50)
  return {
    stop: () => {
      clearInterval(timer)
      return Math.max(peak, statusKb(pid, "VmRSS"))
    }
  }
}

/** Busy CPU seconds of the whole machine (all cores, every process, ours included). */
const machineBusySeconds = (): number => {
  const fields = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number)
  const [user, nice, system, , , irq, softirq, steal] = fields as [
    number,
    number,
    number,
    number,
    number,
    number,
    number,
    number
  ]
  return (user + nice + system + irq + softirq + steal) / clockTicks
}

/** This orchestrating process's own CPU seconds. */
const ownCpuSeconds = (): number => {
  const usage = process.cpuUsage()
  return (usage.user + usage.system) / 1e6
}

const countActivations = (databaseFile: string): number => {
  const db = new Database(databaseFile, { readonly: true })
  try {
    return db.query<{ n: number }, []>("SELECT count(*) AS n FROM activations").get()!.n
  } finally {
    db.close()
  }
}

// ---------------------------------------------------------------------------------------------
// Servers

/** Polls whoami every `intervalMs` until a 200; the milliseconds since `startedAt`. */
const waitForWhoami = async (
  spawned: Spawned,
  url: string,
  apiKey: string,
  options: { readonly startedAt: number; readonly intervalMs: number; readonly timeoutMs: number }
): Promise<number> => {
  while (!(await whoamiOk(url, apiKey))) {
    if (spawned.process.exitCode !== null) {
      throw new Error(`the server exited with ${spawned.process.exitCode} before answering:\n${spawned.stderr}`)
    }
    if (performance.now() - options.startedAt > options.timeoutMs) {
      throw new Error(`no 200 from ${url}/v1/whoami within ${options.timeoutMs} ms:\n${spawned.stderr}`)
    }
    await Bun.sleep(options.intervalMs)
  }
  return performance.now() - options.startedAt
}

type ServerName = "service" | "service-info" | "baseline" | "metrics-off" | "metrics-on" | "against"

interface Server {
  readonly name: ServerName
  readonly spawned: Spawned
  readonly pid: number
  readonly url: string
  readonly apiKey: string
  readonly databaseFile: string
  readonly startupMs: number
}

/** Starts a server on a free port, pinned to the servers' CPU, without waiting for it. */
const spawnServer = (
  cmd: ReadonlyArray<string>,
  env: Record<string, string>,
  databaseFile: string,
  stderrFile?: string
): { readonly spawned: Spawned; readonly url: string } => {
  const port = freePort()
  const spawned = spawn(["taskset", "-c", serverCpu, ...cmd], {
    // Stopped between scenarios: no balancer to wait for (README, Operating it: Shutdown).
    env: { SHUTDOWN_DELAY_SECONDS: "0", ...env, PORT: String(port), HOST: "127.0.0.1", DATABASE_URL: databaseFile },
    timeoutMs: budgetMs,
    ...(stderrFile === undefined ? {} : { stderrFile })
  })
  return { spawned, url: `http://127.0.0.1:${port}` }
}

const startServer = async (
  name: ServerName,
  cmd: ReadonlyArray<string>,
  env: Record<string, string>,
  databaseFile: string,
  apiKey: string,
  stderrFile?: string
): Promise<Server> => {
  const startedAt = performance.now()
  const { spawned, url } = spawnServer(cmd, env, databaseFile, stderrFile)
  const startupMs = await waitForWhoami(spawned, url, apiKey, { startedAt, intervalMs: 20, timeoutMs: 60_000 })
  // Measured once ready, as a balancer sends traffic: not while the server warms up (README, Operating it: Start-up).
  while ((await fetch(`${url}/readyz`).then((answer) => answer.status, () => 0)) !== 200) {
    if (performance.now() - startedAt > 60_000) throw new Error(`${url}/readyz did not answer 200 within 60 s`)
    await Bun.sleep(20)
  }
  console.log(
    `${name} up on ${url} (pid ${spawned.process.pid}, CPU ${serverCpu}) after ${
      startupMs.toFixed(0)
    } ms, ready after ${(performance.now() - startedAt).toFixed(0)} ms`
  )
  return { name, spawned, pid: spawned.process.pid, url, apiKey, databaseFile, startupMs }
}

/** `keys create --json` through the given command line; the plaintext key. */
const createKey = async (cli: ReadonlyArray<string>, databaseFile: string): Promise<string> =>
  apiKeyOf(
    (await runCommand([...cli, ...keysCreateArgs], { env: { DATABASE_URL: databaseFile }, timeoutMs: 60_000 })).stdout
  )

// ---------------------------------------------------------------------------------------------
// wrk

const runWrk = async (server: Server, scenario: ScenarioName, seconds: number, keyPrefix: string) => {
  const spawned = spawn(
    [
      "taskset",
      "-c",
      loadCpu,
      ...wrkArgs(server.url, scenario, server.apiKey, keyPrefixOf(scenario, keyPrefix), connections, seconds)
    ],
    { timeoutMs: (seconds + 30) * 1000 }
  )
  const exitCode = await spawned.process.exited
  await Promise.all([spawned.stdout.done, spawned.stderr.done])
  const result = wrkResultOf(spawned.stdout.toString())
  if (exitCode !== 0 || result === undefined) {
    throw new Error(`wrk exited with ${exitCode} and no result:\n${spawned.stdout}${spawned.stderr}`)
  }
  const usage = spawned.process.resourceUsage()
  const wrkCpuSeconds = usage === undefined ? 0 : Number(usage.cpuTime.user + usage.cpuTime.system) / 1e6
  return { result, wrkCpuSeconds }
}

// ---------------------------------------------------------------------------------------------
// One scenario on one server

interface Measurement {
  readonly server: ServerName
  readonly requestsPerSecond: number
  readonly latencyMs: {
    readonly mean: number
    readonly p50: number
    readonly p90: number
    readonly p99: number
    readonly max: number
  }
  readonly requests: number
  readonly non2xx: number
  readonly statuses: Record<string, number>
  readonly socketErrors: {
    readonly connect: number
    readonly read: number
    readonly write: number
    readonly timeout: number
  }
  /** Highest VmRSS polled every 50 ms during the warm-up and the measured run. */
  readonly peakRssMb: number
  /** The server's CPU time over the measured run's wall time (100 = its whole core). */
  readonly serverCpuPercent: number
  readonly wrkCpuPercent: number
  /** CPU the rest of the machine used during the measured run (100 = one whole core): other load skews the figures. */
  readonly otherCpuPercent: number
  /** Activation rows the measured run added to the server's database. */
  readonly activationRowsWritten: number
}

const measure = async (server: Server, scenario: ScenarioName, runId: string): Promise<Measurement> => {
  // Replays use one key throughout (stored by one first request); the others a new key prefix per wrk run.
  const replayKey = `replay-${runId}`
  if (scenario === "replay") await storeReplayed(server.url, server.apiKey, replayKey, server.name)
  const rss = sampleRss(server.pid)
  await runWrk(server, scenario, warmupSeconds, scenario === "replay" ? replayKey : `warm-${runId}`)
  // wrk stops with requests still queued in the server: let them finish before counting rows.
  await Bun.sleep(settleMs)

  const rowsBefore = countActivations(server.databaseFile)
  const before = { server: cpuSeconds(server.pid), machine: machineBusySeconds(), own: ownCpuSeconds() }
  const startedAt = performance.now()
  const { result, wrkCpuSeconds } = await runWrk(
    server,
    scenario,
    durationSeconds,
    scenario === "replay" ? replayKey : `run-${runId}`
  )
  const wallSeconds = (performance.now() - startedAt) / 1000
  const serverCpu = cpuSeconds(server.pid) - before.server
  const otherCpu = machineBusySeconds() - before.machine - serverCpu - wrkCpuSeconds - (ownCpuSeconds() - before.own)
  const peakRssKb = rss.stop()
  await Bun.sleep(settleMs)
  const rowsAfter = countActivations(server.databaseFile)

  const ms = (micros: number) => micros / 1000
  return {
    server: server.name,
    requestsPerSecond: result.requests / (result.durationMicros / 1e6),
    latencyMs: {
      mean: ms(result.latencyMicros.mean),
      p50: ms(result.latencyMicros.p50),
      p90: ms(result.latencyMicros.p90),
      p99: ms(result.latencyMicros.p99),
      max: ms(result.latencyMicros.max)
    },
    requests: result.requests,
    non2xx: result.non2xx,
    statuses: result.statuses,
    socketErrors: {
      connect: result.errors.connect,
      read: result.errors.read,
      write: result.errors.write,
      timeout: result.errors.timeout
    },
    peakRssMb: peakRssKb / 1024,
    serverCpuPercent: (serverCpu / wallSeconds) * 100,
    wrkCpuPercent: (wrkCpuSeconds / wallSeconds) * 100,
    otherCpuPercent: Math.max(0, (otherCpu / wallSeconds) * 100),
    activationRowsWritten: rowsAfter - rowsBefore
  }
}

/** A wrk run's non-2xx answers and socket errors, in words; empty when there were none. */
const answerProblems = (
  who: string,
  run: Pick<Measurement, "non2xx" | "requests" | "statuses" | "socketErrors">
): Array<string> => {
  const problems: Array<string> = []
  if (run.non2xx > 0) {
    const statuses = Object.entries(run.statuses).map(([status, count]) => `${status}: ${count}`).join(", ")
    problems.push(`${who} answered ${run.non2xx} of ${run.requests} requests with a non-2xx status (${statuses})`)
  }
  const { connect, read, timeout, write } = run.socketErrors
  const socket = connect + read + write + timeout
  if (socket > 0) {
    problems.push(
      `${who} had ${socket} socket errors or timeouts (${JSON.stringify({ connect, read, write, timeout })})`
    )
  }
  return problems
}

/** What makes a measurement untrustworthy, in words; empty when it is clean. */
const problemsOf = (scenario: ScenarioName, m: Measurement): Array<string> => {
  const problems = answerProblems(m.server, m)
  const twoXx = m.requests - m.non2xx
  if (scenario === "fresh" && (m.activationRowsWritten < twoXx || m.activationRowsWritten > twoXx + connections)) {
    problems.push(`${m.server} wrote ${m.activationRowsWritten} activations for ${twoXx} successful fresh activations`)
  }
  if (scenario !== "fresh" && scenario !== "mix" && m.activationRowsWritten !== 0) {
    problems.push(`${m.server} wrote ${m.activationRowsWritten} activations during ${scenario}, expected none`)
  }
  return problems
}

// ---------------------------------------------------------------------------------------------
// The access log's cost

interface AccessLogCost {
  /** Info's throughput over warn's in each side-by-side run, in the order run. */
  readonly ratios: ReadonlyArray<number>
  /** The mean of `ratios`: the figure reported. */
  readonly ratio: number
  readonly problems: ReadonlyArray<string>
}

/**
 * `accessLogRuns` runs of two servers side by side (both on CPU 1, a wrk each on CPU 0), after one
 * uncounted run of `firstSeconds`; which wrk starts first alternates. bench/README.md says why.
 * The ratios are `measured`'s throughput over `reference`'s.
 */
const measureSideBySide = async (
  reference: Server,
  measured: Server,
  scenario: ScenarioName,
  runId: string,
  what: string,
  firstSeconds = accessLogSeconds
): Promise<AccessLogCost> => {
  const replayKeys = new Map([[reference, `log-replay-${runId}-${reference.name}`], [
    measured,
    `log-replay-${runId}-${measured.name}`
  ]])
  if (scenario === "replay") {
    for (const [server, key] of replayKeys) await storeReplayed(server.url, server.apiKey, key, server.name)
  }
  const problems: Array<string> = []
  const requestsPerSecond = async (server: Server, run: number) => {
    const keyPrefix = scenario === "replay" ? replayKeys.get(server)! : `log-${runId}-${run}-${server.name}`
    const { result } = await runWrk(server, scenario, run === 0 ? firstSeconds : accessLogSeconds, keyPrefix)
    problems.push(
      ...answerProblems(`${server.name} (${what}'s run ${run})`, { ...result, socketErrors: result.errors })
    )
    return result.requests / (result.durationMicros / 1e6)
  }
  // Rows written and other processes' CPU are checked on the measured runs; these only compare rates.
  const sideBySide = async (run: number) => {
    const [first, second] = run % 2 === 0 ? [reference, measured] : [measured, reference]
    const [firstRate, secondRate] = await Promise.all([requestsPerSecond(first, run), requestsPerSecond(second, run)])
    await Bun.sleep(settleMs)
    return first === measured ? firstRate / secondRate : secondRate / firstRate
  }
  await sideBySide(0)
  const ratios: Array<number> = []
  for (let run = 1; run <= accessLogRuns; run++) ratios.push(await sideBySide(run))
  return { ratios, ratio: ratios.reduce((sum, ratio) => sum + ratio, 0) / ratios.length, problems }
}

/** The warn and info servers side by side: what the access log costs. */
const measureAccessLog = (warn: Server, info: Server, scenario: ScenarioName, runId: string) =>
  measureSideBySide(warn, info, scenario, runId, "the access log")

/**
 * BENCH_METRICS_ONLY: per scenario, the server with metrics on (or this build, against another
 * binary) over the other, side by side after a side-by-side warm-up.
 */
const measureMetrics = async (binary: string, dir: string) => {
  const cli = [binary]
  const startOne = async (name: ServerName, command: ReadonlyArray<string>, env: Record<string, string>) => {
    const databaseFile = join(dir, `${name}.sqlite`)
    // Made by the binary that serves it: another build's database has that build's migrations.
    const apiKey = await createKey(command, databaseFile)
    seed(databaseFile)
    return startServer(
      name,
      [...command, "serve"],
      { RATE_LIMIT_MAX: "1000000000", LOG_LEVEL: serviceLogLevel, ...env },
      databaseFile,
      apiKey
    )
  }
  const metricsPort = freePort()
  const servers = metricsAgainst === undefined
    ? [
      await startOne("metrics-off", cli, {}),
      await startOne("metrics-on", cli, { METRICS_PORT: String(metricsPort) })
    ]
    : [await startOne("against", [metricsAgainst], {}), await startOne("metrics-off", cli, {})]
  const [reference, measured] = servers as [Server, Server]
  const results: Array<{ readonly scenario: ScenarioName } & AccessLogCost> = []
  try {
    const runId = Date.now().toString(36)
    for (const scenario of scenarios) {
      console.log(
        `\n${scenario.title}: ${measured.name} over ${reference.name}, ${accessLogRuns} runs side by side, ` +
          `${accessLogSeconds} s each, after ${warmupSeconds} s of both ...`
      )
      const cost = await measureSideBySide(
        reference,
        measured,
        scenario.name,
        `${runId}-${scenario.name}`,
        "metrics",
        warmupSeconds
      )
      results.push({ scenario: scenario.name, ...cost })
      console.log(
        `${measured.name}/${reference.name}: mean ${number(cost.ratio, 3)} (${
          cost.ratios.map((r) => number(r, 3)).join(", ")
        }; ` +
          `spread ${number(Math.min(...cost.ratios), 3)}–${number(Math.max(...cost.ratios), 3)})`
      )
      for (const problem of cost.problems) console.log(`!!! ERRORS: ${problem}; these figures are not valid`)
    }
    // A metrics server that counted nothing would make the comparison meaningless.
    if (metricsAgainst === undefined) {
      const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text()
      const counted = [...text.matchAll(/^http_server_request_duration_seconds_count\{[^}]*\} (\d+)$/gm)]
        .reduce((sum, match) => sum + Number(match[1]), 0)
      console.log(`metrics-on counted ${number(counted)} requests (GET /metrics)`)
      if (counted === 0) {
        results.push({
          scenario: scenarios[0]!.name,
          ratios: [],
          ratio: 0,
          problems: ["metrics-on counted no request"]
        })
      }
    }
  } finally {
    for (const server of servers) await stop(server.spawned.process)
  }
  return { reference: reference.name, measured: measured.name, against: metricsAgainst ?? null, results }
}

// ---------------------------------------------------------------------------------------------
// Open loop (BENCH_OPEN_LOOP=1): latency at a constant rate, from each request's due time

/** One run of the generator: its result, each request's latency, what the rest of the machine used meanwhile. */
interface OpenLoopRun {
  readonly result: GeneratorResult
  readonly samples: Float64Array
  /** CPU the rest of the machine used during the run (100 = one whole core), the generator and the server apart. */
  readonly otherCpuPercent: number
}

interface OpenLoopTarget {
  readonly name: string
  readonly url: string
  readonly apiKey: string
  readonly pid: number
}

/**
 * The generator on its CPU against `target` at `rate` for `seconds`. With `ready`, it first polls
 * `/readyz` every millisecond and starts the moment it answers 200 (a fresh instance's first seconds).
 */
const runGenerator = async (
  generator: string,
  target: OpenLoopTarget,
  scenario: OpenLoopScenario,
  keyPrefix: string,
  options: { readonly rate: number; readonly seconds: number; readonly ready?: boolean }
): Promise<OpenLoopRun> => {
  const file = join(workDir!, keyPrefix)
  writeFileSync(`${file}.http`, rawRequest(target.url, scenario, target.apiKey, keyPrefix))
  if (options.ready === true) writeFileSync(`${file}.ready.http`, readinessRequest(target.url))
  const before = { server: cpuSeconds(target.pid), machine: machineBusySeconds(), own: ownCpuSeconds() }
  const startedAt = performance.now()
  const spawned = spawn([
    "taskset",
    "-c",
    loadCpu,
    ...generatorArgs(generator, target.url, {
      rate: options.rate,
      seconds: options.seconds,
      connections: openLoopConnections,
      requestFile: `${file}.http`,
      samplesFile: `${file}.latency`,
      ...(options.ready === true ? { readyFile: `${file}.ready.http` } : {})
    })
  ], { timeoutMs: openLoopRunBudgetSeconds(options.seconds) * 1000 })
  const exitCode = await spawned.process.exited
  await Promise.all([spawned.stdout.done, spawned.stderr.done])
  const wallSeconds = (performance.now() - startedAt) / 1000
  const result = generatorResultOf(spawned.stdout.toString())
  if (exitCode !== 0 || result === undefined) {
    throw new Error(`the generator exited with ${exitCode} and no result:\n${spawned.stdout}${spawned.stderr}`)
  }
  const usage = spawned.process.resourceUsage()
  const generatorCpu = usage === undefined ? 0 : Number(usage.cpuTime.user + usage.cpuTime.system) / 1e6
  const serverCpu = cpuSeconds(target.pid) - before.server
  const otherCpu = machineBusySeconds() - before.machine - serverCpu - generatorCpu - (ownCpuSeconds() - before.own)
  const samples = readSamples(`${file}.latency`)
  rmSync(`${file}.latency`)
  return { result, samples, otherCpuPercent: Math.max(0, (otherCpu / wallSeconds) * 100) }
}

/** Rows a run wrote against the answers it got: one per successful fresh activation, none otherwise. */
const rowProblems = (
  who: string,
  scenario: OpenLoopScenario,
  run: GeneratorResult,
  rowsWritten: number
): Array<string> => {
  const twoXx = run.answered - run.non2xx
  // A request that was never answered may still have been committed.
  const unknown = run.unanswered + run.errors.read + run.errors.write + run.errors.malformed
  if (scenario === "fresh" && (rowsWritten < twoXx || rowsWritten > twoXx + unknown)) {
    return [`${who} wrote ${rowsWritten} activations for ${twoXx} successful fresh activations`]
  }
  if (scenario !== "fresh" && rowsWritten !== 0) {
    return [`${who} wrote ${rowsWritten} activations during ${scenario}, expected none`]
  }
  return []
}

/** A server's runs at one rate: the latency of all of them pooled, and whether it measures the server. */
interface PooledRuns {
  readonly latencyMs: Summary
  readonly verdict: Verdict
  readonly runs: ReadonlyArray<GeneratorResult & { readonly otherCpuPercent: number; readonly order: number }>
}

const pool = (runs: ReadonlyArray<OpenLoopRun & { readonly order: number }>): PooledRuns => {
  const latencyMs = summarize(runs.map((run) => run.samples))
  return {
    latencyMs,
    verdict: verdictOf(runs.map((run) => run.result), latencyMs),
    runs: runs.map((run) => ({ ...run.result, otherCpuPercent: run.otherCpuPercent, order: run.order }))
  }
}

interface RateResult {
  readonly rate: number
  /** The rate over the baseline's closed-loop peak measured in the same run (undefined when BENCH_OPEN_LOOP_RATES set it). */
  readonly fraction: number | undefined
  readonly servers: Record<string, PooledRuns>
  /** The service's percentile over the baseline's at this rate. */
  readonly ratios: { readonly p99: number; readonly p999: number } | undefined
}

/**
 * One scenario: each server warmed up, its closed-loop peak (wrk), then each rate on each server in
 * turns, `openLoopRounds` rounds, the order reversed every other round (service, baseline, baseline,
 * service, ...) so that a drift of the VM's speed over the minutes of one rate falls on both alike.
 * Side by side on one core the two would wait on each other's time slices: latency would measure
 * the scheduler (bench/README.md).
 */
const measureRates = async (
  generator: string,
  servers: ReadonlyArray<Server>,
  scenario: OpenLoopScenario,
  title: string,
  runId: string
) => {
  const replayKey = (server: Server) => `ol-replay-${runId}-${server.name}`
  if (scenario === "replay") {
    for (const server of servers) await storeReplayed(server.url, server.apiKey, replayKey(server), server.name)
  }
  const wrkPrefix = (server: Server, purpose: string) =>
    scenario === "replay" ? replayKey(server) : `ol-${purpose}-${runId}-${server.name}`
  console.log(`\n${title}\nwarm-up: ${warmupSeconds} s of wrk on each server ...`)
  for (const server of servers) await runWrk(server, scenario, warmupSeconds, wrkPrefix(server, "warm"))
  await Bun.sleep(settleMs)
  const problems: Array<string> = []
  const peaks: Record<string, number> = {}
  for (const server of servers) {
    const { result } = await runWrk(server, scenario, durationSeconds, wrkPrefix(server, "peak"))
    problems.push(...answerProblems(`${server.name} (closed-loop peak)`, { ...result, socketErrors: result.errors }))
    peaks[server.name] = result.requests / (result.durationMicros / 1e6)
    await Bun.sleep(settleMs)
  }
  console.log(
    `closed-loop peak (wrk, ${connections} connections, ${durationSeconds} s): ` +
      servers.map((server) => `${server.name} ${number(peaks[server.name]!)} req/s`).join(", ")
  )
  const rates = openLoopRates ?? openLoopFractions.map((fraction) => Math.round(fraction * peaks["baseline"]!))
  const results: Array<RateResult> = []
  for (const [index, rate] of rates.entries()) {
    const runs = new Map<string, Array<OpenLoopRun & { readonly order: number }>>(
      servers.map((server) => [server.name, []])
    )
    let order = 0
    for (let round = 0; round < openLoopRounds; round++) {
      for (const server of round % 2 === 0 ? servers : [...servers].reverse()) {
        const who = `${server.name} at ${number(rate)} req/s, round ${round + 1}`
        const rowsBefore = countActivations(server.databaseFile)
        const keyPrefix = scenario === "replay" ? replayKey(server) : `ol-${runId}-${rate}-${round}-${server.name}`
        const run = await runGenerator(generator, server, scenario, keyPrefix, { rate, seconds: durationSeconds })
        await Bun.sleep(settleMs)
        problems.push(
          ...generatorProblems(who, run.result),
          ...rowProblems(who, scenario, run.result, countActivations(server.databaseFile) - rowsBefore)
        )
        runs.get(server.name)!.push({ ...run, order: order++ })
      }
    }
    const pooled = Object.fromEntries([...runs].map(([name, serverRuns]) => [name, pool(serverRuns)]))
    const service = pooled["service"]
    const baseline = pooled["baseline"]
    results.push({
      rate,
      fraction: openLoopRates === undefined ? openLoopFractions[index] : undefined,
      servers: pooled,
      ratios: service === undefined || baseline === undefined ? undefined : {
        p99: service.latencyMs.p99 / baseline.latencyMs.p99,
        p999: service.latencyMs.p999 / baseline.latencyMs.p999
      }
    })
    console.log(rateTable(results.slice(-1)))
  }
  console.log(
    `\n${title}, open loop, ${openLoopConnections} connections, ${openLoopRounds} × ${durationSeconds} s per server and rate, ` +
      `in turns; the service at LOG_LEVEL=${openLoopLogLevel}`
  )
  console.log(rateTable(results))
  printRateNotes(results)
  for (const problem of problems) console.log(`!!! ERRORS: ${problem}; these figures are not valid`)
  return { scenario, title, closedLoopPeaks: peaks, rates: results, problems }
}

/** The percentiles of one server's runs at each rate, the generator's own lag beside them. */
const rateTable = (results: ReadonlyArray<RateResult>): string =>
  table([
    [
      "rate req/s",
      "server",
      "p50 ms",
      "p99 ms",
      "p99.9 ms",
      "max ms",
      "p99 by run",
      "answered/s",
      "held",
      "gen lag p99/p99.9/max ms",
      "gen busy",
      "other CPU",
      "verdict"
    ],
    ...results.flatMap((result) => [
      ...Object.entries(result.servers).map(([name, { latencyMs, runs, verdict }]) => {
        const worst = (pick: (run: GeneratorResult) => number) => Math.max(...runs.map(pick))
        return [
          `${number(result.rate)}${result.fraction === undefined ? "" : ` (${result.fraction})`}`,
          name,
          number(latencyMs.p50, 2),
          number(latencyMs.p99, 2),
          number(latencyMs.p999, 2),
          number(latencyMs.max, 2),
          [...runs].sort((a, b) => a.order - b.order).map((run) => number(run.latencyMs.p99, 1)).join(" "),
          number(Math.min(...runs.map((run) => run.answeredInWindowPerSecond))),
          number(runs.reduce((n, run) => n + run.held, 0)),
          `${number(worst((run) => run.ownLagMs.p99), 3)} / ${number(worst((run) => run.ownLagMs.p999), 3)} / ${
            number(worst((run) => run.ownLagMs.max), 2)
          }`,
          `${number(worst((run) => run.busyPercent))}%`,
          `${number(Math.max(...runs.map((run) => run.otherCpuPercent)))}%`,
          verdictWord(verdict, Math.max(...runs.map((run) => run.otherCpuPercent)))
        ]
      }),
      ...(result.ratios === undefined ? [] : [[
        "",
        "service/baseline",
        "",
        `${number(result.ratios.p99, 2)}×`,
        `${number(result.ratios.p999, 2)}×`,
        "",
        "",
        "",
        "",
        "",
        "",
        "",
        ""
      ]])
    ])
  ])

/** "ok" or "UNTRUSTED" (the generator was the limit), and what else to know: p99.9 not the server's, over capacity, other load. */
const verdictWord = (verdict: Verdict, otherCpuPercent: number): string =>
  [
    verdict.untrusted.length > 0 ? "UNTRUSTED" : "ok",
    ...(verdict.untrusted.length === 0 && verdict.p999Untrusted.length > 0 ? ["(p99.9 not)"] : []),
    ...(verdict.overCapacity ? ["over capacity"] : []),
    ...(otherCpuPercent > otherCpuWarningPercent ? ["noisy"] : [])
  ].join(" ")

const printRateNotes = (results: ReadonlyArray<RateResult>) => {
  for (const result of results) {
    for (const [name, { runs, verdict }] of Object.entries(result.servers)) {
      for (const reason of verdict.untrusted) {
        console.log(`!   ${name} at ${number(result.rate)} req/s is not the server's latency: ${reason}`)
      }
      for (const reason of verdict.p999Untrusted) {
        console.log(`    ${name} at ${number(result.rate)} req/s, p99.9 not the server's: ${reason}`)
      }
      const held = heldNote(runs)
      if (held !== undefined) console.log(`    ${name} at ${number(result.rate)} req/s: ${held}`)
      if (verdict.overCapacity) {
        const unsent = runs.reduce((n, run) => n + run.unsent, 0)
        const unanswered = runs.reduce((n, run) => n + run.unanswered, 0)
        console.log(
          `    ${name} at ${number(result.rate)} req/s is over its capacity: it answered ` +
            `${
              runs.map((run) => number(run.answeredInWindowPerSecond)).join(", ")
            } req/s within the runs (latency is a queue growing)` +
            (unsent + unanswered > 0
              ? `; ${unsent} requests unsent and ${unanswered} unanswered 10 s after, left out of the percentiles`
              : "")
        )
      }
      const noisy = runs.filter((run) => run.otherCpuPercent > otherCpuWarningPercent)
      if (noisy.length > 0) {
        console.log(
          `!   other processes used ${
            noisy.map((run) => `${number(run.otherCpuPercent)}%`).join(", ")
          } of a core during ` +
            `${name}'s runs at ${number(result.rate)} req/s: noisy`
        )
      }
    }
  }
}

/** A fresh instance's first seconds, then the same instance warm, under the same constant load. */
interface StartRun {
  readonly result: GeneratorResult
  readonly latencyMs: Summary
  readonly perSecondMs: ReadonlyArray<Summary>
  readonly verdict: Verdict
  readonly otherCpuPercent: number
}

const startRunOf = (run: OpenLoopRun): StartRun => {
  const latencyMs = summarize([run.samples])
  return {
    result: run.result,
    latencyMs,
    perSecondMs: perSecond(run.samples, startRate),
    verdict: verdictOf([run.result], latencyMs),
    otherCpuPercent: run.otherCpuPercent
  }
}

/**
 * A new process of `name` on a database of its own that already holds the key and the seeded
 * records (for replay, the stored first activation, by an instance started and stopped before it):
 * the generator polls its `/readyz` and starts `startRate` the moment it answers 200, for
 * `startSeconds`; then the same instance is warmed up (wrk, `warmupSeconds`) and the same load runs
 * again, its `/readyz` answering at once: connecting is in both.
 */
const measureStart = async (
  generator: string,
  serviceCli: ReadonlyArray<string>,
  name: "service" | "baseline",
  scenario: OpenLoopScenario,
  runId: string
) => {
  const databaseFile = join(workDir!, `start-${scenario}-${name}.sqlite`)
  const apiKey = await createKey(serviceCli, databaseFile)
  seedReads(databaseFile)
  const cmd = name === "service" ? [...serviceCli, "serve"] : [bun, "bench/baseline.ts"]
  const env: Record<string, string> = name === "service"
    ? { RATE_LIMIT_MAX: "1000000000", LOG_LEVEL: openLoopLogLevel }
    : {}
  const logFile = name === "service" && openLoopLogLevel === "info"
    ? join(workDir!, `start-${scenario}.log`)
    : undefined
  const replayKey = `start-replay-${runId}`
  if (scenario === "replay") {
    const before = await startServer(name, cmd, env, databaseFile, apiKey)
    await storeReplayed(before.url, apiKey, replayKey, name)
    await stop(before.spawned.process)
  }
  const prefix = (purpose: string) => scenario === "replay" ? replayKey : `start-${purpose}-${runId}-${name}`
  console.log(
    `\na fresh ${name} instance (${scenario}): ${
      number(startRate)
    } req/s from its first /readyz 200, ${startSeconds} s ...`
  )
  const { spawned, url } = spawnServer(cmd, env, databaseFile, logFile)
  const server: Server = { name, spawned, pid: spawned.process.pid, url, apiKey, databaseFile, startupMs: 0 }
  try {
    const rowsBefore = countActivations(databaseFile)
    const fresh = await runGenerator(generator, server, scenario, prefix("fresh"), {
      rate: startRate,
      seconds: startSeconds,
      ready: true
    })
    await Bun.sleep(settleMs)
    const rowsAfterFresh = countActivations(databaseFile)
    console.log(
      `/readyz answered 200 after ${
        number(fresh.result.readyWaitMs, 1)
      } ms; warm-up: ${warmupSeconds} s of wrk, then the same load ...`
    )
    await runWrk(server, scenario, warmupSeconds, prefix("warm"))
    await Bun.sleep(settleMs)
    const rowsBeforeWarm = countActivations(databaseFile)
    const warm = await runGenerator(generator, server, scenario, prefix("warmed"), {
      rate: startRate,
      seconds: startSeconds,
      ready: true
    })
    await Bun.sleep(settleMs)
    const problems = [
      ...generatorProblems(`fresh ${name}`, fresh.result),
      ...rowProblems(`fresh ${name}`, scenario, fresh.result, rowsAfterFresh - rowsBefore),
      ...generatorProblems(`warm ${name}`, warm.result),
      ...rowProblems(`warm ${name}`, scenario, warm.result, countActivations(databaseFile) - rowsBeforeWarm)
    ]
    const result = {
      server: name,
      scenario,
      rate: startRate,
      seconds: startSeconds,
      fresh: startRunOf(fresh),
      warm: startRunOf(warm),
      problems
    }
    printStart(result)
    return result
  } finally {
    await stop(spawned.process)
  }
}

const printStart = (
  start: {
    readonly server: string
    readonly scenario: string
    readonly fresh: StartRun
    readonly warm: StartRun
    readonly problems: ReadonlyArray<string>
  }
) => {
  const cells = (summary: Summary) => [number(summary.p50, 2), number(summary.p99, 2), number(summary.max, 2)]
  console.log(
    `\n${start.server}, ${start.scenario} at ${number(startRate)} req/s: a fresh instance's first ${startSeconds} s ` +
      `(from /readyz's first 200, ${number(start.fresh.result.readyWaitMs, 1)} ms after the generator's first probe) ` +
      `against the same instance warm` + (start.server === "service" ? `, LOG_LEVEL=${openLoopLogLevel}` : "")
  )
  console.log(table([
    ["second", "fresh p50", "p99", "max ms", "warm p50", "p99", "max ms"],
    ...start.fresh.perSecondMs.map((summary, second) => [
      `${second}–${second + 1}`,
      ...cells(summary),
      ...(start.warm.perSecondMs[second] === undefined ? ["", "", ""] : cells(start.warm.perSecondMs[second]!))
    ]),
    ["all", ...cells(start.fresh.latencyMs), ...cells(start.warm.latencyMs)],
    ["p99.9", number(start.fresh.latencyMs.p999, 2), "", "", number(start.warm.latencyMs.p999, 2), "", ""]
  ]))
  console.log(
    `fresh/warm p99: ${number(start.fresh.latencyMs.p99 / start.warm.latencyMs.p99, 2)}×; ` +
      `generator's own lag p99/max: fresh ${number(start.fresh.result.ownLagMs.p99, 3)}/${
        number(start.fresh.result.ownLagMs.max, 2)
      } ms, ` +
      `warm ${number(start.warm.result.ownLagMs.p99, 3)}/${number(start.warm.result.ownLagMs.max, 2)} ms; ` +
      `held for a connection: ${start.fresh.result.held}, ${start.warm.result.held}; ` +
      `other CPU ${number(start.fresh.otherCpuPercent)}%, ${number(start.warm.otherCpuPercent)}%`
  )
  for (const [which, run] of [["fresh", start.fresh], ["warm", start.warm]] as const) {
    for (const reason of run.verdict.untrusted) {
      console.log(`!   the ${which} run is not the server's latency: ${reason}`)
    }
    const held = heldNote([run.result])
    if (held !== undefined) console.log(`    the ${which} run: ${held}`)
    if (run.otherCpuPercent > otherCpuWarningPercent) {
      console.log(`!   other processes used ${number(run.otherCpuPercent)}% of a core during the ${which} run: noisy`)
    }
    if (run.verdict.overCapacity) {
      console.log(
        `    the ${which} run did not hold the rate: ${
          number(run.result.answeredInWindowPerSecond)
        } req/s answered within it, ` +
          `${run.result.unsent} requests unsent and ${run.result.unanswered} unanswered 10 s after (left out of the percentiles)`
      )
    }
  }
  for (const problem of start.problems) console.log(`!!! ERRORS: ${problem}; these figures are not valid`)
}

/** BENCH_OPEN_LOOP=1: the rates of each scenario on the warm servers, then the fresh-instance curves. */
const measureOpenLoop = async (dir: string) => {
  console.log("building the single binary and the generator ...")
  const { binary, sizeBytes } = await buildBinary(dir)
  const generator = buildGenerator(dir)
  const serviceCli = [binary]
  const runId = Date.now().toString(36)
  const servers: Array<Server> = []
  const rates: Array<Awaited<ReturnType<typeof measureRates>>> = []
  const starts: Array<Awaited<ReturnType<typeof measureStart>>> = []
  try {
    if (scenarios.length > 0) {
      for (const name of openLoopServers) {
        const databaseFile = join(dir, `${name}.sqlite`)
        const apiKey = await createKey(serviceCli, databaseFile)
        seedReads(databaseFile)
        servers.push(
          name === "service"
            ? await startServer(
              "service",
              [...serviceCli, "serve"],
              { RATE_LIMIT_MAX: "1000000000", LOG_LEVEL: openLoopLogLevel },
              databaseFile,
              apiKey,
              openLoopLogLevel === "info" ? join(dir, "service.log") : undefined
            )
            : await startServer("baseline", [bun, "bench/baseline.ts"], {}, databaseFile, apiKey)
        )
      }
      for (const scenario of scenarios) {
        rates.push(
          await measureRates(
            generator,
            servers,
            scenario.name as OpenLoopScenario,
            scenario.title,
            `${runId}-${scenario.name}`
          )
        )
      }
    }
  } finally {
    for (const server of servers) await stop(server.spawned.process)
  }
  for (const scenario of startScenarios) {
    for (const name of openLoopServers) {
      starts.push(
        await measureStart(generator, serviceCli, name as "service" | "baseline", scenario as OpenLoopScenario, runId)
      )
    }
  }
  return { binarySizeBytes: sizeBytes, rates, starts, problems: [...rates, ...starts].flatMap((r) => r.problems) }
}

// ---------------------------------------------------------------------------------------------
// The compiled binary

const median = (values: ReadonlyArray<number>): number => {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2
}

interface BinaryResult {
  readonly sizeBytes: number
  readonly buildSeconds: number
  readonly startToFirst200Ms: ReadonlyArray<number>
  readonly medianStartToFirst200Ms: number
  /** A bare compiled `Bun.serve` (bench/bare-serve.ts), started in turns with the service. */
  readonly bareStartToFirst200Ms: ReadonlyArray<number>
  readonly medianBareStartToFirst200Ms: number
}

/** `bun build --compile` of the service into `dir`, as it is deployed; its path. */
const buildBinary = async (dir: string) => {
  const binary = join(dir, "campaign-api")
  const buildStarted = performance.now()
  await runCommand([bun, "build", "src/main.ts", "--compile", "--bytecode", "--outfile", binary], {
    timeoutMs: 180_000
  })
  return { binary, buildSeconds: (performance.now() - buildStarted) / 1000, sizeBytes: statSync(binary).size }
}

const measureBinary = async (dir: string): Promise<BinaryResult> => {
  const { binary, buildSeconds, sizeBytes } = await buildBinary(dir)
  const databaseFile = join(dir, "binary.sqlite")
  const apiKey = await createKey([binary], databaseFile)

  const bare = join(dir, "bare-serve")
  await runCommand([bun, "build", "bench/bare-serve.ts", "--compile", "--bytecode", "--outfile", bare], {
    timeoutMs: 180_000
  })

  const startToFirst200 = async (cmd: ReadonlyArray<string>) => {
    const port = freePort()
    const startedAt = performance.now()
    const spawned = spawn(cmd, {
      env: {
        PORT: String(port),
        HOST: "127.0.0.1",
        DATABASE_URL: databaseFile,
        LOG_LEVEL: serviceLogLevel,
        SHUTDOWN_DELAY_SECONDS: "0"
      },
      timeoutMs: 60_000
    })
    try {
      return await waitForWhoami(spawned, `http://127.0.0.1:${port}`, apiKey, {
        startedAt,
        intervalMs: 2,
        timeoutMs: 30_000
      })
    } finally {
      await stop(spawned.process)
    }
  }
  // In turns, so that the VM's slower minutes hit both alike.
  const times: Array<number> = []
  const bareTimes: Array<number> = []
  for (let run = 0; run < startupRuns; run++) {
    times.push(await startToFirst200([binary, "serve"]))
    bareTimes.push(await startToFirst200([bare]))
  }
  return {
    sizeBytes,
    buildSeconds,
    startToFirst200Ms: times,
    medianStartToFirst200Ms: median(times),
    bareStartToFirst200Ms: bareTimes,
    medianBareStartToFirst200Ms: median(bareTimes)
  }
}

// ---------------------------------------------------------------------------------------------
// Output

const table = (rows: ReadonlyArray<ReadonlyArray<string>>): string => {
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => row[column]!.length)))
  return rows
    .map((row) =>
      row.map((cell, column) => column === 0 ? cell.padEnd(widths[column]!) : cell.padStart(widths[column]!)).join("  ")
    )
    .join("\n")
}

const number = (value: number, digits = 0) =>
  value.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits })

const scenarioTable = (measurements: ReadonlyArray<Measurement>): string =>
  table([
    [
      "server",
      "req/s",
      "p50 ms",
      "p99 ms",
      "peak RSS MB",
      "non-2xx",
      "sock err",
      "server CPU",
      "wrk CPU",
      "other CPU",
      "new rows"
    ],
    ...measurements.map((m) => [
      m.server,
      number(m.requestsPerSecond),
      number(m.latencyMs.p50, 2),
      number(m.latencyMs.p99, 2),
      number(m.peakRssMb, 1),
      number(m.non2xx),
      number(m.socketErrors.connect + m.socketErrors.read + m.socketErrors.write + m.socketErrors.timeout),
      `${number(m.serverCpuPercent)}%`,
      `${number(m.wrkCpuPercent)}%`,
      `${number(m.otherCpuPercent)}%`,
      number(m.activationRowsWritten)
    ])
  ])

const firstLine = (cmd: ReadonlyArray<string>): string => {
  const result = Bun.spawnSync([...cmd], { cwd: root })
  return `${result.stdout}${result.stderr}`.trim().split("\n")[0] ?? ""
}

const machine = () => ({
  cpuModel: cpus()[0]?.model ?? "unknown",
  cores: cpus().length,
  memoryMb: Math.round(Number(/^MemTotal:\s+(\d+)/m.exec(readFileSync("/proc/meminfo", "utf8"))?.[1] ?? 0) / 1024),
  kernel: release(),
  bun: Bun.version,
  wrk: firstLine(["wrk", "-v"]),
  commit: firstLine(["git", "rev-parse", "--short", "HEAD"]),
  worktreeDirty: firstLine(["git", "status", "--porcelain"]) !== ""
})

// ---------------------------------------------------------------------------------------------

const preflight = () => {
  for (const tool of ["wrk", "taskset", "setpriv", ...(openLoop ? ["gcc"] : [])]) {
    if (Bun.which(tool) === null) {
      fail(
        tool === "wrk"
          ? "wrk is not installed; install it with: apt-get update && apt-get install -y wrk"
          : `${tool} is not installed (it comes with util-linux / coreutils)`
      )
    }
  }
  if (cpus().length < 2) {
    fail(`needs 2 CPUs (server on CPU ${serverCpu}, wrk on CPU ${loadCpu}); this machine has ${cpus().length}`)
  }
}

/** CPU the machine uses while this benchmark does nothing (100 = one core). */
const idleMachineLoadPercent = async (): Promise<number> => {
  const before = machineBusySeconds() - ownCpuSeconds()
  await Bun.sleep(2000)
  return Math.max(0, ((machineBusySeconds() - ownCpuSeconds() - before) / 2) * 100)
}

const main = async () => {
  preflight()
  // The code measured: read before the run, so edits made while it runs do not change what it records.
  const machineAtStart = machine()
  const loadBeforeStart = await idleMachineLoadPercent()
  console.log(
    `machine load before starting: ${number(loadBeforeStart)}% of a core` +
      (loadBeforeStart > otherCpuWarningPercent ? " (other processes are busy: the figures will be noisy)" : "")
  )
  const dir = mkdtempSync(join(tmpdir(), "campaign-api-bench-"))
  workDir = dir
  const servers: Array<Server> = []
  try {
    console.log(
      openLoop
        ? `bench, open loop: ${openLoopRounds} × ${durationSeconds} s per server and rate after a ${warmupSeconds} s warm-up, ` +
          `${openLoopConnections} connections, servers on CPU ${serverCpu}, the generator and wrk on CPU ${loadCpu}; work directory ${dir}`
        : `bench: ${durationSeconds} s per run after a ${warmupSeconds} s warm-up, ${connections} connections, ` +
          `servers on CPU ${serverCpu}, wrk on CPU ${loadCpu}; work directory ${dir}`
    )

    if (openLoop) {
      const measured = await measureOpenLoop(dir)
      writeResults("openloop", {
        machine: { ...machineAtStart, loadBeforeStartPercent: loadBeforeStart },
        settings: {
          durationSeconds,
          warmupSeconds,
          wrkConnections: connections,
          serverCpu,
          loadCpu,
          logLevel: openLoopLogLevel,
          connections: openLoopConnections,
          rounds: openLoopRounds,
          fractions: openLoopRates === undefined ? openLoopFractions : null,
          rates: openLoopRates ?? null,
          servers: openLoopServers,
          startScenarios,
          startRate,
          startSeconds
        },
        ...measured
      })
      if (measured.problems.length > 0) {
        console.log(
          `\n!!! ${measured.problems.length} PROBLEM(S): some figures above are not valid:\n` +
            measured.problems.map((p) => `  - ${p}`).join("\n")
        )
        process.exitCode = 1
      }
      return
    }
    console.log("building the single binary...")
    const binary = await measureBinary(dir)
    console.log(
      `binary: ${number(binary.sizeBytes / 1024 / 1024, 1)} MB, start to first 200 from whoami: ` +
        `median ${number(binary.medianStartToFirst200Ms, 1)} ms of ${
          binary.startToFirst200Ms.map((t) => t.toFixed(1)).join(", ")
        }; ` +
        `bare compiled Bun.serve median ${number(binary.medianBareStartToFirst200Ms, 1)} ms of ` +
        `${binary.bareStartToFirst200Ms.map((t) => t.toFixed(1)).join(", ")} ` +
        `(${number(binary.medianStartToFirst200Ms / binary.medianBareStartToFirst200Ms, 1)}×)`
    )
    if (startupOnly) return
    if (metricsOnly) {
      const metrics = await measureMetrics(join(dir, "campaign-api"), dir)
      writeResults("metrics", {
        machine: { ...machineAtStart, loadBeforeStartPercent: loadBeforeStart },
        settings: {
          warmupSeconds,
          connections,
          wrkThreads,
          serverCpu,
          loadCpu,
          serviceLogLevel,
          runs: accessLogRuns,
          runSeconds: accessLogSeconds
        },
        metrics
      })
      if (metrics.results.some((r) => r.problems.length > 0)) process.exitCode = 1
      return
    }

    const serviceDb = join(dir, "service.sqlite")
    const serviceInfoDb = join(dir, "service-info.sqlite")
    const baselineDb = join(dir, "baseline.sqlite")
    // The service runs as it is deployed: the single binary built above, the server and the key
    // command line in one (bundled, so it loads only the modules it uses).
    const serviceCli = [join(dir, "campaign-api")]
    const serviceKey = await createKey(serviceCli, serviceDb)
    const serviceInfoKey = await createKey(serviceCli, serviceInfoDb)
    const baselineKey = await createKey(serviceCli, baselineDb)
    for (const database of [serviceDb, serviceInfoDb, baselineDb]) seed(database)
    console.log(
      `seeded ${seededActivations} activations of the bench's brand into each database for the reads` +
        (runsPages ? `, and ${pagedActivations} of one campaign for the pages` : "")
    )
    servers.push(
      await startServer(
        "service",
        [...serviceCli, "serve"],
        {
          RATE_LIMIT_MAX: "1000000000",
          LOG_LEVEL: serviceLogLevel
        },
        serviceDb,
        serviceKey
      )
    )
    // As users run it: the default LOG_LEVEL, one access-log line per request, to a file.
    servers.push(
      await startServer(
        "service-info",
        [...serviceCli, "serve"],
        {
          RATE_LIMIT_MAX: "1000000000",
          LOG_LEVEL: "info"
        },
        serviceInfoDb,
        serviceInfoKey,
        join(dir, "service-info.log")
      )
    )
    servers.push(await startServer("baseline", [bun, "bench/baseline.ts"], {}, baselineDb, baselineKey))

    const results: Array<{
      readonly scenario: ScenarioName
      readonly title: string
      readonly service: Measurement
      readonly serviceInfo: Measurement
      readonly baseline: Measurement
      readonly ratioRequestsPerSecond: number
      /** The service at LOG_LEVEL=info over the same at warn (short runs side by side): what the access log costs. */
      readonly accessLog: AccessLogCost
      readonly problems: ReadonlyArray<string>
    }> = []
    /** The page scenarios, on the service alone: each combination's latency at one campaign's size, not a ratio. */
    const pages: Array<
      {
        readonly scenario: PageScenario
        readonly path: string
        readonly service: Measurement
        readonly problems: ReadonlyArray<string>
      }
    > = []
    const runId = Date.now().toString(36)
    for (const scenario of scenarios) {
      if (isPage(scenario.name)) {
        console.log(`\nrunning ${scenario.title} on the service ...`)
        const service = await measure(servers[0]!, scenario.name, `${runId}-${scenario.name}-service`)
        const problems = problemsOf(scenario.name, service)
        pages.push({ scenario: scenario.name, path: pagePaths[scenario.name], service, problems })
        console.log(scenarioTable([service]))
        for (const problem of problems) console.log(`!!! ERRORS: ${problem}; these figures are not valid`)
        if (service.otherCpuPercent > otherCpuWarningPercent) {
          console.log(
            `!   other processes used ${
              number(service.otherCpuPercent)
            }% of a core during the run: its figures are noisy`
          )
        }
        continue
      }
      console.log(`\nrunning ${scenario.title} ...`)
      const service = await measure(servers[0]!, scenario.name, `${runId}-${scenario.name}-service`)
      const serviceInfo = await measure(servers[1]!, scenario.name, `${runId}-${scenario.name}-service-info`)
      const baseline = await measure(servers[2]!, scenario.name, `${runId}-${scenario.name}-baseline`)
      console.log(
        `the access log: ${accessLogRuns} runs of the warn and info servers side by side, ${accessLogSeconds} s each, ` +
          `after one uncounted ...`
      )
      const accessLog = await measureAccessLog(servers[0]!, servers[1]!, scenario.name, `${runId}-${scenario.name}`)
      const ratio = service.requestsPerSecond / baseline.requestsPerSecond
      const problems = [
        ...[service, serviceInfo, baseline].flatMap((m) => problemsOf(scenario.name, m)),
        ...accessLog.problems
      ]
      results.push({
        scenario: scenario.name,
        title: scenario.title,
        service,
        serviceInfo,
        baseline,
        ratioRequestsPerSecond: ratio,
        accessLog,
        problems
      })
      console.log(`\n${scenario.title}, ${connections} connections, ${durationSeconds} s`)
      console.log(scenarioTable([service, serviceInfo, baseline]))
      console.log(
        `service/baseline req/s: ${number(ratio, 3)} (LOG_LEVEL=${serviceLogLevel}); service-info/baseline ` +
          `${
            number(serviceInfo.requestsPerSecond / baseline.requestsPerSecond, 3)
          } (runs minutes apart: the access log's cost is the next line)`
      )
      console.log(
        `the access log costs ${number((1 - accessLog.ratio) * 100, 1)}% of the throughput ` +
          `(mean of ${accessLogRuns} side-by-side runs, info over warn: ${
            accessLog.ratios.map((r) => number(r, 3)).join(", ")
          })`
      )
      for (const problem of problems) console.log(`!!! ERRORS: ${problem}; these figures are not valid`)
      for (const m of [service, serviceInfo, baseline]) {
        if (m.otherCpuPercent > otherCpuWarningPercent) {
          console.log(
            `!   other processes used ${
              number(m.otherCpuPercent)
            }% of a core during the ${m.server} run: its figures are noisy`
          )
        }
      }
    }

    if (pages.length > 0) {
      console.log(
        `\npages of 20 among ${
          number(pagedActivations)
        } activations of one campaign, the service at LOG_LEVEL=${serviceLogLevel}, ` +
          `${connections} connections, ${durationSeconds} s each`
      )
      console.log(table([
        ["scenario", "req/s", "p50 ms", "p99 ms", "max ms", "non-2xx", "other CPU"],
        ...pages.map(({ scenario, service: m }) => [
          scenario,
          number(m.requestsPerSecond),
          number(m.latencyMs.p50, 2),
          number(m.latencyMs.p99, 2),
          number(m.latencyMs.max, 2),
          number(m.non2xx),
          `${number(m.otherCpuPercent)}%`
        ])
      ]))
      for (const { path, scenario } of pages) console.log(`  ${scenario}: GET ${path}`)
    }

    // The reads against whoami in the same run: one indexed lookup more, or a page of 20 (bench/README.md).
    const whoamiResult = results.find((r) => r.scenario === "whoami")
    for (const read of results.filter((r) => r.scenario === "get" || r.scenario === "list")) {
      if (whoamiResult === undefined) break
      console.log(
        `${read.scenario}/whoami req/s: service ${
          number(read.service.requestsPerSecond / whoamiResult.service.requestsPerSecond, 3)
        }, ` +
          `baseline ${number(read.baseline.requestsPerSecond / whoamiResult.baseline.requestsPerSecond, 3)}`
      )
    }

    const lifetimePeakRssMb = Object.fromEntries(servers.map((s) => [s.name, statusKb(s.pid, "VmHWM") / 1024]))
    for (const server of servers) await stop(server.spawned.process)
    await Promise.all(servers.flatMap((s) => [s.spawned.stdout.done, s.spawned.stderr.done]))
    const serverLogs = Object.fromEntries(servers.map((s) => [s.name, `${s.spawned.stdout}${s.spawned.stderr}`.trim()]))

    console.log(
      `\nbinary: ${number(binary.sizeBytes / 1024 / 1024, 1)} MB (${binary.sizeBytes} bytes), ` +
        `start to first 200 from whoami: median ${
          number(binary.medianStartToFirst200Ms, 1)
        } ms of ${startupRuns} runs; ` +
        `a bare compiled Bun.serve in turns with it: ${number(binary.medianBareStartToFirst200Ms, 1)} ms ` +
        `(${number(binary.medianStartToFirst200Ms / binary.medianBareStartToFirst200Ms, 1)}×)`
    )
    console.log(
      `peak RSS over the whole run (VmHWM): ` +
        servers.map((s) => `${s.name} ${number(lifetimePeakRssMb[s.name]!, 1)} MB`).join(", ")
    )
    if (serverLogs["service"] !== "") {
      console.log(
        `\nthe service logged (LOG_LEVEL=${serviceLogLevel}), last lines:\n` +
          serverLogs["service"]!.split("\n").slice(-10).join("\n")
      )
    }

    writeResults(undefined, {
      machine: { ...machineAtStart, loadBeforeStartPercent: loadBeforeStart },
      settings: {
        durationSeconds,
        warmupSeconds,
        connections,
        wrkThreads,
        serverCpu,
        loadCpu,
        serviceLogLevel,
        accessLogRuns,
        accessLogSeconds
      },
      binary,
      startupMs: Object.fromEntries(servers.map((s) => [s.name, s.startupMs])),
      lifetimePeakRssMb,
      scenarios: results,
      pages,
      serverLogs
    })

    const problems = [...results, ...pages].flatMap((r) => r.problems.map((p) => `${r.scenario}: ${p}`))
    if (problems.length > 0) {
      console.log(
        `\n!!! ${problems.length} PROBLEM(S): some figures above are not valid:\n${
          problems.map((p) => `  - ${p}`).join("\n")
        }`
      )
      process.exitCode = 1
    }
  } finally {
    killAll()
    await Promise.all(servers.map((s) => s.spawned.process.exited))
    cleanUp()
  }
}

await main().catch((error: unknown) => {
  console.error(`bench failed: ${error instanceof Error ? error.message : String(error)}`)
  process.exitCode = 1
})
process.exit()
