import { Args, Command, HelpDoc, Options, ValidationError } from "@effect/cli"
import * as Span from "@effect/cli/HelpDoc/Span"
import { Array as Arr, Config, Console, DateTime, Duration, Effect, Layer, Option, ParseResult, Schema } from "effect"
import { existsSync, writeSync } from "node:fs"
import { ApiKeys, maxGrace } from "./ApiKeys.ts"
import { KeysLive, KeysOfExistingLive, ServerLive } from "./App.ts"
import { databaseName, type DatabaseTarget, KeysConfig, settingsList } from "./Config.ts"
import { backUp, databaseToBackUp } from "./Database/Backup.ts"
import { SqlLive } from "./Database/Sql.ts"
import type { KeyChangesRequested } from "./ApiKeys/ApiKeysRepo.ts"
import { type ApiKeyInfo, BrandId, Scope } from "./Domain/ApiKey.ts"
import { version } from "./Version.ts"

const serve = Command.make("serve", {}, () => Layer.launch(ServerLive)).pipe(
  Command.withDescription(
    "Start the HTTP API, configured by environment variables alone, each optional (serve --help lists them; see the README's Configuration)."
  )
)

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

const scopesMessage = `--scopes takes a comma-separated list of ${Scope.literals.join(", ")}`

const ScopeList = Schema.transform(
  Schema.String,
  Schema.Array(Scope).pipe(Schema.minItems(1)),
  {
    strict: false,
    // Each scope once, whatever was typed.
    decode: (text) => [...new Set(text.split(",").map((s) => s.trim()).filter((s) => s !== ""))],
    encode: (scopes) => scopes.join(",")
  }
).annotations({ message: () => ({ message: scopesMessage, override: true }) })

const json = Options.boolean("json").pipe(Options.withDescription("Print JSON instead of text."))

const scopesOption = Options.text("scopes").pipe(
  Options.withSchema(ScopeList),
  Options.withDescription(`Comma-separated scopes: ${Scope.literals.join(", ")}.`)
)

const nameOption = Options.text("name").pipe(
  Options.withSchema(Schema.String.pipe(Schema.maxLength(200)).annotations({
    message: () => ({ message: "--name takes at most 200 characters", override: true })
  })),
  Options.optional,
  Options.withDescription("A label to recognise the key by (at most 200 characters).")
)

const rateLimitMessage = "--rate-limit takes <requests>/<seconds>, such as 600/60 (1 to 1000000 requests per 1 to 86400 seconds)"

/** `600/60`: 600 requests per 60 seconds (README, The key command line). */
const RateLimitText = Schema.transformOrFail(
  Schema.String,
  Schema.Struct({ max: Schema.Int.pipe(Schema.between(1, 1_000_000)), windowSeconds: Schema.Int.pipe(Schema.between(1, 86_400)) }),
  {
    strict: true,
    decode: (text, _, ast) => {
      const match = /^([0-9]{1,7})\/([0-9]{1,5})$/.exec(text.trim())
      return match === null
        ? ParseResult.fail(new ParseResult.Type(ast, text))
        : ParseResult.succeed({ max: Number(match[1]), windowSeconds: Number(match[2]) })
    },
    encode: ({ max, windowSeconds }) => ParseResult.succeed(`${max}/${windowSeconds}`)
  }
)

const limitOption = <A>(schema: Schema.Schema<A, string>, message: string, description: string) =>
  Options.text("rate-limit").pipe(
    Options.withSchema(schema.annotations({ message: () => ({ message, override: true }) })),
    Options.optional,
    Options.withDescription(description)
  )

const rateLimitOption = limitOption(
  RateLimitText,
  rateLimitMessage,
  "The key's own rate limit as <requests>/<seconds> (600/60); without it the server's RATE_LIMIT_MAX per RATE_LIMIT_WINDOW_SECONDS."
)

const rateLimitOrDefault = limitOption(
  Schema.Union(Schema.Literal("default"), RateLimitText),
  `${rateLimitMessage}, or default`,
  "The key's own rate limit as <requests>/<seconds> (600/60), or default: the server's RATE_LIMIT_MAX per RATE_LIMIT_WINDOW_SECONDS."
)

const graceMessage = "--grace takes 0 or a whole number of minutes, hours or days (90m, 24h, 7d), at most 30 days"

/** `0`, `90m`, `24h`, `7d`: how long a rolled key's previous secret keeps working. */
const GraceText = Schema.transformOrFail(Schema.String, Schema.DurationFromSelf, {
  strict: true,
  decode: (text, _, ast) => {
    const match = /^(?:0|([0-9]{1,6})([mhd]))$/.exec(text.trim())
    const grace = match === null
      ? undefined
      : match[1] === undefined
      ? Duration.zero
      : Duration.decode(`${Number(match[1])} ${({ m: "minutes", h: "hours", d: "days" } as const)[match[2] as "m" | "h" | "d"]}`)
    return grace === undefined || Duration.greaterThan(grace, maxGrace)
      ? ParseResult.fail(new ParseResult.Type(ast, text))
      : ParseResult.succeed(grace)
  },
  encode: (grace) => ParseResult.succeed(`${Duration.toMinutes(grace)}m`)
}).annotations({ message: () => ({ message: graceMessage, override: true }) })

const isoOrNever = (date: DateTime.Utc | null) => date === null ? "never" : DateTime.formatIso(date)

/** A key's rate limit as the command line takes it: `600/60`, or `default` for the server's. */
const limitOf = (key: ApiKeyInfo) => key.rateLimit === null ? "default" : `${key.rateLimit.max}/${key.rateLimit.windowSeconds}`

/** Last use to the minute, as it is kept: `2026-11-25T16:29Z`. */
const minuteOf = (date: DateTime.Utc) => `${DateTime.formatIso(date).slice(0, 16)}Z`

const create = Command.make("create", {
  brand: Options.text("brand").pipe(
    Options.withSchema(BrandId.annotations({ message: () => "--brand takes the brand's UUID" })),
    Options.withDescription("The brand the key acts for (a UUID).")
  ),
  scopes: scopesOption,
  name: nameOption,
  expiresIn: Options.text("expires-in").pipe(
    Options.withSchema(Schema.NumberFromString.pipe(
      Schema.int(),
      Schema.between(1, 36_500)
    ).annotations({ message: () => ({ message: "--expires-in takes a whole number of days from 1 to 36500", override: true }) })),
    Options.optional,
    Options.withDescription("Days until the key expires; without it the key does not expire.")
  ),
  rateLimit: rateLimitOption,
  json
}, (options) =>
  Effect.gen(function*() {
    const keys = yield* ApiKeys
    const { apiKey, info } = yield* keys.create({
      brandId: options.brand,
      scopes: options.scopes,
      name: options.name,
      expiresIn: Option.map(options.expiresIn, Duration.days),
      rateLimit: Option.getOrNull(options.rateLimit)
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
      `expires:  ${isoOrNever(info.expiresAt)}`,
      `limit:    ${limitOf(info)}`
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
  { header: "BRAND", full: ({ key }) => key.brandId, short: ({ key }) => `${key.brandId.slice(0, 8)}…`, priority: 4 },
  { header: "NAME", full: ({ key }) => shownName(key.name), fills: 12 },
  { header: "SCOPES", full: ({ key }) => key.scopes.join(","), short: ({ key }) => scopesInShort(key.scopes), priority: 3 },
  { header: "STATUS", full: ({ status }) => status },
  {
    header: "CREATED",
    full: ({ key }) => DateTime.formatIso(key.createdAt),
    short: ({ key }) => DateTime.formatIsoDateUtc(key.createdAt),
    priority: 1
  },
  { header: "EXPIRES", full: ({ key }) => isoOrNever(key.expiresAt), short: ({ key }) => dateOrNever(key.expiresAt), priority: 2 },
  {
    header: "LAST USED",
    full: ({ key }) => key.lastUsedAt === null ? "never" : minuteOf(key.lastUsedAt),
    short: ({ key }) => dateOrNever(key.lastUsedAt),
    priority: 6
  },
  { header: "LIMIT", full: ({ key }) => limitOf(key), priority: 5 }
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

/** A key as `keys list --json` and `keys show --json` print it (README, The key command line). */
const jsonRow = (key: ApiKeyInfo, now: DateTime.Utc) => ({
  keyId: key.keyId,
  brandId: key.brandId,
  name: key.name,
  scopes: key.scopes,
  status: status(key, now),
  createdAt: DateTime.formatIso(key.createdAt),
  expiresAt: key.expiresAt === null ? null : DateTime.formatIso(key.expiresAt),
  revokedAt: key.revokedAt === null ? null : DateTime.formatIso(key.revokedAt),
  lastUsedAt: key.lastUsedAt === null ? null : DateTime.formatIso(key.lastUsedAt),
  rateLimit: key.rateLimit === null ? null : limitOf(key)
})

const list = Command.make("list", {
  brand: Options.text("brand").pipe(
    Options.withSchema(BrandId.annotations({ message: () => "--brand takes the brand's UUID" })),
    Options.optional,
    Options.withDescription("Only this brand's keys (a UUID).")
  ),
  json
}, (options) =>
  Effect.gen(function*() {
    const all = yield* (yield* ApiKeys).list
    const keys = Option.match(options.brand, {
      onNone: () => all,
      onSome: (brand) => all.filter((key) => key.brandId === brand.toLowerCase())
    })
    const now = yield* DateTime.now
    if (options.json) return yield* Console.log(JSON.stringify(keys.map((key) => jsonRow(key, now))))
    if (keys.length === 0) {
      return yield* Console.log(
        Option.isSome(options.brand)
          ? "No API keys for this brand."
          : "No API keys yet: create one with `keys create`."
      )
    }
    yield* Console.log(table(keys.map((key) => ({ key, status: status(key, now) })), yield* outputWidth))
  })).pipe(Command.withDescription("List API keys (never their secrets), with when each was last used and its rate limit."))

/**
 * Why what was typed for `keys <command>`'s key id is none: a whole key (`cak_<keyId>_<secret>`) is
 * answered with its id, so that the secret, once in the shell's history and the process list, is
 * not typed again; anything else is not repeated back, as it may hold a secret too.
 */
const notAKeyId = (command: string, typed: string) => {
  const keyId = /^cak_([a-z0-9]{16})(?:_|$)/.exec(typed.trim())?.[1]
  return keyId === undefined
    ? `That is not a key id: keys ${command} takes one as keys list shows it, 16 characters a-z and 0-9.`
    : `keys ${command} takes the key id alone, here ${keyId}, never the API key: its secret would stay in the shell's history.`
}

/**
 * The key `keys <command>` acts on: its id as `keys list` shows it, never the whole key, whose
 * secret would stay in the shell's history and show in the process list (README, The key command line).
 */
const keyIdArg = (command: string, what: string) =>
  Args.text({ name: "keyId" }).pipe(
    Args.withSchema(
      Schema.Trim.pipe(Schema.pattern(/^[a-z0-9]{16}$/)).annotations({
        message: (issue) => ({ message: notAKeyId(command, String(issue.actual)), override: true })
      })
    ),
    Args.withDescription(`The key id, as \`keys list\` shows it (never the whole API key): that key is ${what}.`)
  )

/** One sentence on stderr and the exit code: 2 for a usage error, 1 for a key that is not there (README, Exit codes). */
const failWith = (code: 1 | 2, sentence: string) =>
  Effect.zipRight(Console.error(sentence), Effect.sync(() => void (process.exitCode = code)))

const noActiveKey = (keyId: string) => failWith(1, `No active API key with id ${keyId}.`)

/** When a change reaches the servers (README, Running several instances). */
const takesEffect = "from the next request on (within 1 s on PostgreSQL)"

const revoke = Command.make("revoke", { keyId: keyIdArg("revoke", "revoked") }, ({ keyId }) =>
  Effect.flatMap(ApiKeys, (keys) => keys.revoke(keyId)).pipe(
    Effect.flatMap((revoked) => revoked ? Console.log(`Revoked API key ${keyId}: it is refused ${takesEffect}.`) : noActiveKey(keyId))
  )).pipe(Command.withDescription("Revoke an API key at once."))

const show = Command.make("show", { keyId: keyIdArg("show", "shown"), json }, ({ json, keyId }) =>
  Effect.gen(function*() {
    const key = (yield* (yield* ApiKeys).list).find((key) => key.keyId === keyId)
    if (key === undefined) return yield* failWith(1, `No API key with id ${keyId}.`)
    const now = yield* DateTime.now
    if (json) return yield* Console.log(JSON.stringify(jsonRow(key, now)))
    const lines: Array<readonly [string, string]> = [
      ["key id", key.keyId],
      ["brand", key.brandId],
      ["name", shownName(key.name)],
      ["scopes", key.scopes.join(", ")],
      ["status", status(key, now)],
      ["created", DateTime.formatIso(key.createdAt)],
      ["expires", isoOrNever(key.expiresAt)],
      ...(key.revokedAt === null ? [] : [["revoked", DateTime.formatIso(key.revokedAt)] as const]),
      ...(key.previousSecretEndsAt === null
        ? []
        : [[
          "previous secret",
          `works until ${DateTime.formatIso(key.previousSecretEndsAt)}, last used ${
            key.previousSecretLastUsedAt === null ? "never" : minuteOf(key.previousSecretLastUsedAt)
          }`
        ] as const]),
      ["rate limit", key.rateLimit === null ? "default (the server's)" : `${limitOf(key)} (requests/seconds)`],
      ["last used", key.lastUsedAt === null ? "never" : minuteOf(key.lastUsedAt)]
    ]
    yield* Console.log(lines.map(([label, value]) => `${`${label}:`.padEnd(17)}${value}`).join("\n"))
  })).pipe(Command.withDescription(
    "Show one API key (never its secret): its state, rate limit, when it was last used, and while a rolled key's previous secret works, when that one was."
  ))

const roll = Command.make("roll", {
  keyId: keyIdArg("roll", "given a new secret"),
  grace: Options.text("grace").pipe(
    Options.withSchema(GraceText),
    Options.withDefault(Duration.hours(24)),
    Options.withDescription(
      "How long the key's present secret keeps working: 0 (it stops at once), 90m, 24h, 7d; at most 30 days, never past the key's expiry. Default 24h."
    )
  ),
  json
}, ({ grace, json, keyId }) =>
  Effect.gen(function*() {
    const rolled = yield* (yield* ApiKeys).roll(keyId, grace)
    if (rolled === undefined) return yield* noActiveKey(keyId)
    const endsAt = DateTime.formatIso(rolled.previousSecretEndsAt)
    if (json) return yield* Console.log(JSON.stringify({ apiKey: rolled.apiKey, keyId: rolled.keyId, previousSecretEndsAt: endsAt }))
    const ended = DateTime.lessThanOrEqualTo(rolled.previousSecretEndsAt, yield* DateTime.now)
    yield* Console.log([
      "API key rolled. Store the new key now: it is shown only this once.",
      "",
      `  ${rolled.apiKey}`,
      "",
      `key id:           ${rolled.keyId}`,
      ended
        ? "previous secret:  refused from the next request on"
        : `previous secret:  works until ${endsAt}, then is refused`
    ].join("\n"))
  })).pipe(
    Command.withDescription(
      "Give a key a new secret, printed once; its key id, brand, scopes, name and limit stay, and its present secret keeps working for --grace."
    )
  )

const update = Command.make("update", {
  keyId: keyIdArg("update", "changed"),
  scopes: Options.optional(scopesOption),
  name: nameOption,
  rateLimit: rateLimitOrDefault
}, ({ keyId, ...options }) => {
  const changes: KeyChangesRequested = {
    ...Option.match(options.scopes, { onNone: () => ({}), onSome: (scopes) => ({ scopes }) }),
    ...Option.match(options.name, { onNone: () => ({}), onSome: (name) => ({ name }) }),
    ...Option.match(options.rateLimit, {
      onNone: () => ({}),
      onSome: (limit) => ({ rateLimit: limit === "default" ? null : limit })
    })
  }
  const said = [
    ...(changes.scopes === undefined ? [] : [`scopes ${changes.scopes.join(", ")}`]),
    ...(changes.name === undefined ? [] : [`name ${shownName(changes.name)}`]),
    ...(changes.rateLimit === undefined
      ? []
      : [`rate limit ${changes.rateLimit === null ? "default" : `${changes.rateLimit.max}/${changes.rateLimit.windowSeconds}`}`])
  ]
  if (said.length === 0) return failWith(2, "keys update changes --scopes, --name or --rate-limit: give at least one (see campaign-api keys update --help).")
  return Effect.flatMap(ApiKeys, (keys) => keys.update(keyId, changes)).pipe(
    Effect.flatMap((updated) =>
      updated ? Console.log(`Updated API key ${keyId}: ${said.join("; ")}. It applies ${takesEffect}.`) : noActiveKey(keyId)
    )
  )
}).pipe(Command.withDescription("Change an active key's scopes, name or rate limit; its secret and key id stay."))

/**
 * What a command that opens the database says first, on stderr so that `--json` output stays one
 * line: which database (README, The key command line). A SQLite file that `keys create` is about
 * to make is said to be new, as it may be the wrong directory or DATABASE_URL.
 */
const databaseNotice = (target: DatabaseTarget) =>
  Effect.sync(() => {
    const isNew = target._tag === "sqlite" && target.filename !== ":memory:" && !existsSync(target.filename)
    return `Database: ${databaseName(target)}${isNew ? " (new: no database was there)" : ""}`
  })

/**
 * A line on stderr that is not an error: written as it is, where Bun's `console.error` prints in
 * red on a terminal.
 */
const notice = (line: string) => Effect.sync(() => void writeSync(2, `${line}\n`))

/** `layer`, which opens the database `target` names, saying which one once it is open. */
const announced = <A, E, R>(target: DatabaseTarget, layer: Layer.Layer<A, E, R>) =>
  Layer.unwrapEffect(Effect.map(databaseNotice(target), (said) => Layer.tap(layer, () => notice(said))))

// Every variable the key commands read, read first: a bad one is named with the others, not alone.
const keysAnnounced = <E, R>(keys: Layer.Layer<ApiKeys, E, R>) =>
  Layer.unwrapEffect(Effect.map(KeysConfig, ([target]) => announced(target, keys)))

// Only `keys create` makes a database: a mistyped DATABASE_URL would otherwise give every command
// an empty database of its own, and a key created in none of them would work.
const keyCommands = [
  create.pipe(Command.provide(keysAnnounced(KeysLive))),
  list.pipe(Command.provide(keysAnnounced(KeysOfExistingLive))),
  show.pipe(Command.provide(keysAnnounced(KeysOfExistingLive))),
  roll.pipe(Command.provide(keysAnnounced(KeysOfExistingLive))),
  update.pipe(Command.provide(keysAnnounced(KeysOfExistingLive))),
  revoke.pipe(Command.provide(keysAnnounced(KeysOfExistingLive)))
] as const

const keys = Command.make("keys").pipe(
  Command.withDescription("Manage API keys in the database at DATABASE_URL."),
  Command.withSubcommands(keyCommands)
)

const backup = Command.make("backup", {
  file: Args.text({ name: "file" }).pipe(
    Args.withDescription("The new file to write the copy to; an existing file is never overwritten. The copy serves as DATABASE_URL as it is.")
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
 * (`serve`'s page also gains its variables: see `readable`.)
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
  const isHelp = text.replace(ansi, "").includes("USAGE")
  const whole = isHelp && words.length === 1 && words[0] === "serve" ? `${text.trimEnd()}\n\n${environmentHelp}` : text
  const plain = process.stdout.isTTY && !process.env["NO_COLOR"] ? whole : whole.replace(ansi, "")
  const lines = plain.split("\n").filter((line) => !genericLine.test(line.replace(ansi, ""))).join("\n")
    .replace(/\n{3,}/g, "\n\n")
  return isHelp ? fixHelp(lines, words) : lines
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

/** The `keys` commands' names, from the commands themselves. */
const keyCommandNames: ReadonlyArray<string> = keyCommands.flatMap((command) =>
  // Each command's own name type does not widen to `string` (its context tag is invariant in it).
  [...Command.getNames(command as unknown as Command.Command<string, never, unknown, unknown>)]
)
const valueOptions = ["--brand", "--scopes", "--name", "--expires-in", "--rate-limit", "--grace"]

/** @effect/cli's own options, which every command takes. */
const builtInOptions = ["--help", "-h", "--version", "--wizard", "--completions", "--log-level"]

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
const usageProblem = (args: ReadonlyArray<string>): string | undefined => {
  if (args[0] === "serve") return serveOption(args)
  if (args[0] === "keys" && args[1] !== undefined && !args[1].startsWith("-") && !keyCommandNames.includes(args[1])) {
    return `Unknown command 'keys ${args[1]}': use one of ${keyCommandNames.join(", ")} (see campaign-api keys --help).`
  }
  if (args[0] !== "keys" || args[1] === undefined || !keyCommandNames.includes(args[1])) return undefined
  const bare = args.findIndex((arg, i) => valueOptions.includes(arg) && (args[i + 1] === undefined || args[i + 1]!.startsWith("--")))
  return bare === -1 ? undefined : `${args[bare]} needs a value (see campaign-api keys ${args[1]} --help).`
}

/** The command line: `argv` as `process.argv` has it. */
export const cli = (argv: ReadonlyArray<string>) => {
  const problem = usageProblem(argv.slice(2))
  return problem === undefined
    // No database where one must be: one sentence, exit 1 (README, Exit codes).
    ? Effect.catchTag(run(argv), "NoDatabase", (missing) => failWith(1, missing.message))
    : Effect.zipRight(Console.error(problem), Effect.fail(ValidationError.invalidArgument(HelpDoc.p(problem))))
}
