/**
 * What a run of `bench/run.ts` was asked for: every BENCH_* variable, read and checked once at
 * start (a bad one stops the run with exit code 2 before anything is spawned), and the constants
 * every scenario shares (the cores, the connections, the pauses).
 */
import { join } from "node:path"
import { pagedActivations, pagePaths, type PageScenario, readPaths } from "../common.ts"
import { type OpenLoopScenario, openLoopScenarios } from "../openloop.ts"

export const root = join(import.meta.dir, "..", "..")
export const bun = process.execPath

export const fail = (message: string): never => {
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

export const durationSeconds = envSeconds("BENCH_DURATION", 10)
/**
 * JavaScriptCore keeps compiling the service's hot paths for many seconds under load (`perf`
 * showed its JIT thread taking a fifth of the server's core 4 s in, next to nothing after 18 s),
 * so a short warm-up measures the compiler as much as the service.
 */
export const warmupSeconds = envSeconds("BENCH_WARMUP", 15)
export const connections = 50
export const serverCpu = "1"
export const loadCpu = "0"
export const startupRuns = 9
/** Pause after each wrk run so the requests still queued in the server finish. */
export const settleMs = 1000
/** Other processes using more CPU than this (100 = one core) during a measured run make it noisy. */
export const otherCpuWarningPercent = 10
/**
 * The service's LOG_LEVEL in the measured runs (`BENCH_LOG_LEVEL`, warn or info): the access log's
 * own runs set both; a side-by-side run of two builds (`BENCH_METRICS_AGAINST`) compares them at this one.
 */
export const serviceLogLevel = process.env["BENCH_LOG_LEVEL"]?.trim() || "warn"
if (serviceLogLevel !== "warn" && serviceLogLevel !== "info") {
  console.error(`BENCH_LOG_LEVEL must be warn or info, got "${serviceLogLevel}"`)
  process.exit(2)
}

export type ScenarioName = "whoami" | "fresh" | "replay" | "mix" | "get" | "list" | PageScenario

export interface Scenario {
  readonly name: ScenarioName
  readonly title: string
}

export const isPage = (scenario: ScenarioName): scenario is PageScenario => scenario in pagePaths

/** The page scenarios: run only when named (`pages` names them all), on the service alone. */
const pageScenarios: ReadonlyArray<Scenario> = (Object.keys(pagePaths) as Array<PageScenario>).map((name) => ({
  name,
  title: `(g) a page of 20 among ${pagedActivations.toLocaleString("en-US")} activations of one campaign: GET ${
    pagePaths[name]
  }`
}))

const allScenarios: ReadonlyArray<Scenario> = [
  { name: "whoami", title: "(a) whoami: GET /v1/whoami" },
  { name: "fresh", title: "(b) activate, a fresh Idempotency-Key per request" },
  { name: "replay", title: "(c) activate replays: the same key and body every request" },
  { name: "mix", title: "(d) mix: 90% whoami, 10% activate with a fresh key" },
  { name: "get", title: `(e) get an activation by id (GET ${readPaths.get.replace(/[^/]+$/, "{id}")})` },
  { name: "list", title: "(f) a page of 20 activations of one campaign (GET /v1/activations?limit=20&campaignId=…)" }
]

/** BENCH_STARTUP_ONLY=1 measures the binary's start-up against the bare server's, and stops there. */
export const startupOnly = process.env["BENCH_STARTUP_ONLY"] === "1"

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
export const openLoop = process.env["BENCH_OPEN_LOOP"] === "1"
/** The rates, as shares of the baseline's closed-loop peak in the same run; BENCH_OPEN_LOOP_RATES gives them in req/s instead. */
export const openLoopFractions = envNumbers(
  "BENCH_OPEN_LOOP_FRACTIONS",
  "0.25,0.5,0.75",
  (f) => f > 0 && f <= 2,
  "shares of the peak (0.5)"
)
export const openLoopRates = process.env["BENCH_OPEN_LOOP_RATES"]?.trim()
  ? envNumbers("BENCH_OPEN_LOOP_RATES", "", (r) => Number.isInteger(r) && r > 0, "whole requests per second")
  : undefined
export const openLoopRounds = envWhole("BENCH_OPEN_LOOP_ROUNDS", 2, "rounds")
export const openLoopConnections = envWhole("BENCH_OPEN_LOOP_CONNECTIONS", 256, "connections")
/** As users run it by default: one access-log line per request, to a file. */
export const openLoopLogLevel = process.env["BENCH_OPEN_LOOP_LOG_LEVEL"]?.trim() || "info"
if (!["info", "warn"].includes(openLoopLogLevel)) {
  fail(`BENCH_OPEN_LOOP_LOG_LEVEL must be info or warn, got "${openLoopLogLevel}"`)
}
/** Which servers run at each rate (the calibration of the generator runs the baseline alone). */
export const openLoopServers = envList("BENCH_OPEN_LOOP_SERVERS", "service,baseline") as Array<"service" | "baseline">
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
export const startScenarios = envList("BENCH_START_SCENARIOS", "whoami,get").filter((name) => name !== "none") as Array<
  OpenLoopScenario
>
for (const name of startScenarios) {
  if (!openLoopScenarios.includes(name)) {
    fail(`BENCH_START_SCENARIOS: "${name}" is not one of ${openLoopScenarios.join(", ")}`)
  }
}
export const startRate = envWhole("BENCH_START_RATE", 5000, "requests per second")
export const startSeconds = envSeconds("BENCH_START_SECONDS", 10)

/** BENCH_SCENARIOS=whoami,fresh runs only those (all but the pages by default; `pages` is every page scenario). */
export const scenarios: ReadonlyArray<Scenario> = (() => {
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

export const runsPages = scenarios.some((scenario) => isPage(scenario.name))

/**
 * The access log's cost (LOG_LEVEL=info over warn) is measured apart, in short runs of the two
 * servers side by side: bench/README.md says how and why.
 */
export const accessLogRuns = envWhole("BENCH_LOG_RUNS", 4, "runs")
if (accessLogRuns % 2 === 1) {
  fail(`BENCH_LOG_RUNS must be even (each server's wrk starts first equally often), got ${accessLogRuns}`)
}
export const accessLogSeconds = envSeconds("BENCH_LOG_SECONDS", 5)

/**
 * BENCH_METRICS_ONLY=1: only what metrics cost, the service with METRICS_PORT set against the same
 * binary without it, side by side as the access log is measured (`BENCH_LOG_RUNS` runs of
 * `BENCH_LOG_SECONDS` per scenario, after a side-by-side warm-up of BENCH_WARMUP). With
 * BENCH_METRICS_AGAINST=<a binary>, that binary against this build with metrics off: what "off" costs.
 */
export const metricsOnly = process.env["BENCH_METRICS_ONLY"] === "1"
export const metricsAgainst = process.env["BENCH_METRICS_AGAINST"]?.trim() || undefined

/** The longest an open-loop run may take: its seconds, the generator's drain, a server's start. */
export const openLoopRunBudgetSeconds = (seconds: number) => seconds + 10 + 60 + 20

/** Everything stops by itself after this, whatever happens. */
export const budgetMs = (openLoop
  ? 300 + scenarios.length * (2 * (warmupSeconds + 40) + 2 * (durationSeconds + 40) +
        (openLoopRates ?? openLoopFractions).length * openLoopRounds * 2 * openLoopRunBudgetSeconds(durationSeconds)) +
    startScenarios.length * 2 * (warmupSeconds + 120 + 2 * openLoopRunBudgetSeconds(startSeconds))
  : 300 +
    scenarios.length * (3 * (warmupSeconds + durationSeconds + 40) + (accessLogRuns + 1) * (accessLogSeconds + 20))) *
  1000
