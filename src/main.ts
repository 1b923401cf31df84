import { BunContext, BunRuntime } from "@effect/platform-bun"
import { Console, Effect, Layer } from "effect"
import * as ConfigError from "effect/ConfigError"
import { cli } from "./Cli.ts"
import { LoggingLive } from "./Logging.ts"

cli(process.argv).pipe(
  Effect.provide(Layer.mergeAll(BunContext.layer, LoggingLive)),
  Effect.catchIf(ConfigError.isConfigError, (error) =>
    Effect.zipRight(Console.error(`Invalid configuration: ${error}`), Effect.sync(() => process.exit(78)))),
  BunRuntime.runMain({ disablePrettyLogger: true })
)
