/** The command line as a program: its layers, its console and its exit codes (docs/operators.md, Exit codes). */
import { CliConfig, ValidationError } from "@effect/cli"
import * as BunContext from "@effect/platform-bun/BunContext"
import * as BunRuntime from "@effect/platform-bun/BunRuntime"
import { Effect, Layer } from "effect"
import { cli } from "./Cli.ts"
import { commandLine } from "./Cli/CommandLine.ts"
import { CliConsole } from "./Cli/Help.ts"
import { withConfigurationExit } from "./Launch.ts"
import { LoggingLive } from "./Logging.ts"

cli(commandLine).pipe(
  // The five built-in options (--help, --version, --wizard, --completions, --log-level) are not
  // repeated on every help page: the root description names --help and --version.
  Effect.provide(Layer.mergeAll(BunContext.layer, LoggingLive, CliConfig.layer({ showBuiltIns: false }))),
  Effect.withConsole(Effect.runSync(CliConsole(commandLine))),
  // @effect/cli has already printed what was wrong with the command line: exit 2, as usage errors do.
  Effect.catchIf(ValidationError.isValidationError, () => Effect.sync(() => process.exit(2))),
  withConfigurationExit,
  BunRuntime.runMain({ disablePrettyLogger: true })
)
