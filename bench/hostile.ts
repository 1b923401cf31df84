/**
 * The hostile runner: attacks the service from loopback as an outsider would, and prints what each
 * cost it. Every attack is bounded in time and count and talks to 127.0.0.1 only; the server is
 * started here on a temporary database and stopped at the end.
 *
 *   bun bench/hostile.ts                     # all attacks against `bun src/main.ts serve`
 *   HOSTILE_ATTACKS=pipeline,timing bun bench/hostile.ts
 *   HOSTILE_SERVER="dist/campaign-api serve" bun bench/hostile.ts   # the binary instead
 *   HOSTILE_BACKEND=postgres bun bench/hostile.ts   # on PostgreSQL + Redis, as bench/shared.ts runs it
 *                                                   # POSTGRES_URL=postgres://postgres@127.0.0.1:5432 REDIS_URL=redis://127.0.0.1:6379
 */
import { SQL } from "bun"
import { Database } from "bun:sqlite"
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync } from "node:fs"
import { connect, type Socket } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { campaign, fillSqlite } from "./campaigns.ts"
import { activatePath, apiKeyOf, brandId, freePort, wrkArgs, wrkResultOf } from "./common.ts"

const root = new URL("..", import.meta.url).pathname
const work = mkdtempSync(join(tmpdir(), "campaign-api-hostile-"))
const onPostgres = process.env["HOSTILE_BACKEND"] === "postgres"
if (!["postgres", "sqlite", undefined].includes(process.env["HOSTILE_BACKEND"])) {
  throw new Error(`HOSTILE_BACKEND takes sqlite (the default) or postgres, not ${process.env["HOSTILE_BACKEND"]}`)
}
const postgresServer = process.env["POSTGRES_URL"] ?? "postgres://postgres@127.0.0.1:5432"
const redisUrl = process.env["REDIS_URL"] ?? "redis://127.0.0.1:6379"
const postgresDatabase = `hostile_${Date.now().toString(36)}`
const database = onPostgres ? `${postgresServer}/${postgresDatabase}` : join(work, "db.sqlite")
const logFile = join(work, "server.log")
const serverCommand = (process.env["HOSTILE_SERVER"] ?? `${process.execPath} src/main.ts serve`).split(" ")
const wanted = (process.env["HOSTILE_ATTACKS"] ?? "").split(",").map((a) => a.trim()).filter((a) => a !== "")
const budgetMs = 10 * 60_000
/** The bound of docs/operators.md for a key created with the command line to reach a server on PostgreSQL (Running several instances). */
const keyPropagationMs = 1_000

const children: Array<ReturnType<typeof Bun.spawn>> = []
const cleanUp = () => {
  for (const child of children) child.kill("SIGKILL")
  rmSync(work, { recursive: true, force: true })
}
process.on("exit", cleanUp)
setTimeout(() => {
  console.error(`hostile: over its budget of ${budgetMs / 1000} s, stopping`)
  process.exit(1)
}, budgetMs).unref()

const cli = (args: Array<string>) => {
  const result = Bun.spawnSync([...serverCommand.slice(0, -1), ...args], {
    cwd: root,
    env: { ...process.env, DATABASE_URL: database }
  })
  if (result.exitCode !== 0) throw new Error(`${args.join(" ")}: ${result.stderr}`)
  return result.stdout.toString()
}

const createKey = (brandId: string = crypto.randomUUID()) =>
  JSON.parse(cli(["keys", "create", "--brand", brandId, "--scopes", "campaigns:write", "--json"])) as {
    apiKey: string
    keyId: string
  }

interface Server {
  readonly url: string
  readonly port: number
  readonly pid: number
  /** Null while it runs. */
  readonly exitCode: () => number | null
  readonly stop: () => Promise<void>
}

/** Starts the server with `env` on top of the runner's settings, under `under` (`prlimit ...`) when given. */
const startServer = async (env: Record<string, string> = {}, under: ReadonlyArray<string> = []): Promise<Server> => {
  const port = freePort()
  const child = Bun.spawn(["taskset", "-c", "1", ...under, ...serverCommand], {
    cwd: root,
    env: {
      ...process.env,
      DATABASE_URL: database,
      ...(onPostgres ? { REDIS_URL: redisUrl } : {}),
      HOST: "127.0.0.1",
      PORT: String(port),
      LOG_LEVEL: "info",
      SHUTDOWN_DELAY_SECONDS: "0",
      ...env
    },
    stdout: "ignore",
    stderr: Bun.file(logFile)
  })
  children.push(child)
  const url = `http://127.0.0.1:${port}`
  const started = performance.now()
  for (;;) {
    try {
      if ((await fetch(`${url}/healthz`)).ok) break
    } catch {
      // not listening yet
    }
    if (performance.now() - started > 60_000) throw new Error("the server did not start")
    await Bun.sleep(20)
  }
  return {
    url,
    port,
    pid: child.pid,
    exitCode: () => child.exitCode,
    stop: async () => {
      child.kill("SIGTERM")
      await child.exited
    }
  }
}

const rssMb = (pid: number) =>
  Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0) / 1024
const cpuSeconds = (pid: number) => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return (Number(fields[11]) + Number(fields[12])) / 100
}

const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!
const ms = (value: number) => `${value.toFixed(1)} ms`

/** A legitimate client's whoami latency, one request every 20 ms on a fresh connection each time. */
const probeWhoami = async (server: Server, apiKey: string, durationMs: number) => {
  const latencies: Array<number> = []
  const until = performance.now() + durationMs
  while (performance.now() < until) {
    const started = performance.now()
    const response = await fetch(`${server.url}/v1/whoami`, {
      headers: { authorization: `Bearer ${apiKey}`, connection: "close" },
      signal: AbortSignal.timeout(10_000)
    }).catch(() => undefined)
    await response?.arrayBuffer()
    latencies.push(performance.now() - started)
    await Bun.sleep(20)
  }
  latencies.sort((a, b) => a - b)
  return { p50: percentile(latencies, 0.5), p99: percentile(latencies, 0.99), max: latencies.at(-1)! }
}

const rawSocket = (port: number) =>
  new Promise<Socket>((resolve, reject) => {
    const socket = connect(port, "127.0.0.1")
    socket.once("connect", () => resolve(socket))
    socket.once("error", reject)
  })

/** Mann-Whitney U test of two samples: z of the difference of their ranks. */
const mannWhitneyZ = (a: ReadonlyArray<number>, b: ReadonlyArray<number>) => {
  const all = [...a.map((value) => ({ value, from: 0 })), ...b.map((value) => ({ value, from: 1 }))]
    .sort((x, y) => x.value - y.value)
  let rankA = 0
  for (let i = 0; i < all.length;) {
    let j = i
    while (j < all.length && all[j]!.value === all[i]!.value) j++
    const rank = (i + j + 1) / 2
    for (let k = i; k < j; k++) if (all[k]!.from === 0) rankA += rank
    i = j
  }
  const u = rankA - (a.length * (a.length + 1)) / 2
  const mean = (a.length * b.length) / 2
  const sd = Math.sqrt((a.length * b.length * (a.length + b.length + 1)) / 12)
  return (u - mean) / sd
}

/**
 * Transactions PostgreSQL has counted in the service's database (`pg_stat_database`; each of the
 * service's statements outside a transaction is one), read from another database so the reading
 * does not count itself.
 */
const transactionsSoFar = async () => {
  const sql = new SQL(`${postgresServer}/postgres`, { max: 1 })
  try {
    const rows =
      await sql`SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = ${postgresDatabase}`
    return Number(rows[0].n)
  } finally {
    await sql.close()
  }
}
/**
 * How long PostgreSQL (15) may keep a backend's counts before they show: at most a second while it
 * is busy, up to ten once it goes idle.
 */
const statisticsLagMs = 11_000

type Attack = (server: Server, key: { apiKey: string; keyId: string }) => Promise<string>

/** The descriptor limit the held-connection attacks start their server under (soft and hard: Bun raises the soft one). */
const heldNofile = Number(process.env["HOSTILE_NOFILE"] ?? 4_096)
const heldSeconds = Number(process.env["HOSTILE_HOLD_SECONDS"] ?? 30)

/** A client's whoami on a new connection every 100 ms for PROBE_SECONDS: how many were answered 200 within 1 s. */
const answeredWithin1s = `
const until = performance.now() + Number(process.env.PROBE_SECONDS) * 1000
let asked = 0
let answered = 0
while (performance.now() < until) {
  asked++
  try {
    const response = await fetch(process.env.PROBE_URL, {
      headers: { authorization: "Bearer " + process.env.PROBE_KEY, connection: "close" },
      signal: AbortSignal.timeout(1000)
    })
    await response.arrayBuffer()
    if (response.status === 200) answered++
  } catch {}
  await Bun.sleep(100)
}
console.log(JSON.stringify({ asked, answered }))
`

/**
 * `perAddress` connections from each of `addresses` (loopback addresses of their own, 127.0.0.0/8
 * being all local on Linux), each sending `GET /healthz` without a key as it opens and every 15 s
 * after, and opened again a second after the server closes it, as a client set on holding them
 * would; meanwhile a client on 127.0.0.1, a process of its own, asks whoami on a new connection
 * every 100 ms with a 1 s timeout. The server runs under `prlimit --nofile=HOSTILE_NOFILE` (metrics
 * on or off), for HOSTILE_HOLD_SECONDS after every connection was first opened. What it cost: how many of the
 * client's requests were answered 200 within 1 s, the server's descriptors, what the holders were
 * answered, and whether the server is still running.
 */
const holdConnections = (
  addresses: ReadonlyArray<string>,
  perAddress: number,
  { metrics }: { readonly metrics: boolean }
): Attack =>
async (_, key) => {
  // The client's key is never rate limited: each of its requests is answered 200 when it is answered.
  const env = { LOG_LEVEL: "warn", RATE_LIMIT_MAX: "1000000" }
  const server = await startServer(metrics ? { ...env, METRICS_PORT: String(freePort()) } : env, [
    "prlimit",
    `--nofile=${heldNofile}:${heldNofile}`
  ])
  try {
    let holding = true
    const statuses: Record<string, number> = {}
    let opened = 0
    let closedByServer = 0
    const sockets = new Set<Socket>()
    const healthz = "GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n"
    const hold = (localAddress: string): Promise<void> =>
      new Promise((resolve) => {
        const socket = connect({ port: server.port, host: "127.0.0.1", localAddress })
        // A connect the server's full backlog leaves unanswered is not waited for.
        setTimeout(resolve, 5_000)
        socket.on("connect", () => {
          opened++
          sockets.add(socket)
          socket.write(healthz)
          resolve()
        })
        socket.on("data", (data: Buffer) => {
          for (const [, status] of data.toString("latin1").matchAll(/HTTP\/1\.1 (\d{3})/g)) {
            statuses[status!] = (statuses[status!] ?? 0) + 1
          }
        })
        socket.on("error", () => {})
        socket.on("close", () => {
          const wasOpen = sockets.delete(socket)
          if (wasOpen) closedByServer++
          resolve()
          if (holding) setTimeout(() => void hold(localAddress), 1_000)
        })
      })
    for (const address of addresses) {
      // In batches: a connect each at once would fill the listen backlog before the server accepts.
      for (let i = 0; i < perAddress; i += 100) {
        await Promise.all(Array.from({ length: Math.min(100, perAddress - i) }, () => hold(address)))
      }
    }
    const keepSending = setInterval(() => {
      for (const socket of sockets) socket.write(healthz)
    }, 15_000)
    let maxDescriptors = 0
    const countDescriptors = setInterval(() => {
      try {
        maxDescriptors = Math.max(maxDescriptors, readdirSync(`/proc/${server.pid}/fd`).length)
      } catch {
        // the server has exited
      }
    }, 500)
    const cpuBefore = cpuSeconds(server.pid)
    // The client in a process of its own, on CPU 0: the holders' churn keeps this one's event loop busy.
    const probe = Bun.spawn(["taskset", "-c", "0", process.execPath, "-e", answeredWithin1s], {
      env: {
        ...process.env,
        PROBE_URL: `${server.url}/v1/whoami`,
        PROBE_KEY: key.apiKey,
        PROBE_SECONDS: String(heldSeconds)
      },
      stdout: "pipe"
    })
    const { answered, asked } = JSON.parse(await new Response(probe.stdout).text()) as {
      answered: number
      asked: number
    }
    const cpu = server.exitCode() === null ? ((cpuSeconds(server.pid) - cpuBefore) / heldSeconds) * 100 : Number.NaN
    holding = false
    clearInterval(keepSending)
    clearInterval(countDescriptors)
    for (const socket of sockets) socket.destroy()
    const alive = server.exitCode() === null
    const holders = Object.entries(statuses).map(([status, n]) => `${n} × ${status}`).join(", ") || "nothing"
    return [
      `${addresses.length} × ${perAddress} connections held from ${addresses.join(", ")}`,
      `under --nofile=${heldNofile}, metrics ${metrics ? "on" : "off"}:`,
      `a client on 127.0.0.1 answered 200 within 1 s ${answered} times of ${asked};`,
      `server descriptors up to ${maxDescriptors}, CPU ${cpu.toFixed(0)} % of a core;`,
      `holders answered ${holders}, ${opened} connections opened, ${closedByServer} closed by the server;`,
      alive ? "the server still runs" : `the server EXITED with ${server.exitCode()}`
    ].join(" ")
  } finally {
    await server.stop()
  }
}

/** How many activations of `brandId` the database holds. */
const activationsOf = async (brandId: string): Promise<number> => {
  if (!onPostgres) {
    const db = new Database(database, { readonly: true })
    try {
      return db.query<{ n: number }, [string]>("SELECT COUNT(*) AS n FROM activations WHERE brand_id = ?").get(brandId)!
        .n
    } finally {
      db.close()
    }
  }
  const sql = new SQL(database, { max: 1 })
  try {
    return Number((await sql`SELECT COUNT(*) AS n FROM activations WHERE brand_id = ${brandId}`)[0].n)
  } finally {
    await sql.close()
  }
}

/**
 * The descriptors the server holds for connections from `address`: its open sockets (/proc/<pid>/fd)
 * that the kernel's table (/proc/net/tcp; a loopback address in little-endian hex) lists with that
 * peer, a socket in TIME_WAIT or closed by the server and not yet by its peer holding none.
 */
const descriptorsFrom = (server: Server, address: string): number => {
  const inodes = new Set<string>()
  for (const fd of readdirSync(`/proc/${server.pid}/fd`)) {
    try {
      const target = readlinkSync(`/proc/${server.pid}/fd/${fd}`)
      if (target.startsWith("socket:[")) inodes.add(target.slice(8, -1))
    } catch {
      // closed meanwhile
    }
  }
  const remote = address.split(".").reverse().map((part) => Number(part).toString(16).padStart(2, "0")).join("")
    .toUpperCase()
  let n = 0
  for (const line of readFileSync("/proc/net/tcp", "utf8").split("\n")) {
    const fields = line.trim().split(/\s+/)
    if (fields[2]?.startsWith(`${remote}:`) && inodes.has(fields[9]!)) n++
  }
  return n
}

/**
 * Item 1 of the second guard: a victim on 127.0.0.2 activates over 16 keep-alive connections of its
 * own (a pause of 0.2–1.5 s after each answer, so that each is often idle) and 8 fetch loops, first
 * alone for 10 s, then for 10 s while an attacker on 127.0.0.3 holds 1,100 connections that sent a
 * `GET /healthz` (past its limit of 1,024). What the victim saw in each phase: its connections
 * closed by the server, activations sent without an answer, fetches that failed; and whether every
 * answer is a row.
 */
const keepAliveVictim: Attack = async () => {
  const server = await startServer({ LOG_LEVEL: "warn", RATE_LIMIT_MAX: "1000000" })
  const brandId = crypto.randomUUID()
  const victim = createKey(brandId)
  try {
    const body = JSON.stringify({ socialUsername: "@victim" })
    const request = () =>
      `POST ${activatePath} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${victim.apiKey}\r\n` +
      `idempotency-key: ${crypto.randomUUID()}\r\ncontent-type: application/json\r\n` +
      `content-length: ${body.length}\r\n\r\n${body}`
    let phase = { closedByServer: 0, unanswered: 0, answered: 0, fetchFailed: 0, fetched: 0 }
    let running = true
    const keepAlive = async () => {
      while (running) {
        const socket = await new Promise<Socket>((resolve, reject) => {
          const opened = connect({ port: server.port, host: "127.0.0.1", localAddress: "127.0.0.2" })
          opened.once("connect", () => resolve(opened))
          opened.once("error", reject)
        }).catch(() => undefined)
        if (socket === undefined) continue
        let waiting: ((answered: boolean) => void) | undefined
        let closed = false
        socket.on("data", (data: Buffer) => {
          if (data.toString("latin1").startsWith("HTTP/1.1 200")) waiting?.(true)
        })
        socket.on("error", () => {})
        socket.on("close", () => {
          closed = true
          waiting?.(false)
        })
        while (running && !closed) {
          const answered = await new Promise<boolean>((resolve) => {
            waiting = resolve
            socket.write(request())
          })
          waiting = undefined
          if (answered) phase.answered++
          else phase.unanswered++
          if (!closed) await Bun.sleep(200 + Math.random() * 1_300)
        }
        if (running) phase.closedByServer++
        socket.destroy()
      }
    }
    const fetching = async () => {
      while (running) {
        try {
          const response = await fetch(`${server.url}${activatePath}`, {
            method: "POST",
            headers: {
              authorization: `Bearer ${victim.apiKey}`,
              "idempotency-key": crypto.randomUUID(),
              "content-type": "application/json"
            },
            body
          })
          await response.arrayBuffer()
          if (response.status === 200) phase.fetched++
          else phase.fetchFailed++
        } catch {
          phase.fetchFailed++
        }
        await Bun.sleep(50)
      }
    }
    const loops = [...Array.from({ length: 16 }, keepAlive), ...Array.from({ length: 8 }, fetching)]
    await Bun.sleep(10_000)
    const alone = phase
    phase = { closedByServer: 0, unanswered: 0, answered: 0, fetchFailed: 0, fetched: 0 }
    // The attacker: 1,100 connections, each a GET /healthz, held, and opened again when closed.
    const held = new Set<Socket>()
    const attackerAnswers: Record<string, number> = {}
    let attacking = true
    const hold = () =>
      new Promise<void>((resolve) => {
        const socket = connect({ port: server.port, host: "127.0.0.1", localAddress: "127.0.0.3" })
        held.add(socket)
        socket.on("connect", () => {
          socket.write("GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
          resolve()
        })
        socket.on("data", (data: Buffer) => {
          const status = data.toString("latin1").slice(9, 12)
          attackerAnswers[status] = (attackerAnswers[status] ?? 0) + 1
        })
        socket.on("error", () => resolve())
        socket.on("close", () => {
          held.delete(socket)
          if (attacking) setTimeout(() => void hold(), 100)
        })
      })
    for (let i = 0; i < 1_100; i += 100) await Promise.all(Array.from({ length: 100 }, hold))
    await Bun.sleep(10_000)
    const attacked = phase
    running = false
    attacking = false
    for (const socket of held) socket.destroy()
    await Promise.all(loops)
    const rows = await activationsOf(brandId)
    const answers = alone.answered + alone.fetched + attacked.answered + attacked.fetched
    const said = (p: typeof alone) =>
      `${p.closedByServer} of its keep-alive connections closed by the server, ${p.unanswered} activations unanswered ` +
      `(${p.answered} answered), ${p.fetchFailed} fetches failed (${p.fetched} answered 200)`
    const attacker = Object.entries(attackerAnswers).map(([status, n]) => `${n} × ${status}`).join(", ")
    return `alone: ${said(alone)}; with 1,100 connections held from 127.0.0.3 (answered ${attacker}): ${
      said(attacked)
    }; ${rows} rows for ${answers} answers`
  } finally {
    await server.stop()
  }
}

/**
 * Item 2 of the second guard: from 127.0.0.4, 600 new connections a second for 11 s, each sending
 * one `GET /healthz` and, once answered, half of a second request, then holding it; meanwhile a
 * client on 127.0.0.1 asks whoami on a new connection every 100 ms with a 1 s timeout. What it
 * cost: how many of the client's requests were answered 200 within 1 s, and the most descriptors
 * the server held for connections from 127.0.0.4 (sampled every 250 ms), against its limit.
 */
const connectionChurn: Attack = async (_, key) => {
  const server = await startServer({ LOG_LEVEL: "warn", RATE_LIMIT_MAX: "1000000" })
  try {
    const attackSeconds = 11
    const sockets = new Set<Socket>()
    const statuses: Record<string, number> = {}
    let opened = 0
    const open = () => {
      const socket = connect({ port: server.port, host: "127.0.0.1", localAddress: "127.0.0.4" })
      sockets.add(socket)
      let answered = false
      socket.on("connect", () => {
        opened++
        socket.write("GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
      })
      socket.on("data", (data: Buffer) => {
        const status = data.toString("latin1").slice(9, 12)
        statuses[status] = (statuses[status] ?? 0) + 1
        if (!answered) socket.write("GET /healthz HTTP/1.1\r\nho")
        answered = true
      })
      socket.on("error", () => {})
      socket.on("close", () => sockets.delete(socket))
    }
    let most = 0
    const sample = setInterval(() => {
      most = Math.max(most, descriptorsFrom(server, "127.0.0.4"))
    }, 250)
    const probe = Bun.spawn(["taskset", "-c", "0", process.execPath, "-e", answeredWithin1s], {
      env: {
        ...process.env,
        PROBE_URL: `${server.url}/v1/whoami`,
        PROBE_KEY: key.apiKey,
        PROBE_SECONDS: String(attackSeconds)
      },
      stdout: "pipe"
    })
    // 600 a second, caught up on every tick of 10 ms.
    const started = performance.now()
    let attempted = 0
    const churn = setInterval(() => {
      const due = Math.min(attackSeconds * 600, Math.floor(((performance.now() - started) / 1000) * 600))
      for (; attempted < due; attempted++) open()
    }, 10)
    const { answered, asked } = JSON.parse(await new Response(probe.stdout).text()) as {
      answered: number
      asked: number
    }
    clearInterval(churn)
    clearInterval(sample)
    for (const socket of sockets) socket.destroy()
    const seen = Object.entries(statuses).map(([status, n]) => `${n} × ${status}`).join(", ")
    return `600 new connections a second from 127.0.0.4 for ${attackSeconds} s, each a request and half of ` +
      `another (${opened} opened, answered ${seen}): at most ${most} held by the server from 127.0.0.4 ` +
      `(limit 1,024); a client on 127.0.0.1 answered 200 within 1 s ${answered} times of ${asked} (${
        ((answered / asked) * 100).toFixed(1)
      } %)`
  } finally {
    await server.stop()
  }
}

/**
 * The widest campaign a brand can make at 1,000,000 activations (`widest` in bench/campaigns.ts:
 * 36,553 entries, its whole answer about a second on SQLite) on a SQLite file of its own, seeded
 * once for the analytics attacks and upgraded by the server's own first command, with a key that
 * reads it and one of another brand.
 */
let widestCampaign: Promise<{ readonly database: string; readonly analyst: string; readonly other: string }> | undefined
const widest = () =>
  widestCampaign ??= (async () => {
    const file = join(work, "widest.sqlite")
    await fillSqlite(file, "widest", 1_000_000)
    const keyOn = (brand: string, scopes: string) => {
      const created = Bun.spawnSync([
        ...serverCommand.slice(0, -1),
        ...["keys", "create", "--brand", brand, "--scopes", scopes, "--json"]
      ], { cwd: root, env: { ...process.env, DATABASE_URL: file } })
      if (created.exitCode !== 0) throw new Error(`keys create on the widest campaign: ${created.stderr}`)
      return apiKeyOf(created.stdout.toString())
    }
    // The first upgrades the file: the counts of its activations are filled then.
    return {
      database: file,
      analyst: keyOn(brandId, "analytics:read"),
      other: keyOn(crypto.randomUUID(), "campaigns:read")
    }
  })()

/**
 * An analytics call of the widest campaign on a connection of its own, dropped (the connection
 * closed) `dropAfterMs` after it was sent, whatever was answered by then: the status it got, or
 * `none`.
 */
const droppedCall = (port: number, apiKey: string, dropAfterMs: number, headers = ""): Promise<string> =>
  new Promise((resolve) => {
    let answer = ""
    const socket = connect(port, "127.0.0.1")
    socket.on("error", () => {})
    socket.on("data", (data: Buffer) => {
      if (answer.length < 16) answer += data.toString("latin1")
    })
    socket.write(
      `GET /v1/campaigns/${campaign}/analytics HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${apiKey}\r\n${headers}\r\n`
    )
    setTimeout(() => {
      socket.destroy()
      resolve(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? "none")
    }, dropAfterMs)
  })

const tally = (statuses: ReadonlyArray<string>) => {
  const counts = new Map<string, number>()
  for (const status of statuses) counts.set(status, (counts.get(status) ?? 0) + 1)
  return [...counts].map(([status, n]) => `${n} × ${status}`).join(", ")
}

/**
 * The CPU seconds a process spends from `from` (its CPU time then) until it is quiet again, under
 * 20 ms in a second, and how long after `startedAt` that was; or at `limitMs`, if never.
 */
const cpuUntilQuiet = async (pid: number, from: number, startedAt: number, limitMs = 180_000) => {
  let last = cpuSeconds(pid)
  for (;;) {
    await Bun.sleep(1_000)
    const now = cpuSeconds(pid)
    const elapsed = performance.now() - startedAt
    if (now - last < 0.02 || elapsed > limitMs) return { cpu: now - from, quietAfterSeconds: elapsed / 1000 - 1 }
    last = now
  }
}

/** Whether a figure met its floor, as the attack's line says it. */
const verdict = (met: boolean) => (met ? "PASS" : "FAIL")

/**
 * 20 calls of the widest campaign at once, each dropped after 0.5 s: what the server spends on calls
 * nobody will read, from the first until it is quiet again (floor: under 3 s of CPU).
 */
const analyticsDropped: Attack = async () => {
  const { analyst, database } = await widest()
  const server = await startServer({ DATABASE_URL: database, RATE_LIMIT_MAX: "1000000" })
  try {
    const wholeStarted = performance.now()
    const whole = await fetch(`${server.url}/v1/campaigns/${campaign}/analytics`, {
      headers: { authorization: `Bearer ${analyst}` }
    })
    const entries = await whole.json() as {
      analytics: { activationsByDay: Array<unknown>; plannedPostsByDay: Array<unknown> }
    }
    const wholeMs = performance.now() - wholeStarted
    await Bun.sleep(2_000)
    const from = cpuSeconds(server.pid)
    const startedAt = performance.now()
    const statuses = await Promise.all(Array.from({ length: 20 }, () => droppedCall(server.port, analyst, 500)))
    const { cpu, quietAfterSeconds } = await cpuUntilQuiet(server.pid, from, startedAt)
    return `20 calls of the widest campaign (a whole answer: ${whole.status}, ${
      entries.analytics.activationsByDay.length + entries.analytics.plannedPostsByDay.length
    } entries in ${ms(wholeMs)}), each dropped after 0.5 s, answered by then ${tally(statuses)}: ` +
      `the server spent ${cpu.toFixed(2)} s of CPU on them, quiet ${quietAfterSeconds.toFixed(1)} s after the first ` +
      `(floor: under 3 s of CPU: ${verdict(cpu < 3)})`
  } finally {
    await server.stop()
  }
}

/**
 * Behind a trusted proxy (the runner on 127.0.0.1, CONNECTIONS_PER_PROXY=50): 50 calls of the widest
 * campaign at once and one a second after them for 40 s, each on a connection of its own dropped after
 * 1 s, while another brand's whoami through the same proxy is asked 20 times, every 2 s, each on a new
 * connection with a 5 s timeout (floor: at least 19 of the 20 answered 200).
 */
const analyticsProxy: Attack = async () => {
  const { analyst, database, other } = await widest()
  const server = await startServer({
    DATABASE_URL: database,
    RATE_LIMIT_MAX: "1000000",
    CONNECTIONS_PER_PROXY: "50",
    TRUSTED_PROXIES: "127.0.0.1"
  })
  try {
    const client = (n: number) => `x-forwarded-for: 203.0.113.${(n % 250) + 1}\r\n`
    const startedAt = performance.now()
    const runMs = 40_000
    const calls = Array.from({ length: 50 }, (_, n) => droppedCall(server.port, analyst, 1_000, client(n)))
    const arrivals = (async () => {
      for (let n = 50; performance.now() - startedAt < runMs; n++) {
        await Bun.sleep(1_000)
        calls.push(droppedCall(server.port, analyst, 1_000, client(n)))
      }
    })()
    const probed: Array<string> = []
    for (let i = 0; i < 20; i++) {
      await Bun.sleep(Math.max(0, startedAt + 1_000 + i * 2_000 - performance.now()))
      const answer = await fetch(`${server.url}/v1/whoami`, {
        headers: { authorization: `Bearer ${other}`, "x-forwarded-for": "198.51.100.7", connection: "close" },
        signal: AbortSignal.timeout(5_000)
      }).then(async (response) => {
        await response.arrayBuffer()
        return String(response.status)
      }, () => "no answer in 5 s")
      probed.push(answer)
    }
    await arrivals
    const statuses = await Promise.all(calls)
    const answered = probed.filter((status) => status === "200").length
    return `behind a trusted proxy with CONNECTIONS_PER_PROXY=50, ${statuses.length} calls of the widest campaign ` +
      `(50 at once, then one a second), each dropped after 1 s, answered by then ${tally(statuses)}; ` +
      `another brand's whoami through the same proxy: ${tally(probed)} ` +
      `(floor: at least 19 of 20 answered 200: ${verdict(answered >= 19)})`
  } finally {
    await server.stop()
  }
}

const attacks: Record<string, Attack> = {
  /** 1: slow readers of /docs that never read the 3 MB page. */
  "docs-readers": async (server, key) => {
    const before = rssMb(server.pid)
    const sockets: Array<Socket> = []
    for (let i = 0; i < 2_000; i++) {
      const socket = await rawSocket(server.port)
      socket.pause()
      socket.on("error", () => {})
      socket.write("GET /docs HTTP/1.1\r\nhost: x\r\naccept-encoding: gzip\r\n\r\n")
      sockets.push(socket)
    }
    await Bun.sleep(2_000)
    const whoami = await probeWhoami(server, key.apiKey, 2_000)
    const after = rssMb(server.pid)
    for (const socket of sockets) socket.destroy()
    return `2,000 readers of /docs that never read: RSS ${before.toFixed(0)} -> ${after.toFixed(0)} MB; ` +
      `a whoami meanwhile p50 ${ms(whoami.p50)}, p99 ${ms(whoami.p99)}`
  },

  /** 3: a declared body of 16,000 bytes, one byte short, on 1,000 connections at once. */
  "short-bodies": async (server) => {
    const started = performance.now()
    const answers = await Promise.all(Array.from({ length: 1_000 }, async (_, i) => {
      const socket = await rawSocket(server.port)
      socket.on("error", () => {})
      const path = i % 2 === 0 ? activatePath : "/v1/nowhere"
      socket.write(
        `POST ${path} HTTP/1.1\r\nhost: x\r\ncontent-length: 16000\r\ncontent-type: application/json\r\n\r\n${
          "x".repeat(15_999)
        }`
      )
      const answer = await new Promise<string>((resolve) => {
        socket.once("data", (data) => resolve(data.toString("latin1")))
        setTimeout(() => resolve("(no answer in 15 s)"), 15_000)
      })
      socket.destroy()
      return {
        status: answer.split(" ")[1],
        close: /\r\nconnection: close\r\n/i.test(answer),
        at: performance.now() - started
      }
    }))
    const statuses = [...new Set(answers.map((a) => a.status))].join(", ")
    const slowest = Math.max(...answers.map((a) => a.at))
    return `1,000 requests declaring 16,000 bytes and sending 15,999: statuses ${statuses}, ` +
      `${answers.filter((a) => a.close).length} with Connection: close, all answered within ${ms(slowest)}`
  },

  /** 4: one connection pipelining 40,000 whoamis without a key. */
  pipeline: async (server) => {
    const socket = await rawSocket(server.port)
    socket.on("error", () => {})
    socket.write("GET /v1/whoami HTTP/1.1\r\nhost: x\r\n\r\n".repeat(40_000))
    const latencies: Array<number> = []
    const until = performance.now() + 3_000
    while (performance.now() < until) {
      const started = performance.now()
      await (await fetch(`${server.url}/healthz`, { headers: { connection: "close" } })).arrayBuffer()
      latencies.push(performance.now() - started)
      await Bun.sleep(10)
    }
    socket.destroy()
    latencies.sort((a, b) => a - b)
    return `one connection pipelining 40,000 whoamis: a fresh client's /healthz p50 ${
      ms(percentile(latencies, 0.5))
    }, ` +
      `p99 ${ms(percentile(latencies, 0.99))}, max ${ms(latencies.at(-1)!)}`
  },

  /** 5: well-formed unknown keys, as fast as one client sends them, for 5 s. */
  "unknown-keys": async (server, key) => {
    const logBefore = statSync(logFile).size
    const cpuBefore = cpuSeconds(server.pid)
    const started = performance.now()
    let sent = 0
    const attacker = (async () => {
      while (performance.now() - started < 5_000) {
        const batch = Array.from({ length: 25 }, () =>
          fetch(`${server.url}/v1/whoami`, {
            headers: {
              authorization: `Bearer cak_${crypto.randomUUID().replace(/-/g, "").slice(0, 16)}_${"0".repeat(64)}`
            }
          }).then((r) => r.arrayBuffer()))
        await Promise.all(batch)
        sent += batch.length
      }
    })()
    const whoami = await probeWhoami(server, key.apiKey, 4_500)
    await attacker
    const seconds = (performance.now() - started) / 1000
    const cpu = ((cpuSeconds(server.pid) - cpuBefore) / seconds) * 100
    await Bun.sleep(100)
    return `unknown keys at ${(sent / seconds).toFixed(0)} req/s: server CPU ${cpu.toFixed(0)} % of a core, ` +
      `a whoami meanwhile p50 ${ms(whoami.p50)}, p99 ${ms(whoami.p99)}; ` +
      `${((statSync(logFile).size - logBefore) / sent).toFixed(1)} log bytes per 401`
  },

  /**
   * 5, as a flood: wrk sends made-up key ids (a new one per request) as fast as the server answers,
   * for 5 s. On PostgreSQL, the transactions the database counted over the flood (and the lag of
   * its statistics after it) against as long a quiet window just before (the generation's poll):
   * the difference is what the made-up ids cost the database, at most 20 statements a second
   * (a refused key id is read again at most once per 50 ms, for all of them: docs/operators.md, Running
   * several instances), counted over the flood's own seconds.
   */
  "unknown-flood": async (server, key) => {
    const floodSeconds = 5
    const windowMs = floodSeconds * 1_000 + statisticsLagMs
    let quiet: number | undefined
    if (onPostgres) {
      // The poll runs from an instance's first request on: in the quiet window too.
      await (await fetch(`${server.url}/v1/whoami`, { headers: { authorization: `Bearer ${key.apiKey}` } }))
        .arrayBuffer()
      await Bun.sleep(statisticsLagMs)
      const quietFrom = await transactionsSoFar()
      await Bun.sleep(windowMs)
      quiet = (await transactionsSoFar()) - quietFrom
    }
    const floodFrom = onPostgres ? await transactionsSoFar() : 0
    const cpuBefore = cpuSeconds(server.pid)
    const wrk = Bun.spawnSync(["taskset", "-c", "0", ...wrkArgs(server.url, "unknown", "-", "-", 50, floodSeconds)])
    const result = wrkResultOf(wrk.stdout.toString())
    if (result === undefined) throw new Error(`wrk printed no result: ${wrk.stderr}`)
    const seconds = result.durationMicros / 1e6
    const cpu = ((cpuSeconds(server.pid) - cpuBefore) / seconds) * 100
    const statuses = Object.entries(result.statuses).map(([status, n]) => `${n} × ${status}`).join(", ")
    let database = ""
    if (quiet !== undefined) {
      await Bun.sleep(statisticsLagMs)
      const flood = (await transactionsSoFar()) - floodFrom
      const added = flood - quiet
      database =
        `; PostgreSQL transactions in the service's database over ${windowMs / 1000} s: ${flood} with the flood, ` +
        `${quiet} in as long a quiet window before it, ${added} added: ${(added / seconds).toFixed(1)} a second ` +
        `over the flood's ${seconds.toFixed(1)} s (bound: ≤ 20 a second)`
    }
    return `made-up key ids at ${(result.requests / seconds).toFixed(0)} req/s for ${
      seconds.toFixed(1)
    } s (${statuses}), ` +
      `p50 ${(result.latencyMicros.p50 / 1000).toFixed(2)} ms, p99 ${
        (result.latencyMicros.p99 / 1000).toFixed(2)
      } ms; ` +
      `server CPU ${cpu.toFixed(0)} % of a core${database}`
  },

  /**
   * 10,000 401s from a trusted proxy (the server is started with TRUSTED_PROXIES=127.0.0.1), each
   * naming a client of its own in X-Forwarded-For as an IPv6 address with a 12,000-character zone
   * id: what the access log and the 401 tally keep of them, in RSS and log bytes.
   */
  "claimed-addresses": async (server) => {
    const logBefore = statSync(logFile).size
    const before = rssMb(server.pid)
    const zone = "Z".repeat(12_000)
    for (let sent = 0; sent < 10_000; sent += 25) {
      await Promise.all(Array.from({ length: 25 }, (_, i) =>
        fetch(`${server.url}/v1/whoami`, {
          headers: {
            authorization: `Bearer cak_${"b".repeat(16)}_${"0".repeat(64)}`,
            "x-forwarded-for": `fe80::1%${sent + i}${zone}`
          }
        }).then((r) => r.arrayBuffer())))
    }
    await Bun.sleep(1_000)
    return `10,000 401s claiming fe80::1%<12,000 characters>, each a client of its own: RSS ${before.toFixed(0)} -> ${
      rssMb(server.pid).toFixed(0)
    } MB, ${((statSync(logFile).size - logBefore) / 1024).toFixed(0)} KB of log`
  },

  /** 7: a known key id with a wrong secret against an unknown key id, interleaved. */
  timing: async (server, key) => {
    const known = `cak_${key.keyId}_${"0".repeat(64)}`
    // Made beforehand, so that the client does the same work for both.
    const unknowns = Array.from(
      { length: 3_000 },
      () => `cak_${crypto.randomUUID().replace(/-/g, "").slice(0, 16)}_${"0".repeat(64)}`
    )
    const samples: Record<"known" | "unknown", Array<number>> = { known: [], unknown: [] }
    const socket = await fetch(`${server.url}/healthz`) // warm the client
    await socket.arrayBuffer()
    for (let i = 0; i < 6_000; i++) {
      const which = i % 2 === 0 ? "known" : "unknown"
      const authorization = `Bearer ${which === "known" ? known : unknowns[i >> 1]!}`
      const started = performance.now()
      await (await fetch(`${server.url}/v1/whoami`, { headers: { authorization } })).arrayBuffer()
      if (i >= 1_000) samples[which].push((performance.now() - started) * 1000)
    }
    const median = (values: Array<number>) => [...values].sort((a, b) => a - b)[values.length >> 1]!
    return `known key id with a wrong secret vs unknown key id, 2,500 each: median ${
      median(samples.known).toFixed(1)
    } vs ` +
      `${median(samples.unknown).toFixed(1)} µs, Mann-Whitney z ${
        mannWhitneyZ(samples.known, samples.unknown).toFixed(2)
      }`
  },

  /**
   * 7, on a rolled key: its new secret against its previous one (in its grace), interleaved. Both
   * are answered 200 with answers of the same length (the key expires, so both carry an
   * `Api-Key-Expires`); which one matched must not show in the time.
   */
  "rolled-timing": async (server) => {
    const created = JSON.parse(cli([
      "keys",
      "create",
      "--brand",
      crypto.randomUUID(),
      "--scopes",
      "campaigns:read",
      "--rate-limit",
      "1000000/60",
      "--expires-in",
      "1",
      "--json"
    ])) as { apiKey: string; keyId: string }
    const rolled = JSON.parse(cli(["keys", "roll", created.keyId, "--grace", "1h", "--json"])) as { apiKey: string }
    if (onPostgres) await Bun.sleep(keyPropagationMs)
    const secrets = { current: rolled.apiKey, previous: created.apiKey }
    const samples: Record<"current" | "previous", Array<number>> = { current: [], previous: [] }
    await (await fetch(`${server.url}/healthz`)).arrayBuffer() // warm the client
    for (let i = 0; i < 6_000; i++) {
      const which = i % 2 === 0 ? "current" : "previous"
      const started = performance.now()
      const answer = await fetch(`${server.url}/v1/whoami`, { headers: { authorization: `Bearer ${secrets[which]}` } })
      await answer.arrayBuffer()
      if (answer.status !== 200) throw new Error(`the ${which} secret was answered ${answer.status}`)
      if (i >= 1_000) samples[which].push((performance.now() - started) * 1000)
    }
    const median = (values: Array<number>) => [...values].sort((a, b) => a - b)[values.length >> 1]!
    return `a rolled key's new secret vs its previous one in its grace, 2,500 each: median ${
      median(samples.current).toFixed(1)
    } vs ` +
      `${median(samples.previous).toFixed(1)} µs, Mann-Whitney z ${
        mannWhitneyZ(samples.current, samples.previous).toFixed(2)
      }`
  },

  /** 2: bodies in 1-byte chunks, each chunk its own write, on activate, an unknown path and /healthz. */
  "tiny-chunks": async (server, key) => {
    const results: Array<string> = []
    for (const [method, path] of [["POST", activatePath], ["POST", "/v1/nowhere"], ["GET", "/healthz"]] as const) {
      const cpuBefore = cpuSeconds(server.pid)
      const statuses = new Set<string>()
      for (let i = 0; i < 20; i++) {
        const socket = await rawSocket(server.port)
        socket.setNoDelay(true)
        socket.on("error", () => {})
        // The server may answer and close while chunks are still being written: the write then
        // fails (EPIPE) before the answer is read, and "closed" is what the attacker sees.
        const answer = new Promise<string>((resolve) => {
          socket.once("data", (data) => resolve(data.toString("latin1").split(" ")[1]!))
          socket.once("close", () => resolve("closed"))
          setTimeout(() => resolve("(none in 15 s)"), 15_000)
        })
        socket.write(
          `${method} ${path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${key.apiKey}\r\n` +
            `idempotency-key: tiny-${i}-${Date.now()}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n`
        )
        for (let c = 0; c < 2_000 && !socket.destroyed; c++) socket.write("1\r\n \r\n")
        socket.write("0\r\n\r\n")
        statuses.add(await answer)
        socket.destroy()
      }
      results.push(
        `${method} ${path}: ${[...statuses].join("/")}, ${
          (((cpuSeconds(server.pid) - cpuBefore) / 20) * 1000).toFixed(1)
        } ms CPU each`
      )
    }
    return `2,000 one-byte chunks, 20 requests per route: ${results.join("; ")}`
  },

  /** 10: other spellings of the routes. */
  spellings: async (server, key) => {
    const paths = [
      "//v1/whoami",
      "/V1/WHOAMI",
      "/v1/whoami;x",
      "/v1/%77hoami",
      `${activatePath};x`,
      activatePath.replace(/activate$/, "%61ctivate")
    ]
    const statuses = await Promise.all(paths.map(async (path) => {
      const socket = await rawSocket(server.port)
      socket.on("error", () => {})
      const method = path.toLowerCase().includes("whoami") ? "GET" : "POST"
      socket.write(
        `${method} ${path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${key.apiKey}\r\ncontent-length: 0\r\n\r\n`
      )
      const status = await new Promise<string>((resolve) =>
        socket.once("data", (d) => resolve(d.toString("latin1").split(" ")[1]!))
      )
      socket.destroy()
      return `${path.length > 24 ? `…${path.slice(-16)}` : path} ${status}`
    }))
    return statuses.join(", ")
  },

  /** 8: the -wal file deleted while serving, activations sent on, then SIGKILL and a restart. */
  "wal-deleted": async (server, key) => {
    const activate = (n: number) =>
      fetch(`${server.url}${activatePath}`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${key.apiKey}`,
          "content-type": "application/json",
          "idempotency-key": `wal-${Date.now()}-${n}`
        },
        body: JSON.stringify({ socialUsername: "@wal" })
      }).then(async (r) => ({ status: r.status, body: await r.json() as { activation?: { id: string } } }))
    for (let i = 0; i < 5; i++) await activate(i)
    rmSync(`${database}-wal`)
    const after = await Promise.all(Array.from({ length: 60 }, (_, i) => activate(100 + i)))
    const answered = after.filter((a) => a.status === 200).map((a) => a.body.activation!.id)
    process.kill(server.pid, "SIGKILL")
    await Bun.sleep(200)
    const restarted = await startServer()
    await restarted.stop()
    const db = new Database(database, { readonly: true })
    const lost = answered.filter((id) => db.query("SELECT 1 FROM activations WHERE id = ?").get(id) === null).length
    db.close()
    return `-wal deleted, then 60 activations: ${answered.length} answered 200 (${
      [...new Set(after.map((a) => a.status))].join("/")
    }); ` +
      `after SIGKILL and a restart ${lost} of those lost`
  },

  /** 9: the -shm file deleted while serving, then a key revoked with the command line. */
  "shm-revoke": async (server) => {
    const victim = createKey()
    const before =
      (await fetch(`${server.url}/v1/whoami`, { headers: { authorization: `Bearer ${victim.apiKey}` } })).status
    rmSync(`${database}-shm`)
    let revoked: string
    try {
      revoked = cli(["keys", "revoke", victim.keyId]).trim()
    } catch (error) {
      revoked = `refused: ${String(error).slice(0, 80)}`
    }
    await Bun.sleep(500)
    const after =
      (await fetch(`${server.url}/v1/whoami`, { headers: { authorization: `Bearer ${victim.apiKey}` } })).status
    return `-shm deleted, key revoked through the CLI ("${revoked}"): whoami with it ${before} before, ${after} after`
  },

  /** 11: one address holds more connections than the server may open. */
  "held-connections": holdConnections(["127.0.0.2"], 4_200, { metrics: false }),

  /** 11: two addresses hold more connections than the server may open, with metrics on (a sampler opens a file). */
  "held-two-addresses": holdConnections(["127.0.0.2", "127.0.0.3"], 2_100, { metrics: true }),

  /** The second guard, 1: one address at its limit disturbs no other address's keep-alive connections. */
  "keep-alive-victim": keepAliveVictim,

  /** The second guard, 2: new connections from one address holding half a request stay within its limit. */
  "connection-churn": connectionChurn,

  /** A brand's analytics calls dropped by their client: what the server goes on spending on them. */
  "analytics-dropped": analyticsDropped,

  /** The same behind a trusted proxy: whether another brand's requests through it still get in. */
  "analytics-proxy": analyticsProxy,

  /** 6: 500,000 idempotency records expiring together, purged while whoami is served. */
  purge: async (_server, key) => {
    // Its own server, on a database filled beforehand with entries expired a minute ago.
    const db = new Database(database)
    const expired = Date.now() - 60_000
    db.run("BEGIN")
    const insert = db.prepare(
      "INSERT INTO idempotency_keys (brand_id, idempotency_key, fingerprint, resource_id, status_code, response_body, created_at, expires_at) VALUES (?, ?, ?, NULL, 200, '{}', ?, ?)"
    )
    for (let i = 0; i < 500_000; i++) insert.run("hostile", `k${i}`, "f".repeat(64), expired, expired)
    db.run("COMMIT")
    db.close()
    const started = performance.now()
    const server = await startServer()
    const startMs = performance.now() - started
    const whoami = await probeWhoami(server, key.apiKey, 8_000)
    const left = new Database(database, { readonly: true })
      .query<{ n: number }, []>("SELECT COUNT(*) AS n FROM idempotency_keys WHERE brand_id = 'hostile'").get()!.n
    await server.stop()
    return `500,000 expired idempotency records: started in ${ms(startMs)}; a whoami during the purge p50 ` +
      `${ms(whoami.p50)}, p99 ${ms(whoami.p99)}, max ${ms(whoami.max)}; ${left} left after 8 s`
  }
}

/** What an attack needs of its server's configuration. */
const serverSettings: Record<string, Record<string, string>> = { "claimed-addresses": { TRUSTED_PROXIES: "127.0.0.1" } }

const fileTricks = ["wal-deleted", "shm-revoke"]
/** What starts a server of its own. */
const ownServer = [
  "purge",
  "held-connections",
  "held-two-addresses",
  "keep-alive-victim",
  "connection-churn",
  "analytics-dropped",
  "analytics-proxy"
]
/**
 * What works on a SQLite file only: the file tricks, and the purge's records and the widest
 * campaign written straight into a file.
 */
const sqliteOnly = [...fileTricks, "purge", "analytics-dropped", "analytics-proxy"]

const main = async () => {
  const names = wanted.length === 0
    ? Object.keys(attacks).filter((name) => !onPostgres || !sqliteOnly.includes(name))
    : wanted
  // Attacks that break the database file run after every other one.
  names.sort((a, b) => Number(fileTricks.includes(a)) - Number(fileTricks.includes(b)))
  for (const name of names) {
    if (!(name in attacks)) throw new Error(`unknown attack ${name}: ${Object.keys(attacks).join(", ")}`)
  }
  if (onPostgres) {
    const refused = names.filter((name) => sqliteOnly.includes(name))
    if (refused.length > 0) throw new Error(`${refused.join(", ")} attack a SQLite file: not run on PostgreSQL`)
    const admin = new SQL(`${postgresServer}/postgres`, { max: 1 })
    await admin.unsafe(`CREATE DATABASE ${postgresDatabase}`)
    await admin.close()
  }
  console.log(
    `hostile: ${serverCommand.join(" ")} on CPU 1, loopback only, on ${
      onPostgres ? `PostgreSQL (${postgresServer}/${postgresDatabase}) + Redis (${redisUrl})` : "SQLite"
    }; work directory ${work}`
  )
  // The key exists before the server starts, so a server of its own (the purge) knows it too.
  let key = createKey()
  for (const name of names) {
    // The file tricks leave a database no server can use again: run them last, on a fresh file.
    if (name === "wal-deleted" || name === "shm-revoke") {
      for (const suffix of ["", "-wal", "-shm"]) rmSync(`${database}${suffix}`, { force: true })
      key = createKey()
    }
    const server = ownServer.includes(name) ? undefined : await startServer(serverSettings[name])
    try {
      const result = await attacks[name]!(server ?? ({} as Server), key)
      console.log(`${name}: ${result}`)
    } finally {
      await server?.stop()
    }
  }
}

await main().catch((error: unknown) => {
  console.error(`hostile failed: ${error instanceof Error ? error.message : String(error)}`)
  process.exitCode = 1
})
if (onPostgres) {
  for (const child of children) child.kill("SIGKILL")
  const admin = new SQL(`${postgresServer}/postgres`, { max: 1 })
  await admin.unsafe(`DROP DATABASE IF EXISTS ${postgresDatabase} WITH (FORCE)`)
  await admin.close()
}
process.exit()
