/**
 * BENCH_OPEN_LOOP=1: latency at constant rates from each request's due time (the generator
 * `bench/openloop.c`), the service and the baseline in turns, then a fresh instance's first seconds
 * against the same instance warm; nothing else is run. bench/README.md says how.
 */
import { join } from "node:path"
import { seedReads, writeResults } from "../common.ts"
import { stop } from "../harness/processes.ts"
import { printProblems } from "../harness/report.ts"
import { baselineCommand, buildBinary, createKey, type Server, serviceEnv, startServer } from "../harness/servers.ts"
import {
  connections,
  durationSeconds,
  loadCpu,
  openLoopConnections,
  openLoopFractions,
  openLoopLogLevel,
  openLoopRates,
  openLoopRounds,
  openLoopServers,
  scenarios,
  serverCpu,
  startRate,
  startScenarios,
  startSeconds,
  warmupSeconds
} from "../harness/settings.ts"
import { buildGenerator, type OpenLoopScenario } from "../openloop.ts"
import { measureStart } from "./fresh-instance.ts"
import { measureRates } from "./open-loop-rates.ts"

const measureOpenLoop = async (dir: string) => {
  console.log("building the single binary and the generator ...")
  const { binary, sizeBytes } = await buildBinary(dir)
  const generator = buildGenerator(dir)
  const serviceCli = [binary]
  const runId = Date.now().toString(36)
  const servers: Array<Server> = []
  const rates: Array<Awaited<ReturnType<typeof measureRates>>> = []
  const starts: Array<Awaited<ReturnType<typeof measureStart>>> = []
  try {
    if (scenarios.length > 0) {
      for (const name of openLoopServers) {
        const databaseFile = join(dir, `${name}.sqlite`)
        const apiKey = await createKey(serviceCli, databaseFile)
        seedReads(databaseFile)
        servers.push(
          name === "service"
            ? await startServer(
              "service",
              [...serviceCli, "serve"],
              serviceEnv(openLoopLogLevel),
              databaseFile,
              apiKey,
              openLoopLogLevel === "info" ? join(dir, "service.log") : undefined
            )
            : await startServer("baseline", baselineCommand, {}, databaseFile, apiKey)
        )
      }
      for (const scenario of scenarios) {
        rates.push(
          await measureRates(
            generator,
            dir,
            servers,
            scenario.name as OpenLoopScenario,
            scenario.title,
            `${runId}-${scenario.name}`
          )
        )
      }
    }
  } finally {
    for (const server of servers) await stop(server.spawned.process)
  }
  for (const scenario of startScenarios) {
    for (const name of openLoopServers) {
      starts.push(await measureStart(generator, dir, serviceCli, name, scenario, runId))
    }
  }
  return { binarySizeBytes: sizeBytes, rates, starts, problems: [...rates, ...starts].flatMap((r) => r.problems) }
}

export const runOpenLoop = async (dir: string, machine: Record<string, unknown>) => {
  const measured = await measureOpenLoop(dir)
  writeResults("openloop", {
    machine,
    settings: {
      durationSeconds,
      warmupSeconds,
      wrkConnections: connections,
      serverCpu,
      loadCpu,
      logLevel: openLoopLogLevel,
      connections: openLoopConnections,
      rounds: openLoopRounds,
      fractions: openLoopRates === undefined ? openLoopFractions : null,
      rates: openLoopRates ?? null,
      servers: openLoopServers,
      startScenarios,
      startRate,
      startSeconds
    },
    ...measured
  })
  printProblems(measured.problems)
}
