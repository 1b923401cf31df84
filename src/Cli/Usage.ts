import { settingsList } from "../Config.ts"
import { builtInOptions } from "./CommandLine.ts"
import { keyCommandNames } from "./KeyCommands.ts"

/** The key commands' options that take a value. */
const valueOptions = ["--brand", "--scopes", "--name", "--expires-in", "--rate-limit", "--grace"]

/**
 * `serve --port 4000`: serve takes no options, as a deployment's environment is where its settings
 * live. The variable such an option means is named, with the value typed unless it may hold a password.
 */
const serveOption = (args: ReadonlyArray<string>): string | undefined => {
  const at = args.findIndex((arg, i) => i > 0 && arg.startsWith("-") && !builtInOptions.includes(arg.split("=")[0]!))
  if (args[0] !== "serve" || at === -1) return undefined
  const [flag, ...inline] = args[at]!.split("=")
  const setting = settingsList.find(({ name }) => name === flag!.replace(/^-+/, "").toUpperCase().replaceAll("-", "_"))
  if (setting === undefined) {
    return `serve takes no options, and ${flag} names none of its variables: every setting is an environment variable (see campaign-api serve --help).`
  }
  const next = args[at + 1]
  const typed = inline.length > 0 ? inline.join("=") : next !== undefined && !next.startsWith("-") ? next : undefined
  const value = typed === undefined || setting.secret === true ? "<value>" : typed
  return `serve takes no options; use the environment variable instead: ${setting.name}=${value} campaign-api serve (see campaign-api serve --help).`
}

/**
 * Three usage errors that @effect/cli reports confusingly, said plainly: an unknown `keys` command
 * (it lists the top-level commands instead), an option given without its value, and an option of
 * `serve` (it calls either an unknown argument).
 */
export const usageProblem = (args: ReadonlyArray<string>): string | undefined => {
  if (args[0] === "serve") return serveOption(args)
  if (args[0] === "keys" && args[1] !== undefined && !args[1].startsWith("-") && !keyCommandNames.includes(args[1])) {
    return `Unknown command 'keys ${args[1]}': use one of ${keyCommandNames.join(", ")} (see campaign-api keys --help).`
  }
  if (args[0] !== "keys" || args[1] === undefined || !keyCommandNames.includes(args[1])) return undefined
  const bare = args.findIndex((arg, i) =>
    valueOptions.includes(arg) && (args[i + 1] === undefined || args[i + 1]!.startsWith("--"))
  )
  return bare === -1 ? undefined : `${args[bare]} needs a value (see campaign-api keys ${args[1]} --help).`
}
