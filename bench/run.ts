/**
 * The benchmark: the real service against a framework-free baseline on the same machine.
 *
 *   bun bench/run.ts                      # BENCH_DURATION=10 (seconds per measured run), BENCH_WARMUP=15,
 *                                         # BENCH_STARTUP_ONLY=1 (start-up against a bare Bun.serve only),
 *                                         # BENCH_SCENARIOS=pages (a page of each combination of filters
 *                                         # among 300,000 activations of one campaign, the service alone),
 *                                         # BENCH_LOG_RUNS=4, BENCH_LOG_SECONDS=5 (the access log's runs)
 *                                         # BENCH_METRICS_ONLY=1 (only metrics on against off, side by side;
 *                                         # BENCH_METRICS_AGAINST=<binary>: that binary against this one, metrics off)
 *                                         # BENCH_LOG_LEVEL=warn (or info: the service's level in the measured runs)
 *                                         # BENCH_OPEN_LOOP=1 (only latency at constant rates, from each request's
 *                                         # due time, and a fresh instance's first seconds: bench/README.md)
 *
 * This file checks the machine and dispatches: the settings are read in `harness/settings.ts`, the
 * servers, wrk, the side-by-side runs and the /proc readings are in `harness/`, and each family of
 * scenarios is a file of `scenarios/` (start-up, the comparison with its access log and pages,
 * metrics, the open loop). Each server runs on its own temporary database (prepared by the
 * service's `keys create`), pinned to CPU 1; wrk is pinned to CPU 0. Results go to
 * bench/results/<kind-><timestamp>.json.
 *
 * Every child process is started under `setpriv --pdeathsig KILL` (it dies with this process, even
 * on SIGKILL) with a hard timeout, and is killed on exit, on error and on SIGINT/SIGTERM.
 */
import { cpus } from "node:os"
import { idleMachineLoadPercent, machine } from "./harness/machine.ts"
import { cleanUp, guard, killAll, makeWorkDir } from "./harness/processes.ts"
import { number } from "./harness/report.ts"
import {
  budgetMs,
  connections,
  durationSeconds,
  fail,
  loadCpu,
  metricsOnly,
  openLoop,
  openLoopConnections,
  openLoopRounds,
  otherCpuWarningPercent,
  serverCpu,
  startupOnly,
  warmupSeconds
} from "./harness/settings.ts"
import { runComparison } from "./scenarios/comparison.ts"
import { runMetrics } from "./scenarios/metrics.ts"
import { runOpenLoop } from "./scenarios/open-loop.ts"
import { measureBinary, printBinary } from "./scenarios/startup.ts"

guard(budgetMs)

const preflight = () => {
  for (const tool of ["wrk", "taskset", "setpriv", ...(openLoop ? ["gcc"] : [])]) {
    if (Bun.which(tool) === null) {
      fail(
        tool === "wrk"
          ? "wrk is not installed; install it with: apt-get update && apt-get install -y wrk"
          : `${tool} is not installed (it comes with util-linux / coreutils)`
      )
    }
  }
  if (cpus().length < 2) {
    fail(`needs 2 CPUs (server on CPU ${serverCpu}, wrk on CPU ${loadCpu}); this machine has ${cpus().length}`)
  }
}

const main = async () => {
  preflight()
  // The code measured: read before the run, so edits made while it runs do not change what it records.
  const machineAtStart = machine()
  const loadBeforeStart = await idleMachineLoadPercent()
  console.log(
    `machine load before starting: ${number(loadBeforeStart)}% of a core` +
      (loadBeforeStart > otherCpuWarningPercent ? " (other processes are busy: the figures will be noisy)" : "")
  )
  const dir = makeWorkDir()
  const record = { ...machineAtStart, loadBeforeStartPercent: loadBeforeStart }
  try {
    console.log(
      openLoop
        ? `bench, open loop: ${openLoopRounds} × ${durationSeconds} s per server and rate after a ${warmupSeconds} s warm-up, ` +
          `${openLoopConnections} connections, servers on CPU ${serverCpu}, the generator and wrk on CPU ${loadCpu}; work directory ${dir}`
        : `bench: ${durationSeconds} s per run after a ${warmupSeconds} s warm-up, ${connections} connections, ` +
          `servers on CPU ${serverCpu}, wrk on CPU ${loadCpu}; work directory ${dir}`
    )
    if (openLoop) return await runOpenLoop(dir, record)
    console.log("building the single binary...")
    const binary = await measureBinary(dir)
    printBinary(binary)
    if (startupOnly) return
    if (metricsOnly) return await runMetrics(dir, record)
    await runComparison(dir, record, binary)
  } finally {
    killAll()
    cleanUp()
  }
}

await main().catch((error: unknown) => {
  console.error(`bench failed: ${error instanceof Error ? error.message : String(error)}`)
  process.exitCode = 1
})
process.exit()
