/**
 * One run of the open-loop generator (`bench/openloop.c`, its TypeScript side `bench/openloop.ts`)
 * on the load's CPU against a server: each request's latency from its due time, what the rest of
 * the machine used meanwhile, and whether the rows written match the answers.
 */
import { rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import {
  generatorArgs,
  type GeneratorResult,
  generatorResultOf,
  type OpenLoopScenario,
  rawRequest,
  readinessRequest,
  readSamples
} from "../openloop.ts"
import { cpuSeconds, machineBusySeconds, ownCpuSeconds } from "./machine.ts"
import { childCpuSeconds, finished, spawn } from "./processes.ts"
import { loadCpu, openLoopConnections, openLoopRunBudgetSeconds } from "./settings.ts"

/** One run of the generator: its result, each request's latency, what the rest of the machine used meanwhile. */
export interface OpenLoopRun {
  readonly result: GeneratorResult
  readonly samples: Float64Array
  /** CPU the rest of the machine used during the run (100 = one whole core), the generator and the server apart. */
  readonly otherCpuPercent: number
}

export interface OpenLoopTarget {
  readonly name: string
  readonly url: string
  readonly apiKey: string
  readonly pid: number
}

/**
 * The generator on its CPU against `target` at `rate` for `seconds`, its files in `dir`. With
 * `ready`, it first polls `/readyz` every millisecond and starts the moment it answers 200 (a fresh
 * instance's first seconds).
 */
export const runGenerator = async (
  generator: string,
  dir: string,
  target: OpenLoopTarget,
  scenario: OpenLoopScenario,
  keyPrefix: string,
  options: { readonly rate: number; readonly seconds: number; readonly ready?: boolean }
): Promise<OpenLoopRun> => {
  const file = join(dir, keyPrefix)
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
  const exitCode = await finished(spawned)
  const wallSeconds = (performance.now() - startedAt) / 1000
  const result = generatorResultOf(spawned.stdout.toString())
  if (exitCode !== 0 || result === undefined) {
    throw new Error(`the generator exited with ${exitCode} and no result:\n${spawned.stdout}${spawned.stderr}`)
  }
  const generatorCpu = childCpuSeconds(spawned)
  const serverCpu = cpuSeconds(target.pid) - before.server
  const otherCpu = machineBusySeconds() - before.machine - serverCpu - generatorCpu - (ownCpuSeconds() - before.own)
  const samples = readSamples(`${file}.latency`)
  rmSync(`${file}.latency`)
  return { result, samples, otherCpuPercent: Math.max(0, (otherCpu / wallSeconds) * 100) }
}

/** Rows a run wrote against the answers it got: one per successful fresh activation, none otherwise. */
export const rowProblems = (
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
