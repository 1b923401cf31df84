/**
 * BENCH_METRICS_ONLY=1: per scenario, the binary with METRICS_PORT set over the same binary without
 * it, side by side after a side-by-side warm-up; with BENCH_METRICS_AGAINST=<binary>, this build
 * (metrics off) over that binary: what "off" costs against a build without metrics, or what this
 * build's changes cost against another's. Nothing else is run.
 */
import { join } from "node:path"
import { freePort, writeResults, wrkThreads } from "../common.ts"
import { statusKb } from "../harness/machine.ts"
import { stop } from "../harness/processes.ts"
import { number, printErrors } from "../harness/report.ts"
import { prepareDatabase, type Server, type ServerName, serviceEnv, startServer } from "../harness/servers.ts"
import {
  accessLogRuns,
  accessLogSeconds,
  connections,
  loadCpu,
  metricsAgainst,
  type ScenarioName,
  scenarios,
  serverCpu,
  serviceLogLevel,
  warmupSeconds
} from "../harness/settings.ts"
import { measureSideBySide, ratiosText, type SideBySideCost } from "../harness/side-by-side.ts"

const measureMetrics = async (binary: string, dir: string) => {
  const cli = [binary]
  const startOne = async (name: ServerName, command: ReadonlyArray<string>, env: Record<string, string>) => {
    const databaseFile = join(dir, `${name}.sqlite`)
    // Made by the binary that serves it: another build's database has that build's migrations.
    const apiKey = await prepareDatabase(command, databaseFile)
    return startServer(name, [...command, "serve"], { ...serviceEnv(serviceLogLevel), ...env }, databaseFile, apiKey)
  }
  const metricsPort = freePort()
  const servers = metricsAgainst === undefined
    ? [
      await startOne("metrics-off", cli, {}),
      await startOne("metrics-on", cli, { METRICS_PORT: String(metricsPort) })
    ]
    : [await startOne("against", [metricsAgainst], {}), await startOne("metrics-off", cli, {})]
  const [reference, measured] = servers as [Server, Server]
  const results: Array<{ readonly scenario: ScenarioName } & SideBySideCost> = []
  try {
    const runId = Date.now().toString(36)
    for (const scenario of scenarios) {
      console.log(
        `\n${scenario.title}: ${measured.name} over ${reference.name}, ${accessLogRuns} runs side by side, ` +
          `${accessLogSeconds} s each, after ${warmupSeconds} s of both ...`
      )
      const cost = await measureSideBySide(
        reference,
        measured,
        scenario.name,
        `${runId}-${scenario.name}`,
        "metrics",
        warmupSeconds
      )
      results.push({ scenario: scenario.name, ...cost })
      console.log(
        `${measured.name}/${reference.name}: mean ${number(cost.ratio, 3)} (${ratiosText(cost)}; ` +
          `spread ${number(Math.min(...cost.ratios), 3)}–${number(Math.max(...cost.ratios), 3)})`
      )
      printErrors(cost.problems)
    }
    // A metrics server that counted nothing would make the comparison meaningless.
    if (metricsAgainst === undefined) {
      const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text()
      const counted = [...text.matchAll(/^http_server_request_duration_seconds_count\{[^}]*\} (\d+)$/gm)]
        .reduce((sum, match) => sum + Number(match[1]), 0)
      console.log(`metrics-on counted ${number(counted)} requests (GET /metrics)`)
      if (counted === 0) {
        results.push({
          scenario: scenarios[0]!.name,
          ratios: [],
          ratio: 0,
          problems: ["metrics-on counted no request"]
        })
      }
    }
    // Both served the same load side by side: their peaks over the whole run compare.
    const peakMb = (server: Server) => statusKb(server.pid, "VmHWM") / 1024
    console.log(
      `peak RSS (VmHWM): ${measured.name} ${number(peakMb(measured), 1)} MB, ${reference.name} ${
        number(peakMb(reference), 1)
      } MB (${number(peakMb(measured) / peakMb(reference), 3)})`
    )
  } finally {
    for (const server of servers) await stop(server.spawned.process)
  }
  return { reference: reference.name, measured: measured.name, against: metricsAgainst ?? null, results }
}

/** The binary is the one the start-up scenario built into `dir`. */
export const runMetrics = async (dir: string, machine: Record<string, unknown>) => {
  const metrics = await measureMetrics(join(dir, "campaign-api"), dir)
  writeResults("metrics", {
    machine,
    settings: {
      warmupSeconds,
      connections,
      wrkThreads,
      serverCpu,
      loadCpu,
      serviceLogLevel,
      runs: accessLogRuns,
      runSeconds: accessLogSeconds
    },
    metrics
  })
  if (metrics.results.some((r) => r.problems.length > 0)) process.exitCode = 1
}
