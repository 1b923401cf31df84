import { Args, Command, Options } from "@effect/cli"
import { Console, DateTime, Duration, Effect, Layer, Option, Schema } from "effect"
import { ApiKeys } from "./ApiKeys.ts"
import { KeysLive, ServerLive } from "./App.ts"
import { type ApiKeyInfo, BrandId, Scope } from "./Domain/ApiKey.ts"
import { version } from "./Version.ts"

const serve = Command.make("serve", {}, () => Layer.launch(ServerLive)).pipe(
  Command.withDescription("Start the HTTP API (PORT, HOST, DATABASE_URL, RATE_LIMIT_*, IDEMPOTENCY_TTL_HOURS, LOG_LEVEL, OTEL_EXPORTER_OTLP_ENDPOINT).")
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
  name: Options.text("name").pipe(Options.optional, Options.withDescription("A label to recognise the key by.")),
  expiresIn: Options.integer("expires-in").pipe(
    Options.withSchema(Schema.Int.pipe(
      Schema.between(1, 36_500, { message: () => "--expires-in takes a number of days from 1 to 36500" })
    )),
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

const table = (rows: ReadonlyArray<ReadonlyArray<string>>) => {
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => row[column]!.length)))
  return rows.map((row) => row.map((cell, column) => cell.padEnd(widths[column]!)).join("  ").trimEnd()).join("\n")
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
        key.name ?? "-",
        key.scopes.join(","),
        status(key, now),
        DateTime.formatIso(key.createdAt),
        isoOrNever(key.expiresAt)
      ])
    ]))
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
    yield* Console.log(`Revoked API key ${keyId}: it is refused from the next request on.`)
  })).pipe(Command.withDescription("Revoke an API key at once."))

const keys = Command.make("keys").pipe(
  Command.withDescription("Manage API keys in the database at DATABASE_URL."),
  Command.withSubcommands([
    create.pipe(Command.provide(KeysLive)),
    list.pipe(Command.provide(KeysLive)),
    revoke.pipe(Command.provide(KeysLive))
  ])
)

export const cli = Command.make("campaign-api").pipe(
  Command.withDescription("Campaign Activation and Identity API: the server and its key management."),
  Command.withSubcommands([serve, keys]),
  Command.run({ name: "campaign-api", version })
)
