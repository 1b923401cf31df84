/**
 * @effect/cli's help and output as people read them: `serve`'s page lists its variables, no type
 * lines, no colour off a terminal, and a subcommand's usage line names it in full.
 */
import { HelpDoc } from "@effect/cli"
import * as Span from "@effect/cli/HelpDoc/Span"
import { Array as Arr, Console, Effect } from "effect"
import { settingsList } from "../Config.ts"
import { builtInsWithValue, type CommandLine } from "./CommandLine.ts"

/**
 * The variables `serve` reads, as its help lists them below its description: @effect/cli's help
 * has a place for options and arguments only. Taken from the table the configuration is read by,
 * so the help cannot leave one out.
 */
const environmentHelp = (() => {
  const entries = settingsList.map((setting): [Span.Span, HelpDoc.HelpDoc] => [
    Span.text(setting.default === undefined ? `${setting.name} (unset)` : `${setting.name}=${setting.default}`),
    HelpDoc.p(setting.meaning)
  ])
  return Arr.isNonEmptyReadonlyArray(entries)
    ? HelpDoc.toAnsiText(HelpDoc.sequence(HelpDoc.h1("ENVIRONMENT"), HelpDoc.descriptionList(entries)))
    : ""
})()

const ansi = /\x1b\[[0-9;]*m/g
/** What @effect/cli prints under every option whatever it is for: its type, said in words. */
const genericLine = /^ *(A user-defined piece of text\.|An integer\.|A true or false value\.)$/

/**
 * Help as @effect/cli prints it, with two fixes: a subcommand's usage line names the program and
 * the commands above it (`$ campaign-api keys create …`, not `$ create …`), and a command list
 * puts each description under its command instead of padding every line to the longest usage.
 * (`serve`'s page also gains its variables: see `readable`.)
 */
const fixHelp = (text: string, args: ReadonlyArray<string>) => {
  // The usage line's first word is the command's name: the words typed up to it, options and their
  // values left out, are the command (`--log-level debug keys list --help` is `keys list`'s).
  const words = args.filter((word, i) => !word.startsWith("-") && !builtInsWithValue.has(args[i - 1]!))
  const withProgram = text.replace(
    new RegExp(`^((?:${ansi.source})*)\\$ ([^\\s\x1b]+)`, "m"),
    (line, colour: string, name: string) => {
      const at = words.indexOf(name)
      return at === -1 ? line : `${colour}$ campaign-api ${words.slice(0, at + 1).join(" ")}`
    }
  )
  return withProgram.replace(/^( {2}- .*?\S) {2,}(\S.*)$/gm, "$1\n      $2")
}

/**
 * The command line's own output as people read it: no colour codes when it is not a terminal or
 * `NO_COLOR` is set (https://no-color.org), and help without the type lines that @effect/cli
 * prints under every option.
 */
const readable = (text: string, { args, words }: CommandLine) => {
  const isHelp = text.replace(ansi, "").includes("USAGE")
  const whole = isHelp && words.length === 1 && words[0] === "serve" ? `${text.trimEnd()}\n\n${environmentHelp}` : text
  const plain = process.stdout.isTTY && !process.env["NO_COLOR"] ? whole : whole.replace(ansi, "")
  const lines = plain.split("\n").filter((line) => !genericLine.test(line.replace(ansi, ""))).join("\n")
    .replace(/\n{3,}/g, "\n\n")
  return isHelp ? fixHelp(lines, args) : lines
}

/** The default console, with `readable` applied to what the command line prints. */
export const CliConsole = (commandLine: CommandLine) =>
  Effect.map(Console.consoleWith(Effect.succeed), (console): Console.Console => {
    const shown = (arg: unknown) => typeof arg === "string" ? readable(arg, commandLine) : arg
    return {
      ...console,
      log: (...args) => console.log(...args.map(shown)),
      error: (...args) => console.error(...args.map(shown))
    }
  })
