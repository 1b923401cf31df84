/**
 * What a process and the machine used, from /proc: a process's CPU time, its memory, the time its
 * main thread waited for a CPU, the whole machine's busy time (so that other processes' load can be
 * told apart from the servers'), and the machine a run was made on. Shared by `run.ts`,
 * `analytics.ts` and `readiness.ts`.
 */
import { readFileSync } from "node:fs"
import { cpus, release } from "node:os"
import { join } from "node:path"

const root = join(import.meta.dir, "..", "..")

/** Clock ticks per second of /proc's CPU times (almost always 100). */
const clockTicks = (() => {
  const getconf = Bun.which("getconf")
  return (getconf === null ? 0 : Number(Bun.spawnSync([getconf, "CLK_TCK"]).stdout.toString().trim())) || 100
})()

export const statusKb = (pid: number, field: "VmRSS" | "VmHWM"): number => {
  try {
    const match = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(readFileSync(`/proc/${pid}/status`, "utf8"))
    return match === null ? 0 : Number(match[1])
  } catch {
    return 0
  }
}

/** User + system CPU seconds of the whole process (all its threads). */
export const cpuSeconds = (pid: number): number => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return (Number(fields[11]) + Number(fields[12])) / clockTicks // utime and stime, fields 14 and 15
}

/** Seconds the process's main thread (the server's JavaScript) has waited on a run queue for a CPU. */
export const runQueueSeconds = (pid: number): number =>
  Number(readFileSync(`/proc/${pid}/schedstat`, "utf8").split(" ")[1]) / 1e9

/** Polls VmRSS every 50 ms; `stop` returns the highest value seen, in kB. */
export const sampleRss = (pid: number) => {
  let peak = statusKb(pid, "VmRSS")
  const timer = setInterval(() => {
    peak = Math.max(peak, statusKb(pid, "VmRSS"))
  }, 50)
  return {
    stop: () => {
      clearInterval(timer)
      return Math.max(peak, statusKb(pid, "VmRSS"))
    }
  }
}

/** CPU seconds of the whole machine so far (all cores, every process, ours included): busy, and in all. */
export const machineSeconds = (): { readonly busy: number; readonly total: number } => {
  const fields = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number)
  const [user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0] = fields
  const busy = user + nice + system + irq + softirq + steal
  return { busy: busy / clockTicks, total: (busy + idle + iowait) / clockTicks }
}

/** Busy CPU seconds of the whole machine (all cores, every process, ours included). */
export const machineBusySeconds = (): number => machineSeconds().busy

/** This orchestrating process's own CPU seconds. */
export const ownCpuSeconds = (): number => {
  const usage = process.cpuUsage()
  return (usage.user + usage.system) / 1e6
}

/** CPU the machine uses while this benchmark does nothing (100 = one core). */
export const idleMachineLoadPercent = async (): Promise<number> => {
  const before = machineBusySeconds() - ownCpuSeconds()
  await Bun.sleep(2000)
  return Math.max(0, ((machineBusySeconds() - ownCpuSeconds() - before) / 2) * 100)
}

const firstLine = (cmd: ReadonlyArray<string>): string => {
  const result = Bun.spawnSync([...cmd], { cwd: root })
  return `${result.stdout}${result.stderr}`.trim().split("\n")[0] ?? ""
}

/** The machine and the code a run measures, for its results file. */
export const machine = () => ({
  cpuModel: cpus()[0]?.model ?? "unknown",
  cores: cpus().length,
  memoryMb: Math.round(Number(/^MemTotal:\s+(\d+)/m.exec(readFileSync("/proc/meminfo", "utf8"))?.[1] ?? 0) / 1024),
  kernel: release(),
  bun: Bun.version,
  wrk: firstLine(["wrk", "-v"]),
  commit: firstLine(["git", "rev-parse", "--short", "HEAD"]),
  worktreeDirty: firstLine(["git", "status", "--porcelain"]) !== ""
})
