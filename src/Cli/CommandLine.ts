/**
 * The command line, read from `process.argv` here and nowhere else, and taken apart as far as the
 * entry, the heap's sizing and the help need it. It imports nothing: Memory.ts reads it before any
 * other module loads, and may start the process again.
 */

/** @effect/cli's own options, which every command takes. */
export const builtInOptions: ReadonlyArray<string> = [
  "--help",
  "-h",
  "--version",
  "--wizard",
  "--completions",
  "--log-level"
]

/** The built-in options that take a value: the word after them is not the command. */
export const builtInsWithValue = new Set(["--log-level", "--completions"])

export interface CommandLine {
  /** As `process.argv` has it, the runtime and the script first: what @effect/cli runs on. */
  readonly argv: ReadonlyArray<string>
  /** What was typed after the program's name. */
  readonly args: ReadonlyArray<string>
  /** The first word that is neither an option nor a built-in option's value: `serve`, `keys`, `backup`. */
  readonly command: string | undefined
  /** The command words typed before the first option (`keys create`): the command help is printed for. */
  readonly words: ReadonlyArray<string>
  /** `serve` with nothing after it, as a deployment starts the server (Serve.ts). */
  readonly bareServe: boolean
}

export const parse = (argv: ReadonlyArray<string>): CommandLine => {
  const args = argv.slice(2)
  let command: string | undefined
  for (let i = 0; i < args.length; i++) {
    if (builtInsWithValue.has(args[i]!)) i++
    else if (!args[i]!.startsWith("-")) {
      command = args[i]
      break
    }
  }
  const firstOption = args.findIndex((word) => word.startsWith("-"))
  return {
    argv,
    args,
    command,
    words: firstOption === -1 ? args : args.slice(0, firstOption),
    bareServe: args.length === 1 && args[0] === "serve"
  }
}

/** This process's command line. */
export const commandLine: CommandLine = parse(process.argv)
