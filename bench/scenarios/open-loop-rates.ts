/**
 * The open loop's rates: per scenario, each server warmed up, its closed-loop peak (wrk), then each
 * rate on each server in turns, `BENCH_OPEN_LOOP_ROUNDS` rounds, the order reversed every other
 * round (service, baseline, baseline, service, ...) so that a drift of the VM's speed over the
 * minutes of one rate falls on both alike. Side by side on one core the two would wait on each
 * other's time slices: latency would measure the scheduler (bench/README.md).
 */
import { storeReplayed } from "../common.ts"
import { type OpenLoopRun, rowProblems, runGenerator } from "../harness/generator.ts"
import { number, printErrors, table } from "../harness/report.ts"
import { countActivations, type Server } from "../harness/servers.ts"
import {
  connections,
  durationSeconds,
  openLoopConnections,
  openLoopFractions,
  openLoopLogLevel,
  openLoopRates,
  openLoopRounds,
  otherCpuWarningPercent,
  settleMs,
  warmupSeconds
} from "../harness/settings.ts"
import { answerProblems, runWrk } from "../harness/wrk.ts"
import {
  generatorProblems,
  type GeneratorResult,
  heldNote,
  type OpenLoopScenario,
  summarize,
  type Summary,
  type Verdict,
  verdictOf
} from "../openloop.ts"

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

export const measureRates = async (
  generator: string,
  dir: string,
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
        const run = await runGenerator(generator, dir, server, scenario, keyPrefix, {
          rate,
          seconds: durationSeconds
        })
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
  printErrors(problems)
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
