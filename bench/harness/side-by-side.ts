/**
 * Two servers side by side: both on the servers' CPU, a wrk each on the load's CPU, at the same
 * time. Two busy processes on one core get equal shares of it, so the ratio of their throughputs is
 * the ratio of the CPU each spends on a request, and whatever the VM's speed does during the run it
 * does to both (bench/README.md). How the access log's, metrics' and another build's costs are measured.
 */
import { storeReplayed } from "../common.ts"
import { number } from "./report.ts"
import type { Server } from "./servers.ts"
import { accessLogRuns, accessLogSeconds, type ScenarioName, settleMs } from "./settings.ts"
import { answerProblems, runWrk } from "./wrk.ts"

export interface SideBySideCost {
  /** The measured server's throughput over the reference's in each side-by-side run, in the order run. */
  readonly ratios: ReadonlyArray<number>
  /** The mean of `ratios`: the figure reported. */
  readonly ratio: number
  readonly problems: ReadonlyArray<string>
}

/**
 * `accessLogRuns` runs of the two servers side by side after one uncounted run of `firstSeconds`;
 * which wrk starts first alternates, since the one started second came out 1–2 % ahead.
 * The ratios are `measured`'s throughput over `reference`'s.
 */
export const measureSideBySide = async (
  reference: Server,
  measured: Server,
  scenario: ScenarioName,
  runId: string,
  what: string,
  firstSeconds = accessLogSeconds
): Promise<SideBySideCost> => {
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

export const ratiosText = (cost: SideBySideCost) => cost.ratios.map((r) => number(r, 3)).join(", ")
