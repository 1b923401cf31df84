/**
 * The soak: minutes of mixed traffic against the real server, bounded and self-stopping.
 *
 *   bun bench/soak.ts        # SOAK_SECONDS=180, SOAK_CONCURRENCY=4, SOAK_TTL_SECONDS=30, SOAK_MAX_RSS_GROWTH_MB=64
 *
 * Loops send whoami, fresh activations, replays, conflicting bodies, invalid bodies and wrong keys.
 * Every 5 s it samples the server's RSS and the idempotency_keys row count. The server is started
 * with IDEMPOTENCY_TTL_HOURS=SOAK_TTL_SECONDS/3600 (fractions are allowed); the TTL in effect is read
 * back from the rows themselves (expires_at - created_at), and the purge is judged when it fits in the run.
 *
 * Exits 1 on any 5xx, any status its request kind does not allow, a replay that differs from
 * the original, a table the purge did not keep bounded, or RSS growing past the allowance.
 */
import { spawn } from "bun"
import { existsSync, readFileSync, rmSync } from "node:fs"
import { dirname, join } from "node:path"
import { activate, type Answer, call, uniqueKey, whoami } from "../test/support/client.ts"
import { countRows, inspect } from "../test/support/database.ts"
import { eventually } from "../test/support/load.ts"
import { createKey, mainTs, root, tempDatabase } from "../test/support/server.ts"

const setting = (name: string, fallback: number): number => {
  const raw = process.env[name]
  const value = raw === undefined || raw.trim() === "" ? fallback : Number(raw)
  if (!Number.isInteger(value) || value <= 0) {
    console.error(`soak: ${name} must be a whole number above 0, got "${raw}"`)
    process.exit(2)
  }
  return value
}

const seconds = setting("SOAK_SECONDS", 180)
const concurrency = setting("SOAK_CONCURRENCY", 4)
const ttlSeconds = setting("SOAK_TTL_SECONDS", 30)
const maxRssGrowthMb = setting("SOAK_MAX_RSS_GROWTH_MB", 64)
const sampleEveryMs = 5_000
/** The server purges every min(TTL, 1 min) (src/Idempotency.ts); a key may outlive its TTL by that much. */
const purgeIntervalSeconds = Math.min(ttlSeconds, 60)

const database = tempDatabase()
// The server logs to a file, not into this process: a long run's access log held here would skew what it measures.
const logFile = join(dirname(database), "server.log")
const server = spawn(["bun", mainTs, "serve"], {
  cwd: root,
  env: {
    ...process.env,
    PORT: "0",
    HOST: "127.0.0.1",
    DATABASE_URL: database,
    IDEMPOTENCY_TTL_HOURS: String(ttlSeconds / 3600),
    SHUTDOWN_DELAY_SECONDS: "0",
    RATE_LIMIT_MAX: "1000000000"
  },
  stdin: "ignore",
  stdout: "ignore",
  stderr: Bun.file(logFile)
})
const hardStop = setTimeout(() => {
  console.error("soak: did not finish in time; killing the server")
  server.kill("SIGKILL")
  process.exit(1)
}, (seconds + 60) * 1000)
const cleanUp = async () => {
  clearTimeout(hardStop)
  server.kill("SIGTERM")
  await server.exited
  rmSync(dirname(database), { recursive: true, force: true })
}
process.once("SIGINT", () => void cleanUp().then(() => process.exit(130)))

const serverLog = () => existsSync(logFile) ? readFileSync(logFile, "utf8") : ""
const listeningPort = () => /Listening on http:\/\/[^:]+:(\d+)/.exec(serverLog())?.[1]
await eventually("the server to listen", () => listeningPort() !== undefined, { intervalMs: 100, timeoutMs: 15_000 })
  .catch(async (error) => {
    await cleanUp()
    throw error
  })
const url = `http://127.0.0.1:${listeningPort()}`

const key = await createKey(database)
const wrongSecret = `${key.apiKey.slice(0, -4)}0000`
const unknownKey = `cak_${"x".repeat(16)}_${"0".repeat(64)}`

interface Stored {
  readonly key: string
  readonly body: { readonly socialUsername: string }
  readonly text: string
  readonly at: number
}

/** Recent fresh activations, to replay and to conflict with while they are surely unexpired. */
const recent: Array<Stored> = []
const freshEnough = () => {
  const cutoff = Date.now() - (ttlSeconds * 1000) / 2
  while (recent.length > 0 && recent[0]!.at < cutoff) recent.shift()
  return recent.length > 0 ? recent[Math.floor(Math.random() * recent.length)] : undefined
}
const createdAt: Array<number> = []

const counts = new Map<string, number>()
const unexpected: Array<string> = []
const record = (kind: string, answer: Answer, allowed: ReadonlyArray<number>, problem?: string) => {
  const label = `${kind} ${answer.status}`
  counts.set(label, (counts.get(label) ?? 0) + 1)
  if (!allowed.includes(answer.status) || problem !== undefined) {
    unexpected.push(`${label}${problem === undefined ? "" : ` (${problem})`}: ${answer.text.slice(0, 200)}`)
  }
}

let serial = 0
const kinds: ReadonlyArray<readonly [string, () => Promise<void>]> = [
  ["whoami", async () => record("whoami", await whoami(url, key.apiKey), [200])],
  ["fresh activation", async () => {
    const stored = { key: uniqueKey(), body: { socialUsername: `@soak${serial++}` } }
    const answer = await activate(url, { apiKey: key.apiKey, ...stored })
    record("fresh activation", answer, [200])
    if (answer.status === 200) {
      recent.push({ ...stored, text: answer.text, at: Date.now() })
      createdAt.push(Date.now())
    }
  }],
  ["replay", async () => {
    const original = freshEnough()
    if (original === undefined) return
    const answer = await activate(url, { apiKey: key.apiKey, key: original.key, body: original.body })
    const same = answer.text === original.text && answer.headers.get("idempotent-replayed") === "true"
    record("replay", answer, [200], same ? undefined : "not the original's bytes")
  }],
  ["conflict", async () => {
    const original = freshEnough()
    if (original === undefined) return
    record(
      "conflict",
      await activate(url, { apiKey: key.apiKey, key: original.key, body: { socialUsername: "@other" } }),
      [409]
    )
  }],
  ["invalid body", async () => {
    const rawBody = Math.random() < 0.5 ? "{\"socialUsername\":\"no-at\"}" : "{not json"
    record("invalid body", await activate(url, { apiKey: key.apiKey, key: uniqueKey(), rawBody }), [400])
  }],
  ["wrong key", async () => {
    const apiKey = Math.random() < 0.5 ? wrongSecret : unknownKey
    record("wrong key", await call(url, { path: "/v1/whoami", apiKey }), [401])
  }]
]

const rssMb = async (): Promise<number> => {
  const status = await Bun.file(`/proc/${server.pid}/status`).text()
  return Math.round(Number(/VmRSS:\s+(\d+)/.exec(status)?.[1]) / 102.4) / 10
}

interface Sample {
  readonly second: number
  readonly rssMb: number
  readonly rows: number
}
const samples: Array<Sample> = []
const started = Date.now()
const sample = async () =>
  samples.push({
    second: Math.round((Date.now() - started) / 1000),
    rssMb: await rssMb(),
    rows: countRows(database, "idempotency_keys")
  })

const deadline = started + seconds * 1000
await sample()
const sampler = setInterval(() => void sample(), sampleEveryMs)
await Promise.all(Array.from({ length: concurrency }, async () => {
  while (Date.now() < deadline) {
    const [kind, run] = kinds[Math.floor(Math.random() * kinds.length)]!
    try {
      await run()
    } catch (error) {
      unexpected.push(`${kind}: ${error instanceof Error ? error.message : String(error)}`)
    }
  }
}))
clearInterval(sampler)
await sample()

const effectiveTtlMs = inspect(
  database,
  (db) =>
    (db.query("SELECT MAX(expires_at - created_at) AS ms FROM idempotency_keys").get() as { ms: number | null }).ms
) ?? 0
const errorLines = serverLog().split("\n").filter((line) => /"logLevel":"(ERROR|FATAL)"/.test(line))
await cleanUp()

const failures: Array<string> = []
const rss = samples.map((s) => s.rssMb)
const median = (values: ReadonlyArray<number>) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!
// Compared after warm-up (JIT, first heap growth), and at the end as a median, so one GC's timing does not decide.
const warm = samples.find((s) => s.second >= Math.max(30, seconds / 5)) ?? samples.at(-1)!
const endRss = median(rss.slice(-3))
const rssGrowth = endRss - warm.rssMb
if (rssGrowth > maxRssGrowthMb) {
  failures.push(`RSS grew ${rssGrowth.toFixed(1)} MB after warm-up (allowed ${maxRssGrowthMb})`)
}

const ttlHonoured = Math.round(effectiveTtlMs / 1000) === ttlSeconds
const purgeObservable = ttlHonoured && ttlSeconds + purgeIntervalSeconds < seconds / 2
const finalRows = samples.at(-1)!.rows
const windowStart = Date.now() - (ttlSeconds + purgeIntervalSeconds + 10) * 1000
const liveAtMost = createdAt.filter((at) => at >= windowStart).length
if (purgeObservable && finalRows > liveAtMost) {
  failures.push(`idempotency_keys holds ${finalRows} rows; at most ${liveAtMost} can be unexpired`)
}
if (unexpected.length > 0) failures.push(`${unexpected.length} unexpected answers`)
if (errorLines.length > 0) failures.push(`${errorLines.length} ERROR lines in the server log`)

console.log(`soak: ${seconds} s, ${concurrency} loops, ${createdAt.length} activations created`)
console.log(
  `RSS MB: start ${
    rss[0]
  }, after warm-up ${warm.rssMb} (at ${warm.second} s), end ${endRss} (median of the last 3 samples), max ${
    Math.max(...rss)
  }`
)
console.log(`idempotency_keys rows (second: rows): ${samples.map((s) => `${s.second}: ${s.rows}`).join(", ")}`)
console.log(
  ttlHonoured
    ? `TTL in effect: ${ttlSeconds} s; purge ${
      purgeObservable
        ? `kept the table bounded: ${finalRows} rows at the end for ${createdAt.length} created`
        : "not judged: the run is too short for it"
    }`
    : `TTL in effect: ${
      Math.round(effectiveTtlMs / 1000)
    } s, not the ${ttlSeconds} s asked for: the server did not take IDEMPOTENCY_TTL_HOURS=${
      ttlSeconds / 3600
    }, so the purge cannot be observed`
)
console.log("answers:")
for (const [label, n] of [...counts].sort()) console.log(`  ${label.padEnd(24)} ${n}`)
for (const line of unexpected.slice(0, 20)) console.log(`unexpected: ${line}`)
for (const line of errorLines.slice(0, 5)) console.log(`server error: ${line.slice(0, 300)}`)
if (failures.length > 0) {
  console.log(`FAIL: ${failures.join("; ")}`)
  process.exit(1)
}
console.log("OK")
