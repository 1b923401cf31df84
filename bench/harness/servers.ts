/**
 * The servers a run measures: the single binary built as it is deployed, each server on a database
 * of its own with the bench's key and records, pinned to the servers' CPU on a free port, measured
 * once ready as a balancer would send it traffic.
 */
import { Database } from "bun:sqlite"
import { statSync } from "node:fs"
import { join } from "node:path"
import {
  apiKeyOf,
  buildArgs,
  compileArgs,
  freePort,
  keysCreateArgs,
  seedPages,
  seedReads,
  waitForReady,
  whoamiOk
} from "../common.ts"
import { runCommand, spawn, type Spawned } from "./processes.ts"
import { budgetMs, bun, runsPages, serverCpu } from "./settings.ts"

/** Polls whoami every `intervalMs` until a 200; the milliseconds since `startedAt`. */
export const waitForWhoami = async (
  spawned: Spawned,
  url: string,
  apiKey: string,
  options: { readonly startedAt: number; readonly intervalMs: number; readonly timeoutMs: number }
): Promise<number> => {
  while (!(await whoamiOk(url, apiKey))) {
    if (spawned.process.exitCode !== null) {
      throw new Error(`the server exited with ${spawned.process.exitCode} before answering:\n${spawned.stderr}`)
    }
    if (performance.now() - options.startedAt > options.timeoutMs) {
      throw new Error(`no 200 from ${url}/v1/whoami within ${options.timeoutMs} ms:\n${spawned.stderr}`)
    }
    await Bun.sleep(options.intervalMs)
  }
  return performance.now() - options.startedAt
}

export type ServerName = "service" | "service-info" | "baseline" | "metrics-off" | "metrics-on" | "against"

export interface Server {
  readonly name: ServerName
  readonly spawned: Spawned
  readonly pid: number
  readonly url: string
  readonly apiKey: string
  readonly databaseFile: string
  readonly startupMs: number
}

export const baselineCommand: ReadonlyArray<string> = [bun, "bench/baseline.ts"]

/** A rate limit too high to refuse anything: the bench measures the work, not the limit. */
export const serviceEnv = (logLevel: string): Record<string, string> => ({
  RATE_LIMIT_MAX: "1000000000",
  // The bench opens hundreds of connections from one address, run after run, and a closed one
  // counts for up to 34 s: the limit one client is held to would close and refuse them, as it
  // should for one client (the hostile runner measures that).
  CONNECTIONS_PER_ADDRESS: "1000000",
  LOG_LEVEL: logLevel
})

/** Starts a server on a free port, pinned to the servers' CPU, without waiting for it. */
export const spawnServer = (
  cmd: ReadonlyArray<string>,
  env: Record<string, string>,
  databaseFile: string,
  stderrFile?: string
): { readonly spawned: Spawned; readonly url: string } => {
  const port = freePort()
  const spawned = spawn(["taskset", "-c", serverCpu, ...cmd], {
    // Stopped between scenarios: no balancer to wait for (docs/operators.md, Operating it: Shutdown).
    env: { SHUTDOWN_DELAY_SECONDS: "0", ...env, PORT: String(port), HOST: "127.0.0.1", DATABASE_URL: databaseFile },
    timeoutMs: budgetMs,
    ...(stderrFile === undefined ? {} : { stderrFile })
  })
  return { spawned, url: `http://127.0.0.1:${port}` }
}

export const startServer = async (
  name: ServerName,
  cmd: ReadonlyArray<string>,
  env: Record<string, string>,
  databaseFile: string,
  apiKey: string,
  stderrFile?: string
): Promise<Server> => {
  const startedAt = performance.now()
  const { spawned, url } = spawnServer(cmd, env, databaseFile, stderrFile)
  const startupMs = await waitForWhoami(spawned, url, apiKey, { startedAt, intervalMs: 20, timeoutMs: 60_000 })
  // Measured once ready, as a balancer sends traffic: not while the server warms up (docs/operators.md, Operating it: Start-up).
  await waitForReady(url, { intervalMs: 20, startedAt, timeoutMs: 60_000 })
  console.log(
    `${name} up on ${url} (pid ${spawned.process.pid}, CPU ${serverCpu}) after ${
      startupMs.toFixed(0)
    } ms, ready after ${(performance.now() - startedAt).toFixed(0)} ms`
  )
  return { name, spawned, pid: spawned.process.pid, url, apiKey, databaseFile, startupMs }
}

/** `keys create --json` through the given command line; the plaintext key. */
export const createKey = async (cli: ReadonlyArray<string>, databaseFile: string): Promise<string> =>
  apiKeyOf(
    (await runCommand([...cli, ...keysCreateArgs], { env: { DATABASE_URL: databaseFile }, timeoutMs: 60_000 })).stdout
  )

/** The records every server's database holds before it starts: the reads', and the pages' when a page scenario runs. */
export const seed = (databaseFile: string) => {
  seedReads(databaseFile)
  if (runsPages) seedPages(databaseFile)
}

/** A database made by `cli` (so it has that build's migrations), with the bench's key and records; the key. */
export const prepareDatabase = async (cli: ReadonlyArray<string>, databaseFile: string): Promise<string> => {
  const apiKey = await createKey(cli, databaseFile)
  seed(databaseFile)
  return apiKey
}

/** `bun build --compile` of `entry` into `outfile`, as the service is compiled. */
export const compile = (entry: string, outfile: string) =>
  runCommand(compileArgs(entry, outfile, bun), { timeoutMs: 180_000 })

/** The service's single binary built into `dir`: its path, its build's seconds and its size. */
export const buildBinary = async (dir: string) => {
  const binary = join(dir, "campaign-api")
  const buildStarted = performance.now()
  await runCommand(buildArgs(binary, bun), { timeoutMs: 180_000 })
  return { binary, buildSeconds: (performance.now() - buildStarted) / 1000, sizeBytes: statSync(binary).size }
}

export const countActivations = (databaseFile: string): number => {
  const db = new Database(databaseFile, { readonly: true })
  try {
    return db.query<{ n: number }, []>("SELECT count(*) AS n FROM activations").get()!.n
  } finally {
    db.close()
  }
}
