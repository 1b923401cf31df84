/**
 * wrk against one server: a run of a scenario (wrk pinned to the load's CPU, one thread, the bench's
 * connections), and a scenario measured on one server (a warm-up, then a measured run with the
 * server's CPU and memory, the rest of the machine's CPU and the rows it wrote), with what makes a
 * measurement untrustworthy.
 */
import { storeReplayed, wrkArgs, wrkKeyPrefix, wrkResultOf } from "../common.ts"
import { cpuSeconds, machineBusySeconds, ownCpuSeconds, sampleRss } from "./machine.ts"
import { childCpuSeconds, finished, spawn } from "./processes.ts"
import { number, table } from "./report.ts"
import { countActivations, type Server, type ServerName } from "./servers.ts"
import { connections, durationSeconds, loadCpu, type ScenarioName, settleMs, warmupSeconds } from "./settings.ts"

export const runWrk = async (server: Server, scenario: ScenarioName, seconds: number, keyPrefix: string) => {
  const spawned = spawn(
    [
      "taskset",
      "-c",
      loadCpu,
      ...wrkArgs(server.url, scenario, server.apiKey, wrkKeyPrefix(scenario, keyPrefix), connections, seconds)
    ],
    { timeoutMs: (seconds + 30) * 1000 }
  )
  const exitCode = await finished(spawned)
  const result = wrkResultOf(spawned.stdout.toString())
  if (exitCode !== 0 || result === undefined) {
    throw new Error(`wrk exited with ${exitCode} and no result:\n${spawned.stdout}${spawned.stderr}`)
  }
  return { result, wrkCpuSeconds: childCpuSeconds(spawned) }
}

export interface Measurement {
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

export const measure = async (server: Server, scenario: ScenarioName, runId: string): Promise<Measurement> => {
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
export const answerProblems = (
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
export const problemsOf = (scenario: ScenarioName, m: Measurement): Array<string> => {
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

export const scenarioTable = (measurements: ReadonlyArray<Measurement>): string =>
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
