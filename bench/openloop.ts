/**
 * The open-loop generator's side in TypeScript (`bench/openloop.c` does the sending; `bench/run.ts`
 * runs it with BENCH_OPEN_LOOP=1): the raw requests it sends, its result, the latency of several
 * runs pooled and cut by second, and whether a run can be trusted. bench/README.md says how the
 * mode runs and why; bench/BENCHMARKS.md what rate the generator holds on one core.
 */
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { activateBody, activatePath, readPaths, resultLineOf } from "./common.ts"

const source = join(import.meta.dir, "openloop.c")

/** Compiles the generator into `dir`; its path. */
export const buildGenerator = (dir: string): string => {
  const binary = join(dir, "openloop")
  const built = Bun.spawnSync(["gcc", "-O2", "-Wall", "-o", binary, source, "-lm"])
  if (built.exitCode !== 0) throw new Error(`gcc could not build ${source}:\n${built.stderr}`)
  return binary
}

export type OpenLoopScenario = "whoami" | "get" | "replay" | "fresh"
export const openLoopScenarios: ReadonlyArray<OpenLoopScenario> = ["whoami", "get", "replay", "fresh"]

/** The generator's placeholder for a request's number (`openloop.c`). */
const seqMarker = "{{seq}}"

/**
 * The raw HTTP/1.1 request of a scenario, as wrk's `scenario.lua` makes it; `fresh` carries a new
 * Idempotency-Key per request (`keyPrefix` and the request's number), `replay` always `keyPrefix`.
 */
export const rawRequest = (url: string, scenario: OpenLoopScenario, apiKey: string, keyPrefix: string): string => {
  const host = new URL(url).host
  const head = (method: string, path: string, headers: ReadonlyArray<string>) =>
    [`${method} ${path} HTTP/1.1`, `Host: ${host}`, `Authorization: Bearer ${apiKey}`, ...headers, "", ""].join("\r\n")
  const activate = (idempotencyKey: string) =>
    head("POST", activatePath, [
      "Content-Type: application/json",
      `Idempotency-Key: ${idempotencyKey}`,
      `Content-Length: ${Buffer.byteLength(activateBody)}`
    ]) + activateBody
  switch (scenario) {
    case "whoami":
      return head("GET", "/v1/whoami", [])
    case "get":
      return head("GET", readPaths.get, [])
    case "replay":
      return activate(keyPrefix)
    case "fresh":
      return activate(`${keyPrefix}-${seqMarker}`)
  }
}

/** The readiness probe a balancer would send. */
export const readinessRequest = (url: string): string => `GET /readyz HTTP/1.1\r\nHost: ${new URL(url).host}\r\n\r\n`

export interface Summary {
  readonly count: number
  readonly mean: number
  readonly p50: number
  readonly p90: number
  readonly p99: number
  readonly p999: number
  readonly max: number
}

/** What `openloop.c` prints on its "OPENLOOP_RESULT {json}" line. */
export interface GeneratorResult {
  readonly rate: number
  readonly seconds: number
  readonly connections: number
  readonly planned: number
  readonly sent: number
  readonly answered: number
  readonly unsent: number
  readonly unanswered: number
  readonly non2xx: number
  readonly statuses: Record<string, number>
  readonly errors: {
    readonly connect: number
    readonly read: number
    readonly write: number
    readonly closed: number
    readonly malformed: number
  }
  readonly sentInWindowPerSecond: number
  readonly answeredInWindowPerSecond: number
  readonly held: number
  readonly heldMaxMs: number
  readonly readyWaitMs: number
  readonly allConnectedMs: number
  readonly elapsedSeconds: number
  readonly cpuSeconds: number
  readonly cpuPercent: number
  readonly busyPercent: number
  readonly latencyMs: Summary
  readonly ownLagMs: Summary
  readonly sendLagMs: Summary
}

/** The result line of the generator's output, or undefined when there is none. */
export const generatorResultOf = (stdout: string): GeneratorResult | undefined =>
  resultLineOf<GeneratorResult>(stdout, "OPENLOOP_RESULT")

export const generatorArgs = (
  generator: string,
  url: string,
  options: {
    readonly rate: number
    readonly seconds: number
    readonly connections: number
    /** Several: request n is the (n mod k)-th file's, a mix in turns on the one schedule. */
    readonly requestFile: string | ReadonlyArray<string>
    readonly samplesFile: string
    readonly readyFile?: string
  }
): Array<string> => [
  generator,
  "--host",
  new URL(url).hostname,
  "--port",
  new URL(url).port,
  "--rate",
  String(options.rate),
  "--seconds",
  String(options.seconds),
  "--connections",
  String(options.connections),
  ...(typeof options.requestFile === "string" ? [options.requestFile] : options.requestFile).flatMap((
    file
  ) => ["--request", file]),
  "--samples",
  options.samplesFile,
  ...(options.readyFile === undefined ? [] : ["--ready", options.readyFile])
]

/** Each request's latency in ms by request number, NaN where it got no answer (`--samples`). */
export const readSamples = (file: string): Float64Array => {
  const bytes = readFileSync(file)
  return new Float64Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 8).map((us) => us / 1000)
}

/** Nearest-rank percentiles of the answered requests of all `runs` together. */
export const summarize = (runs: ReadonlyArray<Float64Array>): Summary => {
  const answered = new Float64Array(runs.reduce((n, run) => n + run.length, 0))
  let count = 0
  for (const run of runs) {
    for (const ms of run) if (!Number.isNaN(ms)) answered[count++] = ms
  }
  const sorted = answered.subarray(0, count).sort()
  const at = (p: number) => count === 0 ? 0 : sorted[Math.max(1, Math.ceil(p * count)) - 1]!
  return {
    count,
    mean: count === 0 ? 0 : sorted.reduce((sum, ms) => sum + ms, 0) / count,
    p50: at(0.5),
    p90: at(0.9),
    p99: at(0.99),
    p999: at(0.999),
    max: count === 0 ? 0 : sorted[count - 1]!
  }
}

/** One run's latency cut into seconds by due time (request n is due at n / rate). */
export const perSecond = (samples: Float64Array, rate: number): Array<Summary> => {
  const seconds = Math.ceil(samples.length / rate)
  return Array.from(
    { length: seconds },
    (_, second) =>
      summarize([
        samples.subarray(Math.round(second * rate), Math.min(samples.length, Math.round((second + 1) * rate)))
      ])
  )
}

/**
 * The share of a latency percentile the generator's own lag at that percentile may be before the
 * figure says more about the generator than about the server.
 */
export const ownLagShare = 0.1

/** Below this share of the rate answered within the run's seconds, the server could not hold it. */
const capacityShare = 0.99

export interface Verdict {
  /**
   * The server answered less than the rate within the run, or left requests unsent or unanswered
   * when the generator stopped (their latency left out): its latency is a queue growing, not a level.
   */
  readonly overCapacity: boolean
  /** Reasons the run's p99 is not the server's: the generator was the limit. Empty when trusted. */
  readonly untrusted: ReadonlyArray<string>
  /** Why p99.9 is not the server's: the generator's own lag there is comparable. Empty when it is. */
  readonly p999Untrusted: ReadonlyArray<string>
}

/**
 * Whether a server's runs at one rate (their latency pooled in `latency`) measure the server: the
 * generator's own lag (the worst run's) small beside the percentile. Requests held for a connection
 * do not make a run untrusted (their latency runs from their due time like any other's); they are
 * reported beside it (`heldNote`).
 */
export const verdictOf = (runs: ReadonlyArray<GeneratorResult>, latency: Summary): Verdict => {
  const worst = (pick: (run: GeneratorResult) => number) => Math.max(...runs.map(pick))
  const overCapacity = runs.some((run) =>
    run.answeredInWindowPerSecond < capacityShare * run.rate || run.unsent > 0 || run.unanswered > 0
  )
  const untrusted: Array<string> = []
  const ownP99 = worst((run) => run.ownLagMs.p99)
  if (ownP99 > ownLagShare * latency.p99) {
    untrusted.push(
      `the generator's own lag p99 ${ownP99.toFixed(3)} ms is over ${ownLagShare * 100}% of the p99 ${
        latency.p99.toFixed(3)
      } ms`
    )
  }
  const p999Untrusted: Array<string> = []
  const ownP999 = worst((run) => run.ownLagMs.p999)
  if (ownP999 > ownLagShare * latency.p999) {
    p999Untrusted.push(
      `the generator's own lag p99.9 ${ownP999.toFixed(3)} ms is over ${ownLagShare * 100}% of the p99.9 ${
        latency.p999.toFixed(3)
      } ms`
    )
  }
  return { overCapacity, untrusted, p999Untrusted }
}

/**
 * What requests held for a connection mean, in words; undefined when none were. All the connections
 * were waiting on the server: it had that many requests outstanding, so it had stalled for that many
 * requests' worth of the rate at least, or could not hold the rate.
 */
export const heldNote = (runs: ReadonlyArray<GeneratorResult>): string | undefined => {
  const held = runs.reduce((n, run) => n + run.held, 0)
  if (held === 0) return undefined
  const { connections, rate } = runs[0]!
  return `${held} requests found all ${connections} connections waiting on the server (${connections} outstanding: a stall of ` +
    `${(connections / rate * 1000).toFixed(1)} ms or more at this rate), and waited up to ${
      Math.max(...runs.map((run) => run.heldMaxMs)).toFixed(1)
    } ms ` +
    `for one; their latency runs from their due time, but the server did not have them when due (BENCH_OPEN_LOOP_CONNECTIONS)`
}

/** A run's non-2xx answers and socket errors, in words; empty when none. */
export const generatorProblems = (who: string, run: GeneratorResult): Array<string> => {
  const problems: Array<string> = []
  if (run.non2xx > 0) {
    const statuses = Object.entries(run.statuses).map(([status, count]) => `${status}: ${count}`).join(", ")
    problems.push(`${who} answered ${run.non2xx} of ${run.answered} requests with a non-2xx status (${statuses})`)
  }
  const { closed, connect, malformed, read, write } = run.errors
  if (connect + read + write + malformed > 0) {
    problems.push(`${who}: socket errors ${JSON.stringify({ connect, read, write, malformed })}`)
  }
  if (closed > 0) problems.push(`${who} closed ${closed} idle connections`)
  return problems
}
