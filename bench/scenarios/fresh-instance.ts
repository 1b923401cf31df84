/**
 * A fresh instance's first seconds (BENCH_START_SCENARIOS): a new process on a database of its own
 * that already holds the key and the seeded records (for replay, the stored first activation, by an
 * instance started and stopped before it); the generator polls its `/readyz` and starts
 * BENCH_START_RATE the moment it answers 200, for BENCH_START_SECONDS; then the same instance is
 * warmed up (wrk, BENCH_WARMUP) and the same load runs again, its `/readyz` answering at once:
 * connecting is in both.
 */
import { join } from "node:path"
import { seedReads, storeReplayed } from "../common.ts"
import { type OpenLoopRun, rowProblems, runGenerator } from "../harness/generator.ts"
import { stop } from "../harness/processes.ts"
import { number, printErrors, table } from "../harness/report.ts"
import {
  baselineCommand,
  countActivations,
  createKey,
  type Server,
  serviceEnv,
  spawnServer,
  startServer
} from "../harness/servers.ts"
import {
  openLoopLogLevel,
  otherCpuWarningPercent,
  settleMs,
  startRate,
  startSeconds,
  warmupSeconds
} from "../harness/settings.ts"
import { runWrk } from "../harness/wrk.ts"
import {
  generatorProblems,
  type GeneratorResult,
  heldNote,
  type OpenLoopScenario,
  perSecond,
  summarize,
  type Summary,
  type Verdict,
  verdictOf
} from "../openloop.ts"

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

export const measureStart = async (
  generator: string,
  dir: string,
  serviceCli: ReadonlyArray<string>,
  name: "service" | "baseline",
  scenario: OpenLoopScenario,
  runId: string
) => {
  const databaseFile = join(dir, `start-${scenario}-${name}.sqlite`)
  const apiKey = await createKey(serviceCli, databaseFile)
  seedReads(databaseFile)
  const cmd = name === "service" ? [...serviceCli, "serve"] : baselineCommand
  const env = name === "service" ? serviceEnv(openLoopLogLevel) : {}
  const logFile = name === "service" && openLoopLogLevel === "info"
    ? join(dir, `start-${scenario}.log`)
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
    const fresh = await runGenerator(generator, dir, server, scenario, prefix("fresh"), {
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
    const warm = await runGenerator(generator, dir, server, scenario, prefix("warmed"), {
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
  printErrors(start.problems)
}
