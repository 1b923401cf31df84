import { ConfigProvider, Effect, Exit, Layer, Logger, LogLevel, Scope } from "effect"
import { ServerLive } from "../../src/App.ts"
import { type Environment, freePort } from "./server.ts"

export interface InProcessServer {
  readonly url: string
  /** Stops it as SIGTERM would (no drain window): the listener, then the database. */
  readonly stop: () => Promise<void>
}

/**
 * The server built from its layers in this process, as `serve` builds it, listening on a free
 * loopback port: the HTTP contract on the raw wire without a child process (docs/contributing.md, Tests). Its
 * log is off; what the log says is tested on a real process.
 */
export const serveInProcess = async (database: string, env: Environment = {}): Promise<InProcessServer> => {
  const port = freePort()
  const variables = {
    HOST: "127.0.0.1",
    DATABASE_URL: database,
    SHUTDOWN_DELAY_SECONDS: "0",
    // Ready at once, as a child is (server.ts): the warm-up is tested on a real process.
    WARM_UP: "false",
    ...env,
    PORT: String(port)
  }
  const config = ConfigProvider.fromMap(
    new Map(Object.entries(variables).filter((entry): entry is [string, string] => entry[1] !== undefined))
  )
  const scope = Effect.runSync(Scope.make())
  await Layer.buildWithScope(ServerLive, scope).pipe(
    Effect.withConfigProvider(config),
    Logger.withMinimumLogLevel(LogLevel.None),
    Effect.runPromise
  )
  return { url: `http://127.0.0.1:${port}`, stop: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
}
