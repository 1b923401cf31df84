/**
 * The comparison against the baseline (the default run): three servers pinned to the servers' CPU,
 * each on a database of its own that the binary prepared (the key, the reads' records, the pages'
 * when a page scenario runs): the service at LOG_LEVEL=warn, the same at info (its access log to a
 * file) and the framework-free baseline. For every scenario and server a warm-up, then a measured
 * run; then the access log's runs side by side. A table per scenario, everything in
 * bench/results/<timestamp>.json.
 */
import { join } from "node:path"
import { pagedActivations, type PageScenario, seededActivations, writeResults, wrkThreads } from "../common.ts"
import { statusKb } from "../harness/machine.ts"
import { stop } from "../harness/processes.ts"
import { number, printErrors, printProblems } from "../harness/report.ts"
import { baselineCommand, prepareDatabase, type Server, serviceEnv, startServer } from "../harness/servers.ts"
import {
  accessLogRuns,
  accessLogSeconds,
  connections,
  durationSeconds,
  isPage,
  loadCpu,
  otherCpuWarningPercent,
  runsPages,
  type ScenarioName,
  scenarios,
  serverCpu,
  serviceLogLevel,
  warmupSeconds
} from "../harness/settings.ts"
import type { SideBySideCost } from "../harness/side-by-side.ts"
import { measure, type Measurement, problemsOf, scenarioTable } from "../harness/wrk.ts"
import { measureAccessLog, printAccessLog } from "./access-log.ts"
import { measurePage, type PageResult, printPages } from "./pages.ts"
import { type BinaryResult, printBinarySummary } from "./startup.ts"

interface ScenarioResult {
  readonly scenario: ScenarioName
  readonly title: string
  readonly service: Measurement
  readonly serviceInfo: Measurement
  readonly baseline: Measurement
  readonly ratioRequestsPerSecond: number
  /** The service at LOG_LEVEL=info over the same at warn (short runs side by side): what the access log costs. */
  readonly accessLog: SideBySideCost
  readonly problems: ReadonlyArray<string>
}

const startServers = async (dir: string, servers: Array<Server>) => {
  // The service runs as it is deployed: the single binary the start-up scenario built, the server
  // and the key command line in one (bundled, so it loads only the modules it uses).
  const serviceCli = [join(dir, "campaign-api")]
  const [serviceDb, serviceInfoDb, baselineDb] = ["service", "service-info", "baseline"].map((name) =>
    join(dir, `${name}.sqlite`)
  ) as [string, string, string]
  const serviceKey = await prepareDatabase(serviceCli, serviceDb)
  const serviceInfoKey = await prepareDatabase(serviceCli, serviceInfoDb)
  const baselineKey = await prepareDatabase(serviceCli, baselineDb)
  console.log(
    `seeded ${seededActivations} activations of the bench's brand into each database for the reads` +
      (runsPages ? `, and ${pagedActivations} of one campaign for the pages` : "")
  )
  servers.push(
    await startServer("service", [...serviceCli, "serve"], serviceEnv(serviceLogLevel), serviceDb, serviceKey)
  )
  // As users run it: the default LOG_LEVEL, one access-log line per request, to a file.
  servers.push(
    await startServer(
      "service-info",
      [...serviceCli, "serve"],
      serviceEnv("info"),
      serviceInfoDb,
      serviceInfoKey,
      join(dir, "service-info.log")
    )
  )
  servers.push(await startServer("baseline", baselineCommand, {}, baselineDb, baselineKey))
  return servers as [Server, Server, Server]
}

const measureScenario = async (
  [serviceServer, infoServer, baselineServer]: [Server, Server, Server],
  scenario: { readonly name: ScenarioName; readonly title: string },
  runId: string
): Promise<ScenarioResult> => {
  console.log(`\nrunning ${scenario.title} ...`)
  const service = await measure(serviceServer, scenario.name, `${runId}-${scenario.name}-service`)
  const serviceInfo = await measure(infoServer, scenario.name, `${runId}-${scenario.name}-service-info`)
  const baseline = await measure(baselineServer, scenario.name, `${runId}-${scenario.name}-baseline`)
  const accessLog = await measureAccessLog(serviceServer, infoServer, scenario.name, `${runId}-${scenario.name}`)
  const ratio = service.requestsPerSecond / baseline.requestsPerSecond
  const problems = [
    ...[service, serviceInfo, baseline].flatMap((m) => problemsOf(scenario.name, m)),
    ...accessLog.problems
  ]
  console.log(`\n${scenario.title}, ${connections} connections, ${durationSeconds} s`)
  console.log(scenarioTable([service, serviceInfo, baseline]))
  console.log(
    `service/baseline req/s: ${number(ratio, 3)} (LOG_LEVEL=${serviceLogLevel}); service-info/baseline ` +
      `${
        number(serviceInfo.requestsPerSecond / baseline.requestsPerSecond, 3)
      } (runs minutes apart: the access log's cost is the next line)`
  )
  printAccessLog(accessLog)
  printErrors(problems)
  for (const m of [service, serviceInfo, baseline]) {
    if (m.otherCpuPercent > otherCpuWarningPercent) {
      console.log(
        `!   other processes used ${
          number(m.otherCpuPercent)
        }% of a core during the ${m.server} run: its figures are noisy`
      )
    }
  }
  return {
    scenario: scenario.name,
    title: scenario.title,
    service,
    serviceInfo,
    baseline,
    ratioRequestsPerSecond: ratio,
    accessLog,
    problems
  }
}

/** The reads against whoami in the same run: one indexed lookup more, or a page of 20 (bench/README.md). */
const printReadsOverWhoami = (results: ReadonlyArray<ScenarioResult>) => {
  const whoamiResult = results.find((r) => r.scenario === "whoami")
  if (whoamiResult === undefined) return
  for (const read of results.filter((r) => r.scenario === "get" || r.scenario === "list")) {
    console.log(
      `${read.scenario}/whoami req/s: service ${
        number(read.service.requestsPerSecond / whoamiResult.service.requestsPerSecond, 3)
      }, ` +
        `baseline ${number(read.baseline.requestsPerSecond / whoamiResult.baseline.requestsPerSecond, 3)}`
    )
  }
}

export const runComparison = async (dir: string, machine: Record<string, unknown>, binary: BinaryResult) => {
  const started: Array<Server> = []
  try {
    const servers = await startServers(dir, started)
    const results: Array<ScenarioResult> = []
    const pages: Array<PageResult> = []
    const runId = Date.now().toString(36)
    for (const scenario of scenarios) {
      if (isPage(scenario.name)) {
        pages.push(await measurePage(servers[0], scenario as { name: PageScenario; title: string }, runId))
      } else {
        results.push(await measureScenario(servers, scenario, runId))
      }
    }
    printPages(pages)
    printReadsOverWhoami(results)

    const lifetimePeakRssMb = Object.fromEntries(servers.map((s) => [s.name, statusKb(s.pid, "VmHWM") / 1024]))
    for (const server of servers) await stop(server.spawned.process)
    await Promise.all(servers.flatMap((s) => [s.spawned.stdout.done, s.spawned.stderr.done]))
    const serverLogs = Object.fromEntries(servers.map((s) => [s.name, `${s.spawned.stdout}${s.spawned.stderr}`.trim()]))

    printBinarySummary(binary)
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
      machine,
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

    printProblems([...results, ...pages].flatMap((r) => r.problems.map((p) => `${r.scenario}: ${p}`)))
  } finally {
    for (const server of started) server.spawned.process.kill("SIGKILL")
    await Promise.all(started.map((s) => s.spawned.process.exited))
  }
}
