/**
 * Start-up (every closed-loop run; alone with BENCH_STARTUP_ONLY=1): the single binary built as it
 * is deployed, its size, and the time from spawning `campaign-api serve` to the first 200 from
 * whoami against a bare compiled `Bun.serve` (bench/bare-serve.ts), the two started in turns.
 */
import { join } from "node:path"
import { freePort } from "../common.ts"
import { spawn, stop } from "../harness/processes.ts"
import { median, number } from "../harness/report.ts"
import { buildBinary, compile, createKey, waitForWhoami } from "../harness/servers.ts"
import { serviceLogLevel, startupRuns } from "../harness/settings.ts"

export interface BinaryResult {
  readonly sizeBytes: number
  readonly buildSeconds: number
  readonly startToFirst200Ms: ReadonlyArray<number>
  readonly medianStartToFirst200Ms: number
  /** A bare compiled `Bun.serve` (bench/bare-serve.ts), started in turns with the service. */
  readonly bareStartToFirst200Ms: ReadonlyArray<number>
  readonly medianBareStartToFirst200Ms: number
}

/** The binary is built into `dir`, where the comparison and metrics scenarios find it. */
export const measureBinary = async (dir: string): Promise<BinaryResult> => {
  const { binary, buildSeconds, sizeBytes } = await buildBinary(dir)
  const databaseFile = join(dir, "binary.sqlite")
  const apiKey = await createKey([binary], databaseFile)

  const bare = join(dir, "bare-serve")
  await compile("bench/bare-serve.ts", bare)

  const startToFirst200 = async (cmd: ReadonlyArray<string>) => {
    const port = freePort()
    const startedAt = performance.now()
    const spawned = spawn(cmd, {
      env: {
        PORT: String(port),
        HOST: "127.0.0.1",
        DATABASE_URL: databaseFile,
        LOG_LEVEL: serviceLogLevel,
        SHUTDOWN_DELAY_SECONDS: "0"
      },
      timeoutMs: 60_000
    })
    try {
      return await waitForWhoami(spawned, `http://127.0.0.1:${port}`, apiKey, {
        startedAt,
        intervalMs: 2,
        timeoutMs: 30_000
      })
    } finally {
      await stop(spawned.process)
    }
  }
  // In turns, so that the VM's slower minutes hit both alike.
  const times: Array<number> = []
  const bareTimes: Array<number> = []
  for (let run = 0; run < startupRuns; run++) {
    times.push(await startToFirst200([binary, "serve"]))
    bareTimes.push(await startToFirst200([bare]))
  }
  return {
    sizeBytes,
    buildSeconds,
    startToFirst200Ms: times,
    medianStartToFirst200Ms: median(times),
    bareStartToFirst200Ms: bareTimes,
    medianBareStartToFirst200Ms: median(bareTimes)
  }
}

export const printBinary = (binary: BinaryResult) =>
  console.log(
    `binary: ${number(binary.sizeBytes / 1024 / 1024, 1)} MB, start to first 200 from whoami: ` +
      `median ${number(binary.medianStartToFirst200Ms, 1)} ms of ${
        binary.startToFirst200Ms.map((t) => t.toFixed(1)).join(", ")
      }; ` +
      `bare compiled Bun.serve median ${number(binary.medianBareStartToFirst200Ms, 1)} ms of ` +
      `${binary.bareStartToFirst200Ms.map((t) => t.toFixed(1)).join(", ")} ` +
      `(${number(binary.medianStartToFirst200Ms / binary.medianBareStartToFirst200Ms, 1)}×)`
  )

export const printBinarySummary = (binary: BinaryResult) =>
  console.log(
    `\nbinary: ${number(binary.sizeBytes / 1024 / 1024, 1)} MB (${binary.sizeBytes} bytes), ` +
      `start to first 200 from whoami: median ${
        number(binary.medianStartToFirst200Ms, 1)
      } ms of ${startupRuns} runs; ` +
      `a bare compiled Bun.serve in turns with it: ${number(binary.medianBareStartToFirst200Ms, 1)} ms ` +
      `(${number(binary.medianStartToFirst200Ms / binary.medianBareStartToFirst200Ms, 1)}×)`
  )
