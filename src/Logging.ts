import { Effect, Layer, Logger } from "effect"
import { LogLevelConfig } from "./Config.ts"
import { withAccessLogFields } from "./Edge/AccessLog.ts"

/**
 * Logs go to stderr, so stdout carries only what a command prints (`keys create --json`
 * is one line of JSON): JSON lines for machines, pretty lines on a terminal.
 */
export const LoggingLive = Layer.unwrapEffect(
  Effect.map(LogLevelConfig, (level) =>
    Layer.mergeAll(
      Logger.replace(
        Logger.defaultLogger,
        withAccessLogFields(
          process.stderr.isTTY ? Logger.prettyLogger({ stderr: true }) : Logger.withConsoleError(Logger.jsonLogger)
        )
      ),
      Logger.minimumLogLevel(level)
    ))
)
