/**
 * The gate side by side with the Effect 3 service, binary against binary, in one run: both built
 * here, one key made by the Effect 3 binary in its database (which both read), both servers pinned
 * to CPU 1 and wrk to CPU 0, whoami asked by `wrk -t1 -c64 -d5s` in alternating turns, at
 * LOG_LEVEL=warn and then at info. Before any timing, both must answer the same statuses, codes
 * and header names to the same requests. Prints a table per level and writes the figures as JSON.
 *
 *   bun bench.ts [--runs 5] [--seconds 5] [--levels warn,info] [--dir /tmp/e4gate-bench]
 */
import { mkdirSync, readFileSync, rmSync } from "node:fs"
import { join, resolve } from "node:path"

const args = process.argv.slice(2)
const option = (name: string, fallback: string) => {
  const at = args.indexOf(`--${name}`)
  return at === -1 ? fallback : args[at + 1]!
}
const runs = Number(option("runs", "5"))
const seconds = Number(option("seconds", "5"))
const levels = option("levels", "warn,info").split(",")
const dir = resolve(option("dir", "/tmp/e4gate-bench"))
const here = import.meta.dir
const root = resolve(here, "../..")
const brandId = "0b6f8c1e-4f5a-4c2b-9d7e-1a2b3c4d5e6f"

const run = (cmd: Array<string>, cwd: string, env: Record<string, string> = {}) => {
  const result = Bun.spawnSync(cmd, { cwd, env: { ...process.env, ...env }, stdout: "pipe", stderr: "pipe" })
  if (result.exitCode !== 0) {
    throw new Error(`${cmd.join(" ")} exited ${result.exitCode}:\n${result.stderr.toString()}`)
  }
  return result.stdout.toString()
}

for (const tool of ["wrk", "taskset", "curl"]) {
  if (Bun.which(tool) === null) throw new Error(`${tool} is needed (apt-get install -y ${tool})`)
}
rmSync(dir, { recursive: true, force: true })
mkdirSync(dir, { recursive: true })
const e3Binary = join(dir, "campaign-api")
const e4Binary = join(dir, "e4-whoami")
const database = join(dir, "data.sqlite")

console.log(`building into ${dir}`)
run(["bun", "build", "src/main.ts", "--compile", "--bytecode", "--outfile", e3Binary], root)
// Effect 4's modules need ESM output for --bytecode.
run(["bun", "build", "server.ts", "--compile", "--bytecode", "--format", "esm", "--outfile", e4Binary], here)
const created = run(
  [e3Binary, "keys", "create", "--brand", brandId, "--scopes", "campaigns:write", "--name", "bench", "--json"],
  dir,
  { DATABASE_URL: database }
)
const apiKey = (JSON.parse(created.trim().split("\n").at(-1)!) as { apiKey: string }).apiKey

interface Server {
  readonly name: "E3" | "E4"
  readonly url: string
  readonly pid: number
  readonly stop: () => Promise<void>
}

const freePort = () => {
  const listener = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } })
  const port = listener.port
  listener.stop(true)
  return port
}

/**
 * One server on CPU 1. Both get the shipped defaults but the limit: RATE_LIMIT_MAX as the
 * repository's bench sets it (bench/run.ts), so that every timed answer is a 200.
 */
const start = async (name: "E3" | "E4", level: string): Promise<Server> => {
  const port = freePort()
  const url = `http://127.0.0.1:${port}`
  const cmd = name === "E3" ? [e3Binary, "serve"] : [e4Binary]
  const child = Bun.spawn(["taskset", "-c", "1", ...cmd], {
    cwd: dir,
    env: {
      ...process.env,
      PORT: String(port),
      HOST: "127.0.0.1",
      DATABASE_URL: database,
      LOG_LEVEL: level,
      RATE_LIMIT_MAX: "1000000000"
    },
    stdout: Bun.file(join(dir, `${name}-${level}.stdout`)),
    stderr: Bun.file(join(dir, `${name}-${level}.stderr`))
  })
  // The service is ready when /readyz says so (after its warm-up, WARM_UP's default); the gate
  // when whoami answers.
  const probe = name === "E3" ? `${url}/readyz` : `${url}/v1/whoami`
  const startedAt = performance.now()
  for (;;) {
    const status = await fetch(probe, { headers: { authorization: `Bearer ${apiKey}` } }).then(
      async (answer) => (await answer.arrayBuffer(), answer.status),
      () => 0
    )
    if (status === 200) break
    if (performance.now() - startedAt > 60_000) throw new Error(`${name} was not ready within 60 s`)
    await Bun.sleep(50)
  }
  return {
    name,
    url,
    pid: child.pid,
    stop: async () => {
      child.kill("SIGTERM")
      await child.exited
    }
  }
}

const curl = (url: string, extra: Array<string> = []) => {
  const out = Bun.spawnSync(["curl", "-s", "--path-as-is", "-D", "-", ...extra, url]).stdout.toString()
  const [head = "", body = ""] = out.split("\r\n\r\n")
  const lines = head.split("\r\n")
  const status = Number(lines[0]!.split(" ")[1])
  const headers = new Map(lines.slice(1).map((line) => {
    const at = line.indexOf(":")
    return [line.slice(0, at).toLowerCase(), line.slice(at + 1).trim()] as const
  }))
  let code: string | undefined
  try {
    code = (JSON.parse(body) as { code?: string }).code
  } catch {
    code = undefined
  }
  return { status, headers, body, code }
}

/** The requests both must answer alike before anything is timed. */
const checks: ReadonlyArray<{ readonly name: string; readonly path: string; readonly extra: Array<string> }> = [
  { name: "whoami", path: "/v1/whoami", extra: [] },
  { name: "trailing slash", path: "/v1/whoami/", extra: [] },
  { name: "double slash", path: "/v1//whoami", extra: [] },
  { name: "letter case", path: "/V1/WHOAMI", extra: [] },
  { name: "percent-encoding", path: "/v1/%77hoami", extra: [] },
  { name: "semicolon", path: "/v1/whoami;x", extra: [] },
  { name: "dot segment", path: "/v1/./whoami", extra: [] },
  { name: "unknown query", path: "/v1/whoami?x=1", extra: [] },
  { name: "no such route", path: "/nope", extra: [] },
  { name: "wrong method", path: "/v1/whoami", extra: ["-X", "POST"] },
  { name: "other method", path: "/v1/whoami", extra: ["-X", "PROPFIND"] },
  { name: "HEAD", path: "/v1/whoami", extra: ["-I"] },
  { name: "missing key", path: "/v1/whoami", extra: ["--no-auth"] },
  { name: "wrong secret", path: "/v1/whoami", extra: ["--bad-auth"] }
]

const verify = (e3: Server, e4: Server) => {
  const ask = (server: Server, check: (typeof checks)[number]) => {
    const auth = check.extra.includes("--no-auth")
      ? []
      : ["-H", `authorization: Bearer ${check.extra.includes("--bad-auth") ? `${apiKey.slice(0, -4)}0000` : apiKey}`]
    return curl(`${server.url}${check.path}`, [...auth, ...check.extra.filter((x) => !x.startsWith("--"))])
  }
  const varying = new Set(["x-request-id", "date", "ratelimit"])
  let failed = false
  for (const check of checks) {
    const a = ask(e3, check)
    const b = ask(e4, check)
    const names = (answer: typeof a) => [...answer.headers.keys()].sort().join(",")
    const same = a.status === b.status && a.code === b.code && names(a) === names(b) &&
      [...a.headers].every(([name, value]) => varying.has(name) || b.headers.get(name) === value)
    console.log(
      `${same ? "same" : "DIFFERENT"}  ${check.name.padEnd(16)} E3 ${a.status} ${a.code ?? ""}  E4 ${b.status} ${
        b.code ?? ""
      }`
    )
    if (!same) {
      failed = true
      console.log(`  E3 ${JSON.stringify([...a.headers])} ${a.body}\n  E4 ${JSON.stringify([...b.headers])} ${b.body}`)
    }
    if (check.name === "whoami") {
      if (a.body.replace(/"keyId":"[^"]+"/, "") !== b.body.replace(/"keyId":"[^"]+"/, "")) failed = true
      console.log(`\nE3 whoami:\n${[...a.headers].map(([k, v]) => `  ${k}: ${v}`).join("\n")}\n  ${a.body}`)
      console.log(`E4 whoami:\n${[...b.headers].map(([k, v]) => `  ${k}: ${v}`).join("\n")}\n  ${b.body}\n`)
    }
  }
  if (failed) throw new Error("the two servers answer differently: not timed")
}

/** The CPU time a process has used, user and system, in microseconds (/proc/<pid>/stat). */
const ticks = Number(Bun.spawnSync(["getconf", "CLK_TCK"]).stdout.toString().trim() || "100")
const cpuMicros = (pid: number) => {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / ticks
}

/**
 * One wrk run: its throughput and p99, and the server's CPU time per answer, which the other
 * processes of a shared machine disturb much less than the throughput they take a share of.
 */
const wrk = (server: Server) => {
  const url = server.url
  const cpuBefore = cpuMicros(server.pid)
  const out = run(
    [
      "taskset",
      "-c",
      "0",
      "wrk",
      "-t1",
      "-c64",
      `-d${seconds}s`,
      "--latency",
      "-H",
      `Authorization: Bearer ${apiKey}`,
      `${url}/v1/whoami`
    ],
    dir
  )
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(out)![1])
  const p99 = /\s99%\s+([\d.]+)(us|ms|s)/.exec(out)!
  const p99Ms = Number(p99[1]) * (p99[2] === "us" ? 0.001 : p99[2] === "s" ? 1000 : 1)
  const non2xx = Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(out)?.[1] ?? "0")
  if (non2xx > 0) throw new Error(`${non2xx} answers were not 2xx:\n${out}`)
  const requests = Number(/(\d+) requests in/.exec(out)![1])
  return { rps, p99Ms, cpuMicrosPerRequest: (cpuMicros(server.pid) - cpuBefore) / requests }
}

const vmHwmMb = (pid: number) => {
  const status = readFileSync(`/proc/${pid}/status`, "utf8")
  return Number(/VmHWM:\s+(\d+) kB/.exec(status)![1]) / 1024
}

const median = (values: ReadonlyArray<number>) => {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

const results: Record<string, unknown> = {}
for (const level of levels) {
  const e3 = await start("E3", level)
  const e4 = await start("E4", level)
  try {
    if (level === levels[0]) verify(e3, e4)
    const rows: Array<{ e3: ReturnType<typeof wrk>; e4: ReturnType<typeof wrk> }> = []
    for (let i = 0; i < runs; i++) {
      // Alternating which goes first, so that neither always follows the other's load.
      const order = i % 2 === 0 ? [e3, e4] : [e4, e3]
      const row: Partial<{ e3: ReturnType<typeof wrk>; e4: ReturnType<typeof wrk> }> = {}
      for (const server of order) row[server.name === "E3" ? "e3" : "e4"] = wrk(server)
      rows.push(row as { e3: ReturnType<typeof wrk>; e4: ReturnType<typeof wrk> })
      console.log(
        `LOG_LEVEL=${level} run ${i + 1}: E3 ${row.e3!.rps.toFixed(0)} req/s (p99 ${row.e3!.p99Ms.toFixed(2)} ms), E4 ${
          row.e4!.rps.toFixed(0)
        } req/s (p99 ${row.e4!.p99Ms.toFixed(2)} ms), E4/E3 ${(row.e4!.rps / row.e3!.rps).toFixed(3)}; CPU per answer E3 ${
          row.e3!.cpuMicrosPerRequest.toFixed(1)
        } us, E4 ${row.e4!.cpuMicrosPerRequest.toFixed(1)} us, E3/E4 ${
          (row.e3!.cpuMicrosPerRequest / row.e4!.cpuMicrosPerRequest).toFixed(3)
        }`
      )
    }
    const summary = {
      e3Rps: median(rows.map((r) => r.e3.rps)),
      e4Rps: median(rows.map((r) => r.e4.rps)),
      ratio: median(rows.map((r) => r.e4.rps / r.e3.rps)),
      cpuRatio: median(rows.map((r) => r.e3.cpuMicrosPerRequest / r.e4.cpuMicrosPerRequest)),
      e3CpuMicros: median(rows.map((r) => r.e3.cpuMicrosPerRequest)),
      e4CpuMicros: median(rows.map((r) => r.e4.cpuMicrosPerRequest)),
      e3P99Ms: median(rows.map((r) => r.e3.p99Ms)),
      e4P99Ms: median(rows.map((r) => r.e4.p99Ms)),
      e3VmHwmMb: vmHwmMb(e3.pid),
      e4VmHwmMb: vmHwmMb(e4.pid)
    }
    results[level] = { runs: rows, ...summary }
    console.log(
      `\nLOG_LEVEL=${level}, medians of ${runs}: E3 ${summary.e3Rps.toFixed(0)} req/s, E4 ${
        summary.e4Rps.toFixed(0)
      } req/s, E4/E3 ${summary.ratio.toFixed(3)} (of medians ${(summary.e4Rps / summary.e3Rps).toFixed(3)}); p99 E3 ${
        summary.e3P99Ms.toFixed(2)
      } ms, E4 ${summary.e4P99Ms.toFixed(2)} ms; VmHWM E3 ${summary.e3VmHwmMb.toFixed(1)} MB, E4 ${
        summary.e4VmHwmMb.toFixed(1)
      } MB; CPU per answer E3 ${summary.e3CpuMicros.toFixed(1)} us, E4 ${summary.e4CpuMicros.toFixed(1)} us, E3/E4 ${
        summary.cpuRatio.toFixed(3)
      }\n`
    )
  } finally {
    await e3.stop()
    await e4.stop()
  }
}
const file = join(dir, "results.json")
await Bun.write(file, `${JSON.stringify({ date: new Date().toISOString(), runs, seconds, results }, null, 2)}\n`)
console.log(`figures written to ${file}`)
