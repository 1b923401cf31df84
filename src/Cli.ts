import { Args, Command, HelpDoc, Options, ValidationError } from "@effect/cli"
import { Config, Console, DateTime, Duration, Effect, Layer, Option, Schema } from "effect"
import { existsSync } from "node:fs"
import { ApiKeys } from "./ApiKeys.ts"
import { KeysLive, ServerLive } from "./App.ts"
import { databaseName, type DatabaseTarget, KeysConfig } from "./Config.ts"
import { backUp, databaseToBackUp } from "./Database/Backup.ts"
import { SqlLive } from "./Database/Sql.ts"
import { type ApiKeyInfo, BrandId, Scope } from "./Domain/ApiKey.ts"
import { version } from "./Version.ts"

const serve = Command.make("serve", {}, () => Layer.launch(ServerLive)).pipe(
  Command.withDescription(
    "Start the HTTP API, configured through the environment (PORT, HOST, DATABASE_URL, DATABASE_POOL_MAX, REDIS_URL, RATE_LIMIT_*, IDEMPOTENCY_TTL_HOURS, LOG_LEVEL, PUBLIC_URL, DOCS_ENABLED, OTEL_*, METRICS_PORT, METRICS_HOST; see the README)."
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

/** Scopes as `campaigns:rw,analytics:r`: each resource once, with the first letter of each of its actions. */
const scopesInShort = (scopes: ReadonlyArray<Scope>) => {
  const actions = new Map<string, string>()
  for (const scope of Scope.literals) {
    if (!scopes.includes(scope)) continue
    const [resource, action] = scope.split(":") as [string, string]
    actions.set(resource, (actions.get(resource) ?? "") + action[0])
  }
  return [...actions].map(([resource, letters]) => `${resource}:${letters}`).join(",")
}

const dateOrNever = (date: DateTime.Utc | null) => date === null ? "never" : DateTime.formatIsoDateUtc(date)

interface ListedKey {
  readonly key: ApiKeyInfo
  readonly status: string
}

/**
 * A column of `keys list`. A table wider than the output gives way column by column, from the
 * lowest `priority` up: first each takes its `short` form, then, if that is still too wide, each
 * is dropped (README, The key command line). A column without a priority is always shown whole,
 * except the one that `fills`: it is cut with `…` to the width the others leave, down to
 * `fills` columns before anything else gives way.
 */
interface Column {
  readonly header: string
  readonly full: (listed: ListedKey) => string
  readonly short?: (listed: ListedKey) => string
  readonly priority?: number
  readonly fills?: number
}

const columns: ReadonlyArray<Column> = [
  { header: "KEY ID", full: ({ key }) => key.keyId },
  { header: "BRAND", full: ({ key }) => key.brandId, short: ({ key }) => `${key.brandId.slice(0, 8)}…`, priority: 3 },
  { header: "NAME", full: ({ key }) => shownName(key.name), fills: 12 },
  { header: "SCOPES", full: ({ key }) => key.scopes.join(","), short: ({ key }) => scopesInShort(key.scopes), priority: 4 },
  { header: "STATUS", full: ({ status }) => status },
  {
    header: "CREATED",
    full: ({ key }) => DateTime.formatIso(key.createdAt),
    short: ({ key }) => DateTime.formatIsoDateUtc(key.createdAt),
    priority: 1
  },
  { header: "EXPIRES", full: ({ key }) => isoOrNever(key.expiresAt), short: ({ key }) => dateOrNever(key.expiresAt), priority: 2 }
]

type Shown = ReadonlyArray<{ readonly column: Column; readonly form: "full" | "short" }>

/** Every way the table can be shown, widest first: each one column's next step narrower than the one before. */
const narrowings: ReadonlyArray<Shown> = (() => {
  const givingWay = columns.filter((column) => column.priority !== undefined).sort((a, b) => a.priority! - b.priority!)
  const steps = [
    ...givingWay.filter((column) => column.short !== undefined).map((column) => (shown: Shown): Shown =>
      shown.map((entry) => entry.column === column ? { column, form: "short" } : entry)
    ),
    ...givingWay.map((column) => (shown: Shown): Shown => shown.filter((entry) => entry.column !== column))
  ]
  return steps.reduce<Array<Shown>>(
    (layouts, step) => [...layouts, step(layouts.at(-1)!)],
    [columns.map((column) => ({ column, form: "full" }))]
  )
})()

const widest = (cells: ReadonlyArray<string>) => Math.max(...cells.map((cell) => Bun.stringWidth(cell)))

/** The keys as the widest of `narrowings` that fits in `width` terminal columns (the narrowest when none does). */
const table = (listed: ReadonlyArray<ListedKey>, width: number) => {
  const laidOut = narrowings.map((shown) =>
    shown.map(({ column, form }) => {
      const cells = [column.header, ...listed.map(form === "short" ? column.short! : column.full)]
      return { column, cells, width: column.fills === undefined ? widest(cells) : Math.min(column.fills, widest(cells)) }
    })
  )
  const tableWidth = (shown: ReadonlyArray<{ readonly width: number }>) =>
    shown.reduce((sum, { width }) => sum + width, 2 * (shown.length - 1))
  const chosen = laidOut.find((shown) => tableWidth(shown) <= width) ?? laidOut.at(-1)!
  const left = width - tableWidth(chosen)
  const fitted = chosen.map(({ cells, column, width }) =>
    column.fills === undefined ? cells : cells.map((cell) => fit(cell, width + Math.max(0, left)))
  )
  const widths = fitted.map(widest)
  return fitted[0]!.map((_, row) => fitted.map((cells, column) => padTo(cells[row]!, widths[column]!)).join("  ").trimEnd())
    .join("\n")
}

/**
 * The width the table fits in: the terminal's; when the output is not a terminal, `COLUMNS` if
 * it is a whole number above 0, else 80 (README, The key command line).
 */
const outputWidth = process.stdout.isTTY && process.stdout.columns > 0
  ? Effect.succeed(process.stdout.columns)
  : Config.integer("COLUMNS").pipe(
    Config.validate({ message: "not above 0", validation: (columns) => columns > 0 }),
    Config.orElse(() => Config.succeed(80))
  )

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
    yield* Console.log(table(keys.map((key) => ({ key, status: status(key, now) })), yield* outputWidth))
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

/**
 * What a command that opens the database says first, on stderr so that `--json` output stays one
 * line: which database (README, The key command line). A SQLite file that is not there yet is
 * about to be made: said at once, as it is most likely the wrong directory or DATABASE_URL.
 */
const databaseNotice = (target: DatabaseTarget) =>
  Effect.sync(() => {
    const isNew = target._tag === "sqlite" && target.filename !== ":memory:" && !existsSync(target.filename)
    return `Database: ${databaseName(target)}${isNew ? " (new: no database was there)" : ""}`
  })

/** `layer`, which opens the database `target` names, saying which one once it is open. */
const announced = <A, E, R>(target: DatabaseTarget, layer: Layer.Layer<A, E, R>) =>
  Layer.unwrapEffect(Effect.map(databaseNotice(target), (notice) => Layer.tap(layer, () => Console.error(notice))))

// Every variable the key commands read, read first: a bad one is named with the others, not alone.
const KeysAnnounced = Layer.unwrapEffect(Effect.map(KeysConfig, ([target]) => announced(target, KeysLive)))

const keys = Command.make("keys").pipe(
  Command.withDescription("Manage API keys in the database at DATABASE_URL."),
  Command.withSubcommands([
    create.pipe(Command.provide(KeysAnnounced)),
    list.pipe(Command.provide(KeysAnnounced)),
    revoke.pipe(Command.provide(KeysAnnounced))
  ])
)

/** Refused, or failed: one sentence on stderr and exit 1 (README, Backups). */
const backupFailed = (message: string) =>
  Effect.zipRight(Console.error(message), Effect.sync(() => void (process.exitCode = 1)))

const backup = Command.make("backup", {
  file: Args.text({ name: "file" }).pipe(
    Args.withDescription("The new file to write the copy to; an existing file is never overwritten. The copy serves as DATABASE_URL as it is.")
  )
}, ({ file }) =>
  databaseToBackUp.pipe(
    Effect.flatMap((target) => backUp(file, announced(target, SqlLive))),
    Effect.flatMap((written) => Console.log(`Backup written: ${written.file} (${written.bytes} bytes).`)),
    Effect.catchTags({
      BackupRefused: (refused) => backupFailed(refused.message),
      SqlError: (error) =>
        backupFailed(`No backup was written: ${error.cause instanceof Error ? error.cause.message : error.message}.`)
    })
  )).pipe(
    Command.withDescription(
      "Write a consistent copy of the SQLite database at DATABASE_URL to a new file, with mode 0600, while the server runs and writes (PostgreSQL: use pg_dump)."
    )
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
    "Campaign Activation and Identity API: the server, its key management and backups. Every command takes --help; the program takes --version."
  ),
  Command.withSubcommands([serve, keys, backup]),
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
