import { Command, Options } from "@effect/cli"
import { Console, DateTime, Duration, Effect, Layer, Option } from "effect"
import { ApiKeys, type KeyUpdate } from "../ApiKeys.ts"
import { KeysConfig } from "../Config.ts"
import {
  BrandText,
  expiresInOption,
  GraceText,
  json,
  keyIdArg,
  nameOption,
  rateLimitOption,
  rateLimitOrDefault,
  scopesOption
} from "./KeyOptions.ts"
import { KeysLive, KeysOfExistingLive } from "./KeyStore.ts"
import { outputWidth, table } from "./KeyTable.ts"
import { isoOrNever, jsonRow, limitOf, minuteOf, shownName, status } from "./KeyText.ts"
import { announced, failWith } from "./Output.ts"

// Every variable the key commands read, read first: a bad one is named with the others, not alone.
const keysAnnounced = <E, R>(keys: Layer.Layer<ApiKeys, E, R>) =>
  Layer.unwrapEffect(Effect.map(KeysConfig, ([target]) => announced(target, keys)))

const create = Command.make("create", {
  brand: Options.text("brand").pipe(
    Options.withSchema(BrandText),
    Options.withDescription("The brand the key acts for (a UUID).")
  ),
  scopes: scopesOption,
  name: nameOption,
  expiresIn: expiresInOption("Days until the key expires; without it the key does not expire."),
  rateLimit: rateLimitOption,
  json
}, (options) =>
  Effect.gen(function*() {
    const keys = yield* ApiKeys
    const { apiKey, info } = yield* keys.create({
      brandId: options.brand,
      scopes: options.scopes,
      name: options.name,
      expiresIn: options.expiresIn,
      rateLimit: Option.getOrNull(options.rateLimit)
    })
    // The key as `keys show --json` prints it, and its secret first (docs/operators.md, The key command line).
    if (options.json) return yield* Console.log(JSON.stringify({ apiKey, ...jsonRow(info, yield* DateTime.now) }))
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

const list = Command.make("list", {
  brand: Options.text("brand").pipe(
    Options.withSchema(BrandText),
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
  })).pipe(
    Command.withDescription("List API keys (never their secrets), with when each was last used and its rate limit.")
  )

const noActiveKey = (keyId: string) => failWith(1, `No active API key with id ${keyId}.`)

/** When a change reaches the servers (docs/operators.md, Running several instances). */
const takesEffect =
  "from the next request on, on every instance (on PostgreSQL as soon as the change is announced: milliseconds, 1 s at worst)"

const revoke = Command.make(
  "revoke",
  { keyId: keyIdArg("revoke", "revoked") },
  ({ keyId }) =>
    Effect.flatMap(ApiKeys, (keys) => keys.revoke(keyId)).pipe(
      Effect.flatMap((revoked) =>
        revoked ? Console.log(`Revoked API key ${keyId}: it is refused ${takesEffect}.`) : noActiveKey(keyId)
      )
    )
).pipe(Command.withDescription("Revoke an API key at once."))

const show = Command.make(
  "show",
  { keyId: keyIdArg("show", "shown"), json },
  ({ json, keyId }) =>
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
          : [
            [
              "previous secret",
              `works until ${DateTime.formatIso(key.previousSecretEndsAt)}, last used ${
                key.previousSecretLastUsedAt === null ? "never" : minuteOf(key.previousSecretLastUsedAt)
              }`
            ] as const
          ]),
        ["rate limit", key.rateLimit === null ? "default (the server's)" : `${limitOf(key)} (requests/seconds)`],
        ["last used", key.lastUsedAt === null ? "never" : minuteOf(key.lastUsedAt)]
      ]
      yield* Console.log(lines.map(([label, value]) => `${`${label}:`.padEnd(17)}${value}`).join("\n"))
    })
).pipe(Command.withDescription(
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
    if (json) {
      return yield* Console.log(
        JSON.stringify({ apiKey: rolled.apiKey, keyId: rolled.keyId, previousSecretEndsAt: endsAt })
      )
    }
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
  rateLimit: rateLimitOrDefault,
  expiresIn: expiresInOption(
    "Days from now until the key expires, as at create. The expiry covers both secrets of a rolled key: one before the previous secret's grace ends ends that grace too."
  ),
  noExpiry: Options.boolean("no-expiry").pipe(
    Options.withDescription("The key no longer expires (a rolled key's previous secret still ends with its grace).")
  )
}, ({ keyId, ...options }) => {
  if (options.noExpiry && Option.isSome(options.expiresIn)) {
    return failWith(2, "--expires-in and --no-expiry contradict each other: give one of them.")
  }
  const changes: KeyUpdate = {
    ...Option.match(options.scopes, { onNone: () => ({}), onSome: (scopes) => ({ scopes }) }),
    ...Option.match(options.name, { onNone: () => ({}), onSome: (name) => ({ name }) }),
    ...Option.match(options.rateLimit, {
      onNone: () => ({}),
      onSome: (limit) => ({ rateLimit: limit === "default" ? null : limit })
    }),
    ...(options.noExpiry ? { expiresIn: null } : Option.match(options.expiresIn, {
      onNone: () => ({}),
      onSome: (expiresIn) => ({ expiresIn })
    }))
  }
  const said = [
    ...(changes.scopes === undefined ? [] : [`scopes ${changes.scopes.join(", ")}`]),
    ...(changes.name === undefined ? [] : [`name ${shownName(changes.name)}`]),
    ...(changes.rateLimit === undefined
      ? []
      : [
        `rate limit ${
          changes.rateLimit === null ? "default" : `${changes.rateLimit.max}/${changes.rateLimit.windowSeconds}`
        }`
      ])
  ]
  if (said.length === 0 && changes.expiresIn === undefined) {
    return failWith(
      2,
      "keys update changes --scopes, --name, --rate-limit, --expires-in or --no-expiry: give at least one (run the same command with --help to see what each takes)."
    )
  }
  return Effect.flatMap(ApiKeys, (keys) => keys.update(keyId, changes)).pipe(
    Effect.flatMap((updated) => {
      if (updated === undefined) return noActiveKey(keyId)
      const expiry = changes.expiresIn === undefined
        ? []
        : [updated.expiresAt === null ? "no expiry" : `expires ${DateTime.formatIso(updated.expiresAt)}`]
      // A key's expiry covers both of a roll's secrets: said when it ends the previous one's grace early.
      const cut = updated.graceCutTo === null
        ? []
        : [
          `The secret it had before its last roll now stops then too, before its grace would have ended: a key's expiry covers both its secrets.`
        ]
      return Console.log(
        [`Updated API key ${keyId}: ${[...said, ...expiry].join("; ")}. It applies ${takesEffect}.`, ...cut].join(" ")
      )
    }),
    // Opened once the usage is known good: a usage error is exit 2 whatever the database (docs/operators.md, Exit codes).
    Effect.provide(keysAnnounced(KeysOfExistingLive))
  )
}).pipe(
  Command.withDescription(
    "Change an active key's scopes, name, rate limit or expiry; its secret and key id stay."
  )
)

// Only `keys create` makes a database: a mistyped DATABASE_URL would otherwise give every command
// an empty database of its own, and a key created in none of them would work.
export const keyCommands = [
  create.pipe(Command.provide(keysAnnounced(KeysLive))),
  list.pipe(Command.provide(keysAnnounced(KeysOfExistingLive))),
  show.pipe(Command.provide(keysAnnounced(KeysOfExistingLive))),
  roll.pipe(Command.provide(keysAnnounced(KeysOfExistingLive))),
  update,
  revoke.pipe(Command.provide(keysAnnounced(KeysOfExistingLive)))
] as const

export const keys = Command.make("keys").pipe(
  Command.withDescription("Manage API keys in the database at DATABASE_URL."),
  Command.withSubcommands(keyCommands)
)
