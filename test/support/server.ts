import { spawn, type Subprocess } from "bun"
import { ConfigProvider, Duration, Effect, Option } from "effect"
import { mkdtempSync } from "node:fs"
import { connect } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { ApiKeys } from "../../src/ApiKeys.ts"
import { KeysLive } from "../../src/Cli/KeyStore.ts"
import type { BrandId, Scope } from "../../src/Domain/ApiKey.ts"
import { stateDeadlineMs } from "./deadlines.ts"
import { eventually } from "./load.ts"

export const root = new URL("../..", import.meta.url).pathname
export const mainTs = join(root, "src/main.ts")
/** The command a child runs: the binary built once for the run (globalSetup.ts), or `bun src/main.ts` outside one. */
export const program: ReadonlyArray<string> = process.env["CAMPAIGN_API_TEST_BINARY"] === undefined
  ? ["bun", mainTs]
  : [process.env["CAMPAIGN_API_TEST_BINARY"]]

/** The run's temporary directory (removed when the run ends, see globalSetup.ts), or the system's. */
export const testTmp = (): string => process.env["CAMPAIGN_API_TEST_TMP"] ?? tmpdir()

/** A fresh SQLite file path in its own temporary directory. */
export const tempDatabase = (): string => join(mkdtempSync(join(testTmp(), "campaign-api-test-")), "db.sqlite")

/** Variables for a child process on top of this one's; `undefined` removes one. */
export type Environment = Readonly<Record<string, string | undefined>>

const environment = (overrides: Environment): Record<string, string> =>
  Object.fromEntries(
    Object.entries({ ...process.env, ...overrides }).filter((entry): entry is [string, string] =>
      entry[1] !== undefined
    )
  )

/**
 * Where and how a child is started: in `cwd` (the checkout by default), as `bun <runtime...>` when
 * given, else `program`; under `under` when given (`prlimit --nofile=…`, which runs it in its place);
 * under `umask` when given, else this process's.
 */
export interface StartOptions {
  readonly cwd?: string
  readonly runtime?: ReadonlyArray<string>
  readonly under?: ReadonlyArray<string>
  readonly umask?: number
}

/**
 * A child stops at once on SIGTERM unless a test asks for the drain window (docs/operators.md, Operating it:
 * Shutdown), and is ready without the warm-up unless a test asks for it (docs/operators.md, Operating it:
 * Start-up), so that a test may ask `/readyz` the moment the server listens.
 */
const spawnMain = (
  args: ReadonlyArray<string>,
  env: Environment,
  { cwd = root, runtime, umask, under = [] }: StartOptions = {}
) =>
  spawn([
    ...under,
    // The shell is replaced by the program (exec): signals reach the program itself.
    ...(umask === undefined ? [] : ["sh", "-c", `umask ${umask.toString(8)} && exec "$@"`, "sh"]),
    ...(runtime === undefined ? program : ["bun", ...runtime]),
    ...args
  ], {
    cwd,
    env: environment({ SHUTDOWN_DELAY_SECONDS: "0", WARM_UP: "false", ...env }),
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe"
  })

export interface RunningServer {
  readonly url: string
  readonly process: Subprocess<"ignore", "pipe", "pipe">
  readonly logs: () => string
  readonly stop: (signal?: NodeJS.Signals) => Promise<number | null>
}

/** Starts `bun <runtime...> serve` on a free port (`StartOptions`) and waits until it listens. */
export const startServer = async (
  database: string,
  env: Environment = {},
  options: StartOptions = {}
): Promise<RunningServer> => {
  const proc = spawnMain(
    ["serve"],
    { PORT: "0", HOST: "127.0.0.1", DATABASE_URL: database, LOG_LEVEL: "info", ...env },
    options
  )
  let output = ""
  const decoder = new TextDecoder()
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${output}`)), stateDeadlineMs)
    const pump = async (stream: ReadableStream<Uint8Array>) => {
      const reader = stream.getReader()
      for (;;) {
        const { done, value } = await reader.read()
        if (done) return
        output += decoder.decode(value)
        const match = /Listening on http:\/\/[^:]+:(\d+)/.exec(output)
        if (match) {
          clearTimeout(timer)
          resolve(`http://127.0.0.1:${match[1]}`)
        }
      }
    }
    void pump(proc.stderr)
    void pump(proc.stdout)
    void proc.exited.then((code) => reject(new Error(`server exited with ${code}:\n${output}`)))
  })
  return {
    url,
    process: proc,
    logs: () => output,
    stop: async (signal = "SIGTERM") => {
      proc.kill(signal)
      return await proc.exited
    }
  }
}

export const freePort = (): number => {
  const listener = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } })
  const { port } = listener
  listener.stop(true)
  return port
}

const accepts = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = connect(port, "127.0.0.1")
    socket.once("connect", () => {
      socket.destroy()
      resolve(true)
    })
    socket.once("error", () => resolve(false))
  })

/**
 * Runs `use` against a server of its own, then stops it with SIGTERM: `use`'s result, the exit
 * code and everything the server wrote. Unlike `startServer` it is ready once its port accepts
 * connections rather than on the "Listening" log line, so it works at any LOG_LEVEL.
 */
export const session = async <A>(database: string, env: Environment, use: (url: string) => Promise<A>) => {
  const port = freePort()
  const proc = spawnMain(["serve"], {
    HOST: "127.0.0.1",
    DATABASE_URL: database,
    LOG_LEVEL: "info",
    ...env,
    PORT: String(port)
  })
  const output = Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text()])
  const stop = async () => {
    proc.kill("SIGTERM")
    const code = await proc.exited
    const [stdout, stderr] = await output
    return { code, stdout, stderr }
  }
  let exited = false
  void proc.exited.then(() => (exited = true))
  try {
    await eventually("the server to listen", async () => {
      if (exited) throw new Error(`server exited with ${proc.exitCode}:\n${(await output)[1]}`)
      return accepts(port)
    })
  } catch (error) {
    proc.kill("SIGKILL")
    throw error
  }
  let result: A
  try {
    result = await use(`http://127.0.0.1:${port}`)
  } catch (error) {
    await stop()
    throw error
  }
  return { result, ...(await stop()) }
}

export interface CreatedTestKey {
  readonly apiKey: string
  readonly keyId: string
  readonly brandId: string
}

/**
 * The bound of docs/operators.md for a change to a key (a revocation, a roll, an update) to reach every
 * instance on a shared database, whether or not the instance heard it announced (Running several
 * instances). A key created is taken at once.
 */
export const keyPropagationBound = 1000

/**
 * Creates a key in the server's database the way the CLI does, without a process per key. Every
 * running server takes it from the moment it returns, on PostgreSQL as on SQLite (docs/operators.md, Running
 * several instances), so a test uses it at once.
 */
export const createKey = (
  database: string,
  options: { readonly brandId?: string; readonly scopes?: ReadonlyArray<Scope>; readonly expiresInDays?: number } = {}
): Promise<CreatedTestKey> =>
  Effect.gen(function*() {
    const keys = yield* ApiKeys
    const { apiKey, info } = yield* keys.create({
      brandId: (options.brandId ?? crypto.randomUUID()) as BrandId,
      scopes: options.scopes ?? ["campaigns:write"],
      name: Option.none(),
      expiresIn: Option.map(Option.fromNullable(options.expiresInDays), Duration.days)
    })
    return { apiKey, keyId: info.keyId, brandId: info.brandId }
  }).pipe(
    Effect.provide(KeysLive),
    Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["DATABASE_URL", database]]))),
    Effect.runPromise
  )

/** `use` on the key store of the server's database, as the key commands open it. */
const withKeys = <A>(database: string, use: (keys: ApiKeys["Type"]) => Effect.Effect<A>): Promise<A> =>
  Effect.flatMap(ApiKeys, use).pipe(
    Effect.provide(KeysLive),
    Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["DATABASE_URL", database]]))),
    Effect.runPromise
  )

export const revokeKey = (database: string, keyId: string): Promise<boolean> =>
  withKeys(database, (keys) => keys.revoke(keyId))

export const listKeys = (database: string) => withKeys(database, (keys) => keys.list)

/** Rolls the key with a grace of an hour: its new key. */
export const rollKey = (database: string, keyId: string): Promise<string> =>
  withKeys(database, (keys) => Effect.map(keys.roll(keyId, Duration.hours(1)), (rolled) => rolled!.apiKey))

/**
 * Runs the real command line (`StartOptions`) and collects what it printed. It is stopped with
 * SIGTERM after `timeoutMs`: a `serve` that should have refused its configuration must not keep
 * running (on loopback only).
 */
export const runCli = async (
  args: ReadonlyArray<string>,
  env: Environment,
  { timeoutMs = stateDeadlineMs, ...options }: StartOptions & { readonly timeoutMs?: number } = {}
) => {
  const proc = spawnMain(args, { HOST: "127.0.0.1", PORT: "0", ...env }, options)
  let timedOut = false
  const timer = setTimeout(() => {
    timedOut = true
    proc.kill("SIGTERM")
  }, timeoutMs)
  const [stdout, stderr, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited
  ])
  clearTimeout(timer)
  return { stdout, stderr, code, timedOut }
}
