/**
 * Usage errors in the service's own words: what is wrong, then the fix (docs/operators.md, The key command
 * line). @effect/cli finds what is wrong with a command line; what it says is put into a sentence
 * of our own here, with the command line as it was typed to say it precisely. A hint names
 * `--help` without naming the program, which may have been started as the binary, `bun
 * src/main.ts`, `bun run cli` or through `npx`.
 */
import { AutoCorrect, CliConfig, Command, HelpDoc, type Usage, ValidationError } from "@effect/cli"
import { LogLevel } from "effect"
import { settingsList } from "../Config.ts"
import { builtInOptions } from "./CommandLine.ts"
import { keyIdTakes, optionTakes } from "./KeyOptions.ts"

/** A command as the sentences need it: its name, its options and arguments, and its own commands. */
export interface CommandTree {
  readonly name: string
  /** Its options, `--brand`, each with whether it takes a value. */
  readonly options: ReadonlyMap<string, boolean>
  /** Its arguments, `<keyId>`. */
  readonly args: ReadonlyArray<string>
  readonly commands: ReadonlyArray<CommandTree>
}

/** The tree of `command`, its options and arguments read from its own usage. */
export const treeOf = (
  // Each command's own name type does not widen to `string` (its context tag is invariant in it).
  command: Command.Command<string, never, unknown, unknown>,
  commands: ReadonlyArray<CommandTree> = []
): CommandTree => {
  const options = new Map<string, boolean>()
  const args: Array<string> = []
  const visit = (usage: Usage.Usage): void => {
    switch (usage._tag) {
      case "Named":
        for (const name of usage.names) {
          if (name.startsWith("-")) options.set(name, usage.acceptedValues._tag === "Some")
          else if (name.startsWith("<")) args.push(name)
        }
        return
      case "Optional":
      case "Repeated":
        return visit(usage.usage)
      case "Alternation":
      case "Concat":
        visit(usage.left)
        return visit(usage.right)
      default:
        return
    }
  }
  visit(Command.getUsage(command))
  const [name] = Command.getNames(command)
  return { name: name!, options, args, commands }
}

const hint = "run the same command with --help"

/** The built-in options that take a value, and the values they take. */
const builtInValues: ReadonlyMap<string, ReadonlyArray<string>> = new Map([
  ["--log-level", LogLevel.allLevels.map((level) => level._tag.toLowerCase())],
  ["--completions", ["sh", "bash", "fish", "zsh"]]
])

const listOf = (words: ReadonlyArray<string>) =>
  words.length <= 1 ? words.join("") : `${words.slice(0, -1).join(", ")} and ${words.at(-1)}`

/** The one of `candidates` that `typed` most likely meant: within @effect/cli's own distance, or the only one it begins. */
const nearest = (typed: string, candidates: ReadonlyArray<string>): string | undefined => {
  const scored = candidates
    .map((candidate) => ({
      candidate,
      distance: AutoCorrect.levensteinDistance(typed, candidate, CliConfig.defaultConfig)
    }))
    .sort((a, b) => a.distance - b.distance)
  if (scored.length > 0 && scored[0]!.distance <= CliConfig.defaultConfig.autoCorrectLimit) return scored[0]!.candidate
  const bare = typed.replace(/^-+/, "")
  const begun = candidates.filter((candidate) => bare.length >= 2 && candidate.replace(/^-+/, "").startsWith(bare))
  return begun.length === 1 ? begun[0] : undefined
}

/** `did you mean keys? Use one of …`, or without a likely one, `use one of …`. */
const didYouMean = (suggestion: string | undefined, then: string) =>
  suggestion === undefined ? then : `did you mean ${suggestion}? ${then[0]!.toUpperCase()}${then.slice(1)}`

/** A word as a sentence may repeat it: never a whole API key, whose secret would then be on the screen again. */
const quoted = (word: string) => /cak_/.test(word) ? "an API key" : `'${word}'`

interface Located {
  /** The command words, `keys create`. */
  readonly words: ReadonlyArray<string>
  readonly command: CommandTree
  /** A word where a command of `command` goes that names none. */
  readonly unknown?: string
}

/** The command the command line names, as far as it names one. */
const locate = (tree: CommandTree, args: ReadonlyArray<string>): Located => {
  const words: Array<string> = []
  let command = tree
  for (let i = 0; i < args.length && command.commands.length > 0; i++) {
    const word = args[i]!
    if (word === "--") break
    if (builtInValues.has(word)) i++
    else if (!word.startsWith("-")) {
      const named = command.commands.find((sub) => sub.name === word)
      if (named === undefined) return { words, command, unknown: word }
      words.push(word)
      command = named
    }
  }
  return { words, command }
}

/** The options typed for `command`, each as typed and by its name (`--brand=x` is `--brand`), their values left out. */
const optionsTyped = (command: CommandTree, args: ReadonlyArray<string>) => {
  const typed: Array<{ readonly name: string; readonly value: string | undefined }> = []
  for (let i = 0; i < args.length; i++) {
    const word = args[i]!
    if (word === "--") break
    if (!word.startsWith("-") || word === "-") continue
    const [name, ...inline] = word.split("=")
    const takesValue = command.options.get(name!) ?? builtInValues.has(name!)
    const value = inline.length > 0 ? inline.join("=") : takesValue ? args[i + 1] : undefined
    if (takesValue && inline.length === 0) i++
    typed.push({ name: name!, value })
  }
  return typed
}

/** `serve --port 4000`: the variable such an option means, with the value typed unless it may hold a password. */
const serveOption = (name: string, value: string | undefined) => {
  const setting = settingsList.find((setting) =>
    setting.name === name.replace(/^-+/, "").toUpperCase().replaceAll("-", "_")
  )
  if (setting === undefined) {
    return `serve takes no options, and ${name} names none of its variables: every setting is an environment variable (${hint} to see them all).`
  }
  const shown = value === undefined || value.startsWith("-") || setting.secret === true ? "<value>" : value
  return `serve takes no options: set ${setting.name}=${shown} in its environment instead, e.g. before the command (${hint} to see every variable).`
}

const ownOptions = (command: CommandTree) => [...command.options.keys()]

/** What is wrong with the options typed, if anything: one it does not have, or one given twice. */
const optionProblem = (name: string, command: CommandTree, args: ReadonlyArray<string>) => {
  const typed = optionsTyped(command, args)
  const unknown = typed.find((option) => !command.options.has(option.name) && !builtInOptions.includes(option.name))
  if (unknown !== undefined) {
    if (name === "serve") {
      // Serve has no option that takes a value: what follows the option is read as its value here.
      const at = args.findIndex((arg) => arg.split("=")[0] === unknown.name)
      return serveOption(unknown.name, args[at]!.includes("=") ? args[at]!.split("=").slice(1).join("=") : args[at + 1])
    }
    const options = ownOptions(command)
    return options.length === 0
      ? `${name} has no option ${unknown.name}: it takes none (${hint} to see what it takes).`
      : `${name} has no option ${unknown.name}: ${
        didYouMean(nearest(unknown.name, options), `its options are ${listOf(options)}`)
      } (${hint} to see what each takes).`
  }
  const twice = typed.find((option, i) => typed.findIndex((other) => other.name === option.name) !== i)
  if (twice !== undefined) return `${twice.name} is given twice: give it once.`
  return undefined
}

/** A built-in option given a value it does not take (`--log-level loud`). */
const builtInProblem = (args: ReadonlyArray<string>) => {
  for (let i = 0; i < args.length; i++) {
    const [name, ...inline] = args[i]!.split("=")
    const values = builtInValues.get(name!)
    const value = inline.length > 0 ? inline.join("=") : args[i + 1]
    if (values !== undefined && !values.includes(value ?? "")) return `${name} takes one of ${listOf(values)}.`
  }
  return undefined
}

/** What an argument is, as a sentence says it is missing. */
const argumentTakes = (name: string) =>
  name === "<keyId>" ? keyIdTakes : name === "<file>" ? "the path of a new file to write the copy to" : name

/** An argument's name in a sentence: `<keyId>` is a key id. */
const argumentName = (name: string) => name.slice(1, -1).replace(/[A-Z]/g, (letter) => ` ${letter.toLowerCase()}`)

const takesOf = (option: string) => optionTakes[option]

/** A sentence ends with a full stop, as the service's do. */
const sentence = (text: string) => /[.!?)]$/.test(text) ? text : `${text}.`

/** What @effect/cli said, as plain text. */
const textOf = (error: ValidationError.ValidationError) =>
  "error" in error ? HelpDoc.toAnsiText(error.error).replace(/\x1b\[[0-9;]*m/g, "").trim() : ""

/** @effect/cli's own sentences, which are said again in ours; any other is a value's own message (KeyOptions.ts). */
const library =
  /^(Missing command name|Invalid subcommand for|No built-in option|Expected |The flag '|More than one reference|Collision between|Missing argument|Received unknown argument|Missing default value)/

/**
 * The sentence for the usage error `error` that @effect/cli found in `args` (the words after the
 * program's name), said of the command `tree` names.
 */
export const usageSentence = (
  tree: CommandTree,
  args: ReadonlyArray<string>,
  error: ValidationError.ValidationError
): string => {
  const builtIn = builtInProblem(args)
  if (builtIn !== undefined) return builtIn
  const { command, unknown, words } = locate(tree, args)
  const commands = command.commands.map((sub) => sub.name)
  const name = words.join(" ")
  if (unknown !== undefined) {
    const suggestion = nearest(unknown, commands)
    return `Unknown command '${[...words, unknown].join(" ")}': ${
      didYouMean(
        suggestion === undefined ? undefined : `'${[...words, suggestion].join(" ")}'`,
        `use one of ${commands.join(", ")}`
      )
    } (${hint} to see what each does).`
  }
  if (commands.length > 0) {
    return `${name === "" ? "The program" : name} takes one of its commands first: ${
      commands.join(", ")
    } (${hint} to see what each does).`
  }
  const optionSaid = optionProblem(name, command, args)
  if (optionSaid !== undefined) return optionSaid
  const said = textOf(error)
  const missing = /^Expected to find option: '(.+)'$/.exec(said)?.[1]
  if (missing !== undefined) {
    const takes = takesOf(missing)
    return takes === undefined
      ? `${name} needs ${missing} (${hint} to see what it takes).`
      : `${name} needs ${missing}: ${takes}.`
  }
  const valueless = /^Expected a value following option: '(.+)'$/.exec(said)?.[1]
  if (valueless !== undefined) return valueNeeded(valueless, name)
  const argument = /^Missing argument (<\w+>)/.exec(said)?.[1]
  if (argument !== undefined) return `${name} needs ${argumentTakes(argument)}.`
  const extra = /^Received unknown argument: '(.*)'$/.exec(said)?.[1]
  if (extra !== undefined) {
    // The likeliest cause, where an option takes a value: a value with a space, unquoted.
    const quote = [...command.options.values()].includes(true) ? ": quote a value that has spaces" : ""
    return command.args.length === 0
      ? `${name} takes options only, and ${quoted(extra)} is none${quote} (${hint} to see its options).`
      : `${name} takes one ${command.args.map(argumentName).join(" and one ")}, and ${
        quoted(extra)
      } is one word too many${quote} (${hint} to see what it takes).`
  }
  if (said !== "" && !library.test(said)) return sentence(said)
  return `${
    name === "" ? "This command line" : `This ${name} command`
  } is not one the program reads: ${hint} to see what it takes.`
}

const valueNeeded = (option: string, name: string) => {
  const takes = takesOf(option)
  return takes === undefined
    ? `${option} needs a value (${hint} to see what ${name} takes).`
    : `${option} needs a value: ${takes}.`
}

/**
 * A usage error @effect/cli does not see: an option that takes a value followed by another option
 * (`--name --json`), which it would take as the value. None when help is asked for, so that the
 * hints' "the same command with --help" prints help.
 */
export const usageProblem = (tree: CommandTree, args: ReadonlyArray<string>): string | undefined => {
  if (args.includes("--help") || args.includes("-h")) return undefined
  const { command, unknown, words } = locate(tree, args)
  if (unknown !== undefined || command.commands.length > 0) return undefined
  const bare = args.findIndex((arg, i) =>
    command.options.get(arg) === true && (args[i + 1] === undefined || args[i + 1]!.startsWith("--"))
  )
  return bare === -1 ? undefined : valueNeeded(args[bare]!, words.join(" "))
}

/**
 * The command line that asks for the help of the command `args` names, when they ask for help but
 * @effect/cli cannot read them (`keys list --bogus --help`): so "the same command with --help" of
 * every hint prints help. Undefined when they do not ask for it.
 */
export const helpFor = (tree: CommandTree, args: ReadonlyArray<string>): ReadonlyArray<string> | undefined =>
  args.includes("--help") || args.includes("-h") ? [...locate(tree, args).words, "--help"] : undefined

/** The usage error for `sentence`: printed by the caller, exit 2 (docs/operators.md, Exit codes). */
export const usageError = (said: string) => ValidationError.invalidArgument(HelpDoc.p(said))
