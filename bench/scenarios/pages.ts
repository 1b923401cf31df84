/**
 * The page scenarios (BENCH_SCENARIOS=pages, or one of them): a page of 20 for each combination of
 * the list's filters among 300,000 activations of one campaign (`seedPages`), on the service alone:
 * each combination's latency at one campaign's size, not a ratio (the baseline and the access log
 * are measured on the other reads).
 */
import { pagedActivations, pagePaths, type PageScenario } from "../common.ts"
import { number, printErrors, table } from "../harness/report.ts"
import type { Server } from "../harness/servers.ts"
import { connections, durationSeconds, otherCpuWarningPercent, serviceLogLevel } from "../harness/settings.ts"
import { measure, type Measurement, problemsOf, scenarioTable } from "../harness/wrk.ts"

export interface PageResult {
  readonly scenario: PageScenario
  readonly path: string
  readonly service: Measurement
  readonly problems: ReadonlyArray<string>
}

export const measurePage = async (
  service: Server,
  scenario: { readonly name: PageScenario; readonly title: string },
  runId: string
): Promise<PageResult> => {
  console.log(`\nrunning ${scenario.title} on the service ...`)
  const measured = await measure(service, scenario.name, `${runId}-${scenario.name}-service`)
  const problems = problemsOf(scenario.name, measured)
  console.log(scenarioTable([measured]))
  printErrors(problems)
  if (measured.otherCpuPercent > otherCpuWarningPercent) {
    console.log(
      `!   other processes used ${number(measured.otherCpuPercent)}% of a core during the run: its figures are noisy`
    )
  }
  return { scenario: scenario.name, path: pagePaths[scenario.name], service: measured, problems }
}

/** Every page scenario of the run in one table, each with its path. */
export const printPages = (pages: ReadonlyArray<PageResult>) => {
  if (pages.length === 0) return
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
