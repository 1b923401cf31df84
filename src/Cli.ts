import { Args, Command, ValidationError } from "@effect/cli"
import { Console, Effect, Layer } from "effect"
import type { CommandLine } from "./Cli/CommandLine.ts"
import { keyCommands, keys } from "./Cli/KeyCommands.ts"
import { announced, failWith, say } from "./Cli/Output.ts"
import { helpFor, treeOf, usageError, usageProblem, usageSentence } from "./Cli/Usage.ts"
import { backUp, databaseToBackUp } from "./Database/Backup.ts"
import { SqlLive } from "./Database/Sql.ts"
import { version } from "./Version.ts"

// The server is loaded only when it is started: a key command does not wait for it (docs/operators.md, The key
// command line).
const serve = Command.make(
  "serve",
  {},
  () => Effect.flatMap(Effect.promise(() => import("./App.ts")), ({ ServerLive }) => Layer.launch(ServerLive))
).pipe(
  Command.withDescription(
    "Start the HTTP API, configured by environment variables alone, each optional (serve --help lists them; see docs/operators.md, Configuration)."
  )
)

const backup = Command.make("backup", {
  file: Args.text({ name: "file" }).pipe(
    Args.withDescription(
      "The new file to write the copy to; an existing file is never overwritten. The copy serves as DATABASE_URL as it is."
    )
  )
}, ({ file }) =>
  databaseToBackUp.pipe(
    Effect.flatMap((target) => backUp(file, announced(target, SqlLive))),
    Effect.flatMap((written) => Console.log(`Backup written: ${written.file} (${written.bytes} bytes).`)),
    Effect.catchTags({
      // Refused, or failed: one sentence and exit 1 (docs/operators.md, Backups).
      BackupRefused: (refused) => failWith(1, refused.message),
      SqlError: (error) =>
        failWith(1, `No backup was written: ${error.cause instanceof Error ? error.cause.message : error.message}.`)
    })
  )).pipe(
    Command.withDescription(
      "Write a consistent copy of the SQLite database at DATABASE_URL to a new file, with mode 0600, while the server runs and writes (PostgreSQL: use pg_dump)."
    )
  )

const program = Command.make("campaign-api").pipe(
  Command.withDescription(
    "Campaign Activation and Identity API: the server, its key management and backups. Every command takes --help; the program takes --version."
  ),
  Command.withSubcommands([serve, keys, backup])
)

const run = Command.run(program, { name: "campaign-api", version })

/** The commands, their options and their arguments, as the usage errors name them. */
// Each command's own name type does not widen to `string` (its context tag is invariant in it).
type AnyCommand = Command.Command<string, never, unknown, unknown>
const tree = treeOf(program as unknown as AnyCommand, [
  treeOf(serve as unknown as AnyCommand),
  treeOf(keys as unknown as AnyCommand, keyCommands.map((command) => treeOf(command as unknown as AnyCommand))),
  treeOf(backup as unknown as AnyCommand)
])

/**
 * @effect/cli's own output while it reads the command line, without its error: it prints what it
 * found wrong before it fails with it, and that is said again in our words (Usage.ts).
 */
const withoutLibraryErrors = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Console.consoleWith((console) => Effect.withConsole(effect, { ...console, error: () => Effect.void }))

/**
 * The program on the command line `commandLine` (docs/operators.md, The key command line; Exit codes). A
 * usage error is one sentence on stderr, and fails as a `ValidationError`: exit 2.
 */
export const cli = (commandLine: CommandLine) => {
  const problem = usageProblem(tree, commandLine.args)
  const help = helpFor(tree, commandLine.args)
  return problem !== undefined
    ? Effect.zipRight(say(problem), Effect.fail(usageError(problem)))
    : run(commandLine.argv).pipe(
      withoutLibraryErrors,
      Effect.catchIf(
        (error) => ValidationError.isValidationError(error) && help !== undefined,
        (error) => help === undefined ? Effect.fail(error) : run([...commandLine.argv.slice(0, 2), ...help])
      ),
      Effect.tapError((error) =>
        ValidationError.isValidationError(error) ? say(usageSentence(tree, commandLine.args, error)) : Effect.void
      ),
      // No database where one must be: one sentence, exit 1 (docs/operators.md, Exit codes).
      Effect.catchTag("NoDatabase", (missing) => failWith(1, missing.message))
    )
}
