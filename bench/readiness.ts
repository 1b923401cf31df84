/**
 * How long the binary takes to turn ready (docs/operators.md, Operating it: Start-up): starts it `RUNS` times,
 * each on a new SQLite file with the warm-up on, and prints the log's `warmed up` milliseconds, the
 * time from the start to the first `/readyz` 200, and how much of the machine's cores other
 * processes took meanwhile (from /proc/stat, less the server's own CPU time): the figure grows with
 * the machine's load, so a run says how loaded its machine was.
 *
 *   bun run build && bun bench/readiness.ts     # READINESS_BINARY=dist/campaign-api READINESS_RUNS=5
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { freePort, waitForReady } from "./common.ts"
import { cpuSeconds, machineSeconds } from "./harness/machine.ts"

const root = new URL("..", import.meta.url).pathname
const binary = process.env["READINESS_BINARY"] ?? join(root, "dist/campaign-api")
const runs = Number(process.env["READINESS_RUNS"] ?? 5)

for (let run = 1; run <= runs; run++) {
  const work = mkdtempSync(join(tmpdir(), "campaign-api-readiness-"))
  const log = join(work, "server.log")
  const port = freePort()
  const before = machineSeconds()
  const startedAt = performance.now()
  const server = Bun.spawn([binary, "serve"], {
    env: {
      ...process.env,
      DATABASE_URL: join(work, "db.sqlite"),
      HOST: "127.0.0.1",
      PORT: String(port),
      LOG_LEVEL: "info",
      SHUTDOWN_DELAY_SECONDS: "0"
    },
    stdout: "ignore",
    stderr: Bun.file(log)
  })
  await waitForReady(`http://127.0.0.1:${port}`, { intervalMs: 20, startedAt, timeoutMs: 120_000 })
  const readyMs = performance.now() - startedAt
  const after = machineSeconds()
  const own = cpuSeconds(server.pid)
  server.kill("SIGTERM")
  await server.exited
  const warmedUp = readFileSync(log, "utf8").split("\n").filter((line) => line.includes("\"warmed up\""))
    .map((line) => JSON.parse(line).annotations.milliseconds as number)[0]
  const others = (after.busy - before.busy - own) / (after.total - before.total)
  console.log(
    `run ${run}: warmed up in ${warmedUp?.toFixed(0) ?? "(no line)"} ms, /readyz 200 after ${
      readyMs.toFixed(0)
    } ms; the server's CPU ${(own * 1000).toFixed(0)} ms, other processes ${(others * 100).toFixed(0)} % of the cores`
  )
  rmSync(work, { recursive: true, force: true })
  await Bun.sleep(1_000)
}
