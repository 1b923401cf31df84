/**
 * `campaign-api serve` with nothing after it, as a deployment starts it: the server without the
 * command line's parser, which would add to the time to the first answer (docs/operators.md, Performance).
 * Any other command line, `serve --help` included, is the program's (Program.ts).
 */
import { BunRuntime } from "@effect/platform-bun"
import { Effect, Layer } from "effect"
import { ServerLive } from "./App.ts"
import { withConfigurationExit } from "./Launch.ts"
import { LoggingLive } from "./Logging.ts"

Layer.launch(ServerLive).pipe(
  Effect.provide(LoggingLive),
  withConfigurationExit,
  BunRuntime.runMain({ disablePrettyLogger: true })
)
