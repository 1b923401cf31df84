/**
 * How soon a change to a key counts on every instance (docs/operators.md, Running several instances): two
 * instances on one PostgreSQL and one Redis, and three kinds of trial, each `KEYS_TRIALS` times in
 * turn, each trial a key of its own:
 *
 * - **create**: the key is made, then whoami with it on one instance, then on the other (the
 *   first instance alternates): every answer is counted, and how long the first took;
 * - **revoke**: a key both instances have answered is revoked; from the command's return, whoami on
 *   each instance back to back until it answers 401: the later of the two;
 * - **roll**: a key both have answered is rolled with `--grace 0`, its old secret's grace ending
 *   as the command returns; from then, the old secret on each until it is refused, the later of the two.
 *
 * The key commands run as the key command line runs them (`ApiKeys` over `KeysLive`, a pool of its
 * own, committed before it returns), in this process: a process per command would add half a
 * second to every trial and nothing to what is measured, which starts once the command returned.
 * With `KEYS_CLI` set (the built binary, say), each command is that program's `keys …` instead.
 * Trials are `KEYS_PAUSE_MS` apart: a refused key id is read again at most once per 50 ms on an
 * instance, and keys are not made faster than that.
 *
 *   bun bench/keys-propagation.ts    # KEYS_TRIALS=200 KEYS_PAUSE_MS=100 KEYS_SERVER="bun src/main.ts"
 *                                    # KEYS_CLI=dist/campaign-api
 *                                    # POSTGRES_URL=postgres://postgres@127.0.0.1:5432 REDIS_URL=redis://127.0.0.1:6379
 */
import { spawn, type Subprocess } from "bun"
import { ConfigProvider, Duration, Effect, Layer, ManagedRuntime, Option } from "effect"
import { join } from "node:path"
import { ApiKeys } from "../src/ApiKeys.ts"
import { KeysLive } from "../src/Cli/KeyStore.ts"
import type { BrandId } from "../src/Domain/ApiKey.ts"
import { freePort, whoamiOk, writeResults } from "./common.ts"
import { createPostgresDatabase, dropPostgresDatabases } from "./harness/databases.ts"

const trials = Number(process.env["KEYS_TRIALS"] ?? 200)
const pauseMs = Number(process.env["KEYS_PAUSE_MS"] ?? 100)
const serverCommand = (process.env["KEYS_SERVER"] ?? `${process.execPath} src/main.ts`).split(" ")
const cli = process.env["KEYS_CLI"]?.split(" ")
const postgresServer = process.env["POSTGRES_URL"] ?? "postgres://postgres@127.0.0.1:5432"
const redisUrl = process.env["REDIS_URL"] ?? "redis://127.0.0.1:6379"
const root = join(import.meta.dir, "..")
const brandId = "0b6f8c1e-4f5a-4c2b-9d7e-1a2b3c4d5e6f"

const children: Array<Subprocess> = []

const startServer = async (database: string, apiKey: string): Promise<string> => {
  const port = freePort()
  const child = spawn([...serverCommand, "serve"], {
    cwd: root,
    env: {
      ...process.env,
      DATABASE_URL: database,
      REDIS_URL: redisUrl,
      PORT: String(port),
      HOST: "127.0.0.1",
      LOG_LEVEL: "warn",
      RATE_LIMIT_MAX: "1000000000",
      SHUTDOWN_DELAY_SECONDS: "0"
    },
    stdout: "ignore",
    stderr: "inherit"
  })
  children.push(child)
  const url = `http://127.0.0.1:${port}`
  for (let i = 0; i < 600; i++) {
    if (await whoamiOk(url, apiKey)) return url
    await Bun.sleep(50)
  }
  throw new Error(`${serverCommand.join(" ")} serve did not answer on ${url}`)
}

interface Created {
  readonly apiKey: string
  readonly keyId: string
}

/** The key commands, in process or through `KEYS_CLI`; each returns once its change is committed. */
const keyCommands = (database: string) => {
  const runtime = ManagedRuntime.make(
    KeysLive.pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["DATABASE_URL", database]])))))
  )
  const run = async (args: ReadonlyArray<string>) => {
    const child = spawn([...cli!, "keys", ...args], {
      cwd: root,
      env: { ...process.env, DATABASE_URL: database },
      stdout: "pipe",
      stderr: "pipe"
    })
    const [stdout, stderr, code] = await Promise.all([
      new Response(child.stdout).text(),
      new Response(child.stderr).text(),
      child.exited
    ])
    if (code !== 0) throw new Error(`keys ${args.join(" ")} exited with ${code}: ${stderr}`)
    return stdout
  }
  const keys = <A>(use: (keys: ApiKeys["Type"]) => Effect.Effect<A>) => runtime.runPromise(Effect.flatMap(ApiKeys, use))
  return {
    create: async (): Promise<Created> => {
      if (cli !== undefined) {
        return JSON.parse(await run(["create", "--brand", brandId, "--scopes", "campaigns:read", "--json"]))
      }
      const { apiKey, info } = await keys((k) =>
        k.create({
          brandId: brandId as BrandId,
          scopes: ["campaigns:read"],
          name: Option.none(),
          expiresIn: Option.none()
        })
      )
      return { apiKey, keyId: info.keyId }
    },
    revoke: async (keyId: string) => {
      if (cli !== undefined) return void (await run(["revoke", keyId]))
      if (!(await keys((k) => k.revoke(keyId)))) throw new Error(`${keyId} was not revoked`)
    },
    /** When the old secret's grace ends, in milliseconds since the epoch. */
    rollWithoutGrace: async (keyId: string): Promise<number> => {
      if (cli !== undefined) {
        return Date.parse(JSON.parse(await run(["roll", keyId, "--grace", "0", "--json"])).previousSecretEndsAt)
      }
      const rolled = await keys((k) => k.roll(keyId, Duration.zero))
      if (rolled === undefined) throw new Error(`${keyId} was not rolled`)
      return rolled.previousSecretEndsAt.epochMillis
    },
    dispose: () => runtime.dispose()
  }
}

const whoamiStatus = async (url: string, apiKey: string): Promise<number> => {
  const response = await fetch(`${url}/v1/whoami`, { headers: { authorization: `Bearer ${apiKey}` } })
  await response.arrayBuffer()
  return response.status
}

/** Milliseconds from `from` (performance.now()) until whoami on `url` with `apiKey` answers 401, asked back to back. */
const untilRefused = async (url: string, apiKey: string, from: number): Promise<number> => {
  for (;;) {
    const status = await whoamiStatus(url, apiKey)
    if (status === 401) return performance.now() - from
    if (status !== 200) throw new Error(`whoami answered ${status}`)
    if (performance.now() - from > 10_000) throw new Error(`${url} still took a key 10 s after its change`)
  }
}

const percentile = (values: ReadonlyArray<number>, p: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)]!
}
const summary = (values: ReadonlyArray<number>) => ({
  p50: percentile(values, 0.5),
  p99: percentile(values, 0.99),
  max: Math.max(...values)
})
const ms = (value: number) => `${value.toFixed(1)} ms`
const said = (values: ReadonlyArray<number>) => {
  const { max, p50, p99 } = summary(values)
  return `p50 ${ms(p50)}, p99 ${ms(p99)}, max ${ms(max)}`
}

const main = async () => {
  const database = await createPostgresDatabase(postgresServer, `bench_keys_${Date.now().toString(36)}`)
  const commands = keyCommands(database)
  try {
    const first = await commands.create()
    const servers = [await startServer(database, first.apiKey), await startServer(database, first.apiKey)] as const
    console.log(
      `two instances (${serverCommand.join(" ")}) on PostgreSQL ${postgresServer} and Redis ${redisUrl}; ` +
        `${trials} trials of each, ${pauseMs} ms apart; key commands ${
          cli === undefined ? "in process" : cli.join(" ")
        }`
    )
    /** A key both instances have answered 200. */
    const knownKey = async () => {
      const key = await commands.create()
      for (const url of servers) {
        if ((await whoamiStatus(url, key.apiKey)) !== 200) throw new Error(`${url} refused a key it should know`)
      }
      return key
    }

    // Warmed up first: the first requests of a process wait for the compiler (docs/operators.md, Operating it: Start-up).
    for (let i = 0; i < 2_000; i++) await whoamiStatus(servers[i % 2]!, first.apiKey)
    // For scale: whoami with a key both have answered before.
    const usedKeyMs: Array<number> = []
    for (let trial = 0; trial < trials; trial++) {
      const started = performance.now()
      await whoamiStatus(servers[trial % 2]!, first.apiKey)
      usedKeyMs.push(performance.now() - started)
      await Bun.sleep(pauseMs / 10)
    }
    console.log(`whoami with a key already used, for scale: ${said(usedKeyMs)}`)

    const statuses: Array<number> = []
    const firstAnswerMs: Array<number> = []
    for (let trial = 0; trial < trials; trial++) {
      const [one, other] = trial % 2 === 0 ? servers : [servers[1], servers[0]]
      const key = await commands.create()
      const returned = performance.now()
      statuses.push(await whoamiStatus(one, key.apiKey))
      firstAnswerMs.push(performance.now() - returned)
      statuses.push(await whoamiStatus(other, key.apiKey))
      await Bun.sleep(pauseMs)
    }
    const answered200 = statuses.filter((status) => status === 200).length
    console.log(
      `create, then whoami on one instance and the other: ${answered200} of ${statuses.length} answers 200 ` +
        `(others: ${JSON.stringify(statuses.filter((status) => status !== 200))}); the first answer ${
          said(firstAnswerMs)
        }`
    )

    const revokedMs: Array<number> = []
    for (let trial = 0; trial < trials; trial++) {
      const key = await knownKey()
      await commands.revoke(key.keyId)
      const returned = performance.now()
      const each = await Promise.all(servers.map((url) => untilRefused(url, key.apiKey, returned)))
      revokedMs.push(Math.max(...each))
      await Bun.sleep(pauseMs)
    }
    console.log(`revoke, then 401 on both instances: ${said(revokedMs)}`)

    const rolledMs: Array<number> = []
    for (let trial = 0; trial < trials; trial++) {
      const key = await knownKey()
      const graceEndsAt = await commands.rollWithoutGrace(key.keyId)
      // From the return or the grace's end, the later: performance.now()'s clock at the epoch's instant.
      const from = Math.max(performance.now(), performance.now() + graceEndsAt - Date.now())
      const each = await Promise.all(servers.map((url) => untilRefused(url, key.apiKey, from)))
      rolledMs.push(Math.max(...each))
      await Bun.sleep(pauseMs)
    }
    console.log(`roll --grace 0, then the old secret 401 on both instances: ${said(rolledMs)}`)

    writeResults("keys-propagation", {
      trials,
      pauseMs,
      server: serverCommand.join(" "),
      keyCommands: cli === undefined ? "in process" : cli.join(" "),
      usedKeyWhoamiMs: summary(usedKeyMs),
      create: { answers: statuses.length, answered200, firstAnswerMs: summary(firstAnswerMs) },
      revokeMs: summary(revokedMs),
      rollMs: summary(rolledMs),
      each: { firstAnswerMs, revokedMs, rolledMs }
    })
  } finally {
    await commands.dispose()
    for (const child of children) child.kill("SIGTERM")
    await Promise.all(children.map((child) => child.exited))
    await dropPostgresDatabases(postgresServer, [database])
  }
}

await main()
