import { Args, Command, HelpDoc, Options, ValidationError } from "@effect/cli"
import { Console, DateTime, Duration, Effect, Layer, Option, Schema } from "effect"
import { ApiKeys } from "./ApiKeys.ts"
import { KeysLive, ServerLive } from "./App.ts"
import { type ApiKeyInfo, BrandId, Scope } from "./Domain/ApiKey.ts"
import { version } from "./Version.ts"

const serve = Command.make("serve", {}, () => Layer.launch(ServerLive)).pipe(
  Command.withDescription(
    "Start the HTTP API, configured through the environment (PORT, HOST, DATABASE_URL, DATABASE_POOL_MAX, REDIS_URL, RATE_LIMIT_*, IDEMPOTENCY_TTL_HOURS, LOG_LEVEL, PUBLIC_URL, DOCS_ENABLED, OTEL_*; see the README)."
  )
)

const scopesMessage = `--scopes takes a comma-separated list of ${Scope.literals.join(", ")}`

const ScopeList = Schema.transform(
  Schema.String,
  Schema.Array(Scope).pipe(Schema.minItems(1)),
  {
    strict: false,
    decode: (text) => text.split(",").map((s) => s.trim()).filter((s) => s !== ""),
    encode: (scopes) => scopes.join(",")
  }
).annotations({ message: () => ({ message: scopesMessage, override: true }) })

const json = Options.boolean("json").pipe(Options.withDescription("Print JSON instead of text."))

const isoOrNever = (date: DateTime.Utc | null) => date === null ? "never" : DateTime.formatIso(date)

const create = Command.make("create", {
  brand: Options.text("brand").pipe(
    Options.withSchema(BrandId.annotations({ message: () => "--brand takes the brand's UUID" })),
    Options.withDescription("The brand the key acts for (a UUID).")
  ),
  scopes: Options.text("scopes").pipe(
    Options.withSchema(ScopeList),
    Options.withDescription(`Comma-separated scopes: ${Scope.literals.join(", ")}.`)
  ),
  name: Options.text("name").pipe(
    Options.withSchema(Schema.String.pipe(Schema.maxLength(200)).annotations({
      message: () => ({ message: "--name takes at most 200 characters", override: true })
    })),
    Options.optional,
    Options.withDescription("A label to recognise the key by (at most 200 characters).")
  ),
  expiresIn: Options.text("expires-in").pipe(
    Options.withSchema(Schema.NumberFromString.pipe(
      Schema.int(),
      Schema.between(1, 36_500)
    ).annotations({ message: () => ({ message: "--expires-in takes a whole number of days from 1 to 36500", override: true }) })),
    Options.optional,
    Options.withDescription("Days until the key expires; without it the key does not expire.")
  ),
  json
}, (options) =>
  Effect.gen(function*() {
    const keys = yield* ApiKeys
    const { apiKey, info } = yield* keys.create({
      brandId: options.brand,
      scopes: options.scopes,
      name: options.name,
      expiresIn: Option.map(options.expiresIn, Duration.days)
    })
    if (options.json) {
      return yield* Console.log(JSON.stringify({
        apiKey,
        keyId: info.keyId,
        brandId: info.brandId,
        scopes: info.scopes
      }))
    }
    yield* Console.log([
      "API key created. Store it now: it is shown only this once.",
      "",
      `  ${apiKey}`,
      "",
      `key id:   ${info.keyId}`,
      `brand:    ${info.brandId}`,
      `scopes:   ${info.scopes.join(", ")}`,
      `expires:  ${isoOrNever(info.expiresAt)}`
    ].join("\n"))
  })).pipe(Command.withDescription("Create an API key and print it once."))

const status = (key: ApiKeyInfo, now: DateTime.Utc) =>
  key.revokedAt !== null
    ? "revoked"
    : key.expiresAt !== null && DateTime.lessThanOrEqualTo(key.expiresAt, now)
    ? "expired"
    : "active"

/** A name as a table shows it: control characters escaped as in JSON, no name (or an empty one) as `-`. */
const shownName = (name: string | null) =>
  name === null || name === "" ? "-" : name.replace(/[\p{Cc}\p{Zl}\p{Zp}]/gu, (c) => JSON.stringify(c).slice(1, -1))

/** `text` cut to `width` terminal columns (wide characters count two), with `…` when cut. */
const fit = (text: string, width: number) => {
  if (Bun.stringWidth(text) <= width) return text
  let cut = ""
  for (const character of text) {
    if (Bun.stringWidth(cut + character) > width - 1) break
    cut += character
  }
  return `${cut}…`
}

const padTo = (text: string, width: number) => text + " ".repeat(Math.max(0, width - Bun.stringWidth(text)))

/** The widest a name column gets: on a terminal, what is left of its width; elsewhere 40. */
const nameWidth = (otherColumns: number) => Math.max(8, (process.stdout.columns ?? otherColumns + 40) - otherColumns)

/** Columns padded by display width; the column at `flexible` is cut to fit the terminal. */
const table = (rows: ReadonlyArray<ReadonlyArray<string>>, flexible: number) => {
  const widthOf = (column: number) => Math.max(...rows.map((row) => Bun.stringWidth(row[column]!)))
  const others = rows[0]!.reduce((sum, _, column) => column === flexible ? sum : sum + widthOf(column) + 2, 0)
  const cells = rows.map((row) => row.map((cell, column) => column === flexible ? fit(cell, nameWidth(others)) : cell))
  const widths = cells[0]!.map((_, column) => Math.max(...cells.map((row) => Bun.stringWidth(row[column]!))))
  return cells.map((row) => row.map((cell, column) => padTo(cell, widths[column]!)).join("  ").trimEnd()).join("\n")
}

const list = Command.make("list", { json }, (options) =>
  Effect.gen(function*() {
    const keys = yield* (yield* ApiKeys).list
    const now = yield* DateTime.now
    if (options.json) {
      return yield* Console.log(JSON.stringify(keys.map((key) => ({
        keyId: key.keyId,
        brandId: key.brandId,
        name: key.name,
        scopes: key.scopes,
        status: status(key, now),
        createdAt: DateTime.formatIso(key.createdAt),
        expiresAt: key.expiresAt === null ? null : DateTime.formatIso(key.expiresAt),
        revokedAt: key.revokedAt === null ? null : DateTime.formatIso(key.revokedAt)
      }))))
    }
    if (keys.length === 0) return yield* Console.log("No API keys yet: create one with `keys create`.")
    yield* Console.log(table([
      ["KEY ID", "BRAND", "NAME", "SCOPES", "STATUS", "CREATED", "EXPIRES"],
      ...keys.map((key) => [
        key.keyId,
        key.brandId,
        shownName(key.name),
        key.scopes.join(","),
        status(key, now),
        DateTime.formatIso(key.createdAt),
        isoOrNever(key.expiresAt)
      ])
    ], 2))
  })).pipe(Command.withDescription("List API keys (never their secrets)."))

const keyIdArg = Args.text({ name: "keyId" }).pipe(
  Args.withDescription("The key id that `keys list` shows, or the whole API key (cak_<keyId>_<secret>): its id is revoked.")
)

/** The key id in what the user typed: a key id, or a whole key whose secret is never repeated back. */
const keyIdOf = (typed: string): string | undefined =>
  /^(?:cak_)?([a-z0-9]{16})(?:_[^\s]*)?$/.exec(typed.trim())?.[1]

const revoke = Command.make("revoke", { typed: keyIdArg }, ({ typed }) =>
  Effect.gen(function*() {
    const keyId = keyIdOf(typed)
    if (keyId === undefined) {
      // Whatever was typed may hold a secret: it is not printed.
      yield* Console.error("That is neither a key id (16 characters a-z, 0-9, as `keys list` shows) nor an API key (cak_<keyId>_<secret>).")
      return yield* Effect.sync(() => void (process.exitCode = 2))
    }
    const revoked = yield* (yield* ApiKeys).revoke(keyId)
    if (!revoked) {
      yield* Console.error(`No active API key with id ${keyId}.`)
      return yield* Effect.sync(() => void (process.exitCode = 1))
    }
    yield* Console.log(`Revoked API key ${keyId}: it is refused from the next request on (within 1 s on PostgreSQL).`)
  })).pipe(Command.withDescription("Revoke an API key at once."))

const keys = Command.make("keys").pipe(
  Command.withDescription("Manage API keys in the database at DATABASE_URL."),
  Command.withSubcommands([
    create.pipe(Command.provide(KeysLive)),
    list.pipe(Command.provide(KeysLive)),
    revoke.pipe(Command.provide(KeysLive))
  ])
)

const ansi = /\x1b\[[0-9;]*m/g
/** What @effect/cli prints under every option whatever it is for: its type, said in words. */
const genericLine = /^ *(A user-defined piece of text\.|An integer\.|A true or false value\.)$/

/** The command words typed before the first option (`keys create`), as the help text is for them. */
const commandWords = (argv: ReadonlyArray<string>) => {
  const words: Array<string> = []
  for (const word of argv.slice(2)) {
    if (word.startsWith("-")) break
    words.push(word)
  }
  return words
}

/**
 * Help as @effect/cli prints it, with two fixes: a subcommand's usage line names the program and
 * the commands above it (`$ campaign-api keys create …`, not `$ create …`), and a command list
 * puts each description under its command instead of padding every line to the longest usage.
 */
const fixHelp = (text: string, words: ReadonlyArray<string>) => {
  const last = words.at(-1)
  const withProgram = last === undefined
    ? text
    : text.replace(
      // The word is what the user typed: escaped before it goes into the pattern.
      new RegExp(`^((?:${ansi.source})*)\\$ ${last.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}\\b`, "m"),
      `$1$ campaign-api ${words.join(" ")}`
    )
  return withProgram.replace(/^( {2}- .*?\S) {2,}(\S.*)$/gm, "$1\n      $2")
}

/**
 * The command line's own output as people read it: no colour codes when it is not a terminal or
 * `NO_COLOR` is set (https://no-color.org), and help without the type lines that @effect/cli
 * prints under every option.
 */
const readable = (text: string, words: ReadonlyArray<string>) => {
  const plain = process.stdout.isTTY && !process.env["NO_COLOR"] ? text : text.replace(ansi, "")
  const lines = plain.split("\n").filter((line) => !genericLine.test(line.replace(ansi, ""))).join("\n")
    .replace(/\n{3,}/g, "\n\n")
  return lines.includes("USAGE") ? fixHelp(lines, words) : lines
}

/** The default console, with `readable` applied to what the command line `argv` prints. */
export const CliConsole = (argv: ReadonlyArray<string>) =>
  Effect.map(Console.consoleWith(Effect.succeed), (console): Console.Console => {
    const words = commandWords(argv)
    const shown = (arg: unknown) => typeof arg === "string" ? readable(arg, words) : arg
    return { ...console, log: (...args) => console.log(...args.map(shown)), error: (...args) => console.error(...args.map(shown)) }
  })

const run = Command.make("campaign-api").pipe(
  Command.withDescription(
    "Campaign Activation and Identity API: the server and its key management. Every command takes --help; the program takes --version."
  ),
  Command.withSubcommands([serve, keys]),
  Command.run({ name: "campaign-api", version })
)

const keyCommands = ["create", "list", "revoke"]
const valueOptions = ["--brand", "--scopes", "--name", "--expires-in"]

/**
 * Two usage errors that @effect/cli reports confusingly, said plainly: an unknown `keys` command
 * (it lists the top-level commands instead) and an option given without its value (it calls the
 * option an unknown argument).
 */
const usageProblem = (args: ReadonlyArray<string>): string | undefined => {
  if (args[0] === "keys" && args[1] !== undefined && !args[1].startsWith("-") && !keyCommands.includes(args[1])) {
    return `Unknown command 'keys ${args[1]}': use one of ${keyCommands.join(", ")} (see campaign-api keys --help).`
  }
  if (args[0] !== "keys" || args[1] !== "create") return undefined
  const bare = args.findIndex((arg, i) => valueOptions.includes(arg) && (args[i + 1] === undefined || args[i + 1]!.startsWith("--")))
  return bare === -1 ? undefined : `${args[bare]} needs a value (see campaign-api keys create --help).`
}

/** The command line: `argv` as `process.argv` has it. */
export const cli = (argv: ReadonlyArray<string>) => {
  const problem = usageProblem(argv.slice(2))
  return problem === undefined
    ? run(argv)
    : Effect.zipRight(Console.error(problem), Effect.fail(ValidationError.invalidArgument(HelpDoc.p(problem))))
}
