/**
 * The access log's cost: after a scenario's measured runs, the service at LOG_LEVEL=warn and the
 * same at info (its access log to a file) side by side, `BENCH_LOG_RUNS` runs of
 * `BENCH_LOG_SECONDS` after one uncounted. Measured in turns instead, the same figure swung from 5
 * to 28 % on whoami between full runs: the VM's speed drifts by that much within a minute.
 */
import { number } from "../harness/report.ts"
import type { Server } from "../harness/servers.ts"
import { accessLogRuns, accessLogSeconds, type ScenarioName } from "../harness/settings.ts"
import { measureSideBySide, ratiosText, type SideBySideCost } from "../harness/side-by-side.ts"

/** The warn and info servers side by side: info's throughput over warn's. */
export const measureAccessLog = (warn: Server, info: Server, scenario: ScenarioName, runId: string) => {
  console.log(
    `the access log: ${accessLogRuns} runs of the warn and info servers side by side, ${accessLogSeconds} s each, ` +
      `after one uncounted ...`
  )
  return measureSideBySide(warn, info, scenario, runId, "the access log")
}

export const printAccessLog = (cost: SideBySideCost) =>
  console.log(
    `the access log costs ${number((1 - cost.ratio) * 100, 1)}% of the throughput ` +
      `(mean of ${accessLogRuns} side-by-side runs, info over warn: ${ratiosText(cost)})`
  )
