import { Console, Effect } from "effect"
import * as ConfigError from "effect/ConfigError"
import { configProblems, StartupError } from "./Config.ts"

/**
 * A bad configuration as the process ends on it (docs/operators.md, Exit codes): every bad variable at once,
 * one sentence each, or the one configured path, address or port that cannot be used; exit 78.
 */
export const withConfigurationExit = <A, E, R>(self: Effect.Effect<A, E, R>) =>
  self.pipe(
    Effect.catchIf(ConfigError.isConfigError, (error) =>
      Effect.zipRight(
        Console.error(configProblems(error as ConfigError.ConfigError).join("\n")),
        Effect.sync(() => process.exit(78))
      )),
    Effect.catchIf((error) => error instanceof StartupError, (error) =>
      Effect.zipRight(
        Console.error((error as StartupError).message),
        Effect.sync(() => process.exit(78))
      ))
  )
