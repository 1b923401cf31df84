import { readFileSync } from "node:fs"
import { commandLine } from "./Cli/CommandLine.ts"

/**
 * The garbage-collected heap's sizing, set before anything else loads.
 *
 * JavaScriptCore sizes its heap from the machine's memory: on a machine of many gigabytes it let the
 * heap grow to several times what was live before collecting. Told the machine has 1 GiB
 * (`BUN_JSC_forceRAMSize`), it collects sooner (docs/operators.md, Operating it: Memory; bench/BENCHMARKS.md).
 * It is a sizing hint, not a limit. JavaScriptCore
 * reads it only from the environment, when the runtime starts, so `serve` sets it by replacing
 * itself (`execve`: the same process id and command line, the environment it was started with
 * plus this one variable) before its modules run. A value the operator set, in the environment or
 * a `.env` file, `0` (JavaScriptCore's own sizing) included, is the one used.
 */
const variable = "BUN_JSC_forceRAMSize"
const defaultRamSize = String(1024 ** 3)

/** A NUL-separated file of /proc/self (`environ`, `cmdline`) as its entries; undefined where there is none. */
const procEntries = (file: "environ" | "cmdline"): Array<string> | undefined => {
  try {
    return readFileSync(`/proc/self/${file}`, "utf8").split("\0").slice(0, -1)
  } catch {
    return undefined
  }
}

/**
 * The environment as the process was started with it: Bun adds what it loads from `.env` files
 * to `process.env`, and those values must not become real environment variables of the server.
 */
const startingEnvironment = (): Record<string, string> | undefined => {
  const entries = procEntries("environ")
  return entries === undefined ? undefined : Object.fromEntries(
    entries.filter((entry) => entry.includes("=")).map((entry) => {
      const at = entry.indexOf("=")
      return [entry.slice(0, at), entry.slice(at + 1)]
    })
  )
}

/**
 * The command line to start again with: the one this process was started with (runtime flags and
 * the script's spelling kept, so `ps` shows what the operator ran), except that a relative
 * `--cwd` is made absolute: Bun has already moved into it, and would look for it again from there.
 */
const againWith = (commandLine: ReadonlyArray<string>): Array<string> => {
  const here = process.cwd()
  return commandLine.map((word, i) =>
    word.startsWith("--cwd=") ? `--cwd=${here}` : commandLine[i - 1] === "--cwd" ? here : word
  )
}

// A value the process was started with is already JavaScriptCore's; one from a `.env` file is not
// (Bun loads the file after the runtime started), so it is passed on like the default, the only
// `.env` value that is. Not on Linux (no /proc): the default sizing, rather than `.env` values exported.
if (commandLine.command === "serve") {
  const environment = startingEnvironment()
  const commandLine = procEntries("cmdline")
  if (
    environment !== undefined && environment[variable] === undefined && commandLine !== undefined &&
    commandLine.length > 0
  ) {
    try {
      process.execve?.(process.execPath, againWith(commandLine), {
        ...environment,
        [variable]: process.env[variable] ?? defaultRamSize
      })
    } catch {
      // Not replaced (the executable cannot be started again): the server runs with the default sizing.
    }
  }
}
