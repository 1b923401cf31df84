/**
 * The child processes of a run: every one started under `setpriv --pdeathsig KILL` (it dies with
 * this process, even on SIGKILL) with a hard timeout, tracked, and killed on exit, on error, on
 * SIGINT/SIGTERM and past the run's time budget; and the run's temporary directory, removed with them.
 */
import type { Subprocess } from "bun"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { root } from "./settings.ts"

type Child = Subprocess<"ignore", "pipe", "pipe">
const children = new Set<Child>()

/** The temporary directory with the databases and the binary, once made. */
let workDir: string | undefined

export const killAll = () => {
  for (const child of children) child.kill("SIGKILL")
}

export const cleanUp = () => {
  killAll()
  if (workDir !== undefined) rmSync(workDir, { recursive: true, force: true })
  workDir = undefined
}

/** Kills every child and removes the work directory on exit, on SIGINT/SIGTERM, and after `budgetMs`. */
export const guard = (budgetMs: number) => {
  process.on("exit", cleanUp)
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.on(signal, () => {
      console.error(`bench: ${signal}, stopping every process it started`)
      process.exit(130)
    })
  }
  setTimeout(() => {
    console.error(`bench: over its time budget of ${budgetMs / 1000} s, stopping every process it started`)
    process.exit(1)
  }, budgetMs).unref()
}

/** The run's temporary directory, removed by `cleanUp`. */
export const makeWorkDir = (): string => {
  workDir = mkdtempSync(join(tmpdir(), "campaign-api-bench-"))
  return workDir
}

/** The last 64 KiB a stream printed, drained in the background so the child never blocks on a full pipe. */
class Output {
  private text = ""
  readonly done: Promise<void>

  constructor(stream: ReadableStream<Uint8Array>) {
    this.done = this.drain(stream)
  }

  private async drain(stream: ReadableStream<Uint8Array>) {
    const decoder = new TextDecoder()
    const reader = stream.getReader()
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) {
      this.text = (this.text + decoder.decode(chunk.value, { stream: true })).slice(-65536)
    }
  }

  toString() {
    return this.text
  }
}

export interface Spawned {
  readonly process: Child
  readonly stdout: Output
  readonly stderr: Output
}

export const spawn = (
  cmd: ReadonlyArray<string>,
  options: { env?: Record<string, string>; timeoutMs: number; stderrFile?: string }
): Spawned => {
  const child = Bun.spawn(["setpriv", "--pdeathsig", "KILL", ...cmd], {
    cwd: root,
    env: { ...process.env, ...options.env },
    stdin: "ignore",
    stdout: "pipe",
    // A server's access log goes to a file, as an operator would keep it; read back at the end.
    stderr: options.stderrFile === undefined ? "pipe" : Bun.file(options.stderrFile),
    timeout: options.timeoutMs,
    killSignal: "SIGKILL"
  })
  children.add(child)
  void child.exited.finally(() => children.delete(child))
  const stderr = options.stderrFile === undefined ? child.stderr as ReadableStream<Uint8Array> : new Response("").body!
  return { process: child, stdout: new Output(child.stdout), stderr: new Output(stderr) }
}

/** Once its output is drained too, so that what it printed is all there. */
export const finished = async (spawned: Spawned): Promise<number> => {
  const exitCode = await spawned.process.exited
  await Promise.all([spawned.stdout.done, spawned.stderr.done])
  return exitCode
}

/** Runs a command to its end; throws with its output when it fails. */
export const runCommand = async (
  cmd: ReadonlyArray<string>,
  options: { env?: Record<string, string>; timeoutMs: number }
): Promise<{ readonly stdout: string; readonly stderr: string }> => {
  const spawned = spawn(cmd, options)
  const exitCode = await finished(spawned)
  if (exitCode !== 0) {
    throw new Error(`${cmd.join(" ")} exited with ${exitCode}:\n${spawned.stderr}${spawned.stdout}`)
  }
  return { stdout: spawned.stdout.toString(), stderr: spawned.stderr.toString() }
}

export const childCpuSeconds = (spawned: Spawned): number => {
  const usage = spawned.process.resourceUsage()
  return usage === undefined ? 0 : Number(usage.cpuTime.user + usage.cpuTime.system) / 1e6
}

/** SIGTERM, then SIGKILL if it has not stopped within 5 s. */
export const stop = async (child: Child) => {
  child.kill("SIGTERM")
  const stopped = await Promise.race([child.exited.then(() => true), Bun.sleep(5000).then(() => false)])
  if (!stopped) {
    child.kill("SIGKILL")
    await child.exited
  }
}
