import { Args, Command, HelpDoc, ValidationError } from "@effect/cli"
import { Console, Effect, Layer } from "effect"
import { ServerLive } from "./App.ts"
import type { CommandLine } from "./Cli/CommandLine.ts"
import { keys } from "./Cli/KeyCommands.ts"
import { announced, failWith } from "./Cli/Output.ts"
import { usageProblem } from "./Cli/Usage.ts"
import { backUp, databaseToBackUp } from "./Database/Backup.ts"
import { SqlLive } from "./Database/Sql.ts"
import { version } from "./Version.ts"

const serve = Command.make("serve", {}, () => Layer.launch(ServerLive)).pipe(
  Command.withDescription(
    "Start the HTTP API, configured by environment variables alone, each optional (serve --help lists them; see the README's Configuration)."
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
      // Refused, or failed: one sentence and exit 1 (README, Backups).
      BackupRefused: (refused) => failWith(1, refused.message),
      SqlError: (error) =>
        failWith(1, `No backup was written: ${error.cause instanceof Error ? error.cause.message : error.message}.`)
    })
  )).pipe(
    Command.withDescription(
      "Write a consistent copy of the SQLite database at DATABASE_URL to a new file, with mode 0600, while the server runs and writes (PostgreSQL: use pg_dump)."
    )
  )

const run = Command.make("campaign-api").pipe(
  Command.withDescription(
    "Campaign Activation and Identity API: the server, its key management and backups. Every command takes --help; the program takes --version."
  ),
  Command.withSubcommands([serve, keys, backup]),
  Command.run({ name: "campaign-api", version })
)

/** The program on the command line `commandLine` (README, The key command line; Exit codes). */
export const cli = (commandLine: CommandLine) => {
  const problem = usageProblem(commandLine.args)
  return problem === undefined
    // No database where one must be: one sentence, exit 1 (README, Exit codes).
    ? Effect.catchTag(run(commandLine.argv), "NoDatabase", (missing) => failWith(1, missing.message))
    : Effect.zipRight(Console.error(problem), Effect.fail(ValidationError.invalidArgument(HelpDoc.p(problem))))
}
