import { type Subprocess, spawn } from "bun"
import { ConfigProvider, Duration, Effect, Option } from "effect"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { ApiKeys } from "../../src/ApiKeys.ts"
import { KeysLive } from "../../src/Cli.ts"
import type { BrandId, Scope } from "../../src/Domain/ApiKey.ts"

export const root = new URL("../..", import.meta.url).pathname
export const mainTs = join(root, "src/main.ts")

/** A fresh SQLite file path in its own temporary directory. */
export const tempDatabase = (): string => join(mkdtempSync(join(tmpdir(), "campaign-api-test-")), "db.sqlite")

export interface RunningServer {
  readonly url: string
  readonly process: Subprocess<"ignore", "pipe", "pipe">
  readonly logs: () => string
  readonly stop: (signal?: NodeJS.Signals) => Promise<number | null>
}

/** Starts `bun src/main.ts serve` on a free port and waits until it listens. */
export const startServer = async (
  database: string,
  env: Record<string, string> = {}
): Promise<RunningServer> => {
  const proc = spawn(["bun", mainTs, "serve"], {
    cwd: root,
    env: { ...process.env, PORT: "0", HOST: "127.0.0.1", DATABASE_URL: database, LOG_LEVEL: "info", ...env },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe"
  })
  let output = ""
  const decoder = new TextDecoder()
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${output}`)), 15_000)
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

export interface CreatedTestKey {
  readonly apiKey: string
  readonly keyId: string
  readonly brandId: string
}

/** Creates a key in the server's database the way the CLI does, without a process per key. */
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

export const revokeKey = (database: string, keyId: string): Promise<boolean> =>
  Effect.flatMap(ApiKeys, (keys) => keys.revoke(keyId)).pipe(
    Effect.provide(KeysLive),
    Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["DATABASE_URL", database]]))),
    Effect.runPromise
  )

/** Runs the real command line and collects what it printed. */
export const runCli = async (args: ReadonlyArray<string>, env: Record<string, string>) => {
  const proc = spawn(["bun", mainTs, ...args], {
    cwd: root,
    env: { ...process.env, ...env },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe"
  })
  const [stdout, stderr, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited
  ])
  return { stdout, stderr, code }
}
