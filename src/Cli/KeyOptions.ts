import { Args, Options } from "@effect/cli"
import { Duration, ParseResult, Schema } from "effect"
import { maxGrace } from "../ApiKeys.ts"
import { BrandId, Scope } from "../Domain/ApiKey.ts"

/** An example brand, for the sentences that say what `--brand` takes. */
const exampleBrand = "0b6f8c1e-4f5a-4c2b-9d7e-1a2b3c4d5e6f"

/**
 * What each key command option takes, as the usage errors say it: an invalid value (`--brand
 * takes …`), a missing one (`keys create needs --brand: …`) and an option without its value (Usage.ts).
 */
export const optionTakes: Readonly<Record<string, string>> = {
  "--brand": `the brand's UUID, e.g. --brand ${exampleBrand}`,
  "--scopes": `a comma-separated list of ${Scope.literals.join(", ")}, e.g. --scopes campaigns:read`,
  "--name": "a label of at most 200 characters, in quotes if it has spaces",
  "--expires-in": "a whole number of days from 1 to 36500, e.g. --expires-in 90",
  "--rate-limit": "<requests>/<seconds>, such as 600/60 (1 to 1000000 requests per 1 to 86400 seconds)",
  "--grace": "0 or a whole number of minutes, hours or days (90m, 24h, 7d), at most 30 days"
}

const takes = (option: string) => `${option} takes ${optionTakes[option]}`

/** What `--brand` takes, as its value is checked. */
export const BrandText = BrandId.annotations({ message: () => ({ message: takes("--brand"), override: true }) })

const scopesMessage = takes("--scopes")

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

export const json = Options.boolean("json").pipe(Options.withDescription("Print JSON instead of text."))

export const scopesOption = Options.text("scopes").pipe(
  Options.withSchema(ScopeList),
  Options.withDescription(`Comma-separated scopes: ${Scope.literals.join(", ")}.`)
)

export const nameOption = Options.text("name").pipe(
  Options.withSchema(
    Schema.String.pipe(Schema.maxLength(200)).annotations({
      message: () => ({ message: takes("--name"), override: true })
    })
  ),
  Options.optional,
  Options.withDescription("A label to recognise the key by (at most 200 characters).")
)

const rateLimitMessage = takes("--rate-limit")

/** `600/60`: 600 requests per 60 seconds (docs/operators.md, The key command line). */
const RateLimitText = Schema.transformOrFail(
  Schema.String,
  Schema.Struct({
    max: Schema.Int.pipe(Schema.between(1, 1_000_000)),
    windowSeconds: Schema.Int.pipe(Schema.between(1, 86_400))
  }),
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

export const rateLimitOption = limitOption(
  RateLimitText,
  rateLimitMessage,
  "The key's own rate limit as <requests>/<seconds> (600/60); without it the server's RATE_LIMIT_MAX per RATE_LIMIT_WINDOW_SECONDS."
)

export const rateLimitOrDefault = limitOption(
  Schema.Union(Schema.Literal("default"), RateLimitText),
  `${rateLimitMessage}, or default`,
  "The key's own rate limit as <requests>/<seconds> (600/60), or default: the server's RATE_LIMIT_MAX per RATE_LIMIT_WINDOW_SECONDS."
)

const graceMessage = takes("--grace")

/** `0`, `90m`, `24h`, `7d`: how long a rolled key's previous secret keeps working. */
export const GraceText = Schema.transformOrFail(Schema.String, Schema.DurationFromSelf, {
  strict: true,
  decode: (text, _, ast) => {
    const match = /^(?:0|([0-9]{1,6})([mhd]))$/.exec(text.trim())
    const grace = match === null
      ? undefined
      : match[1] === undefined
      ? Duration.zero
      : Duration.decode(
        `${Number(match[1])} ${({ m: "minutes", h: "hours", d: "days" } as const)[match[2] as "m" | "h" | "d"]}`
      )
    return grace === undefined || Duration.greaterThan(grace, maxGrace)
      ? ParseResult.fail(new ParseResult.Type(ast, text))
      : ParseResult.succeed(grace)
  },
  encode: (grace) => ParseResult.succeed(`${Duration.toMinutes(grace)}m`)
}).annotations({ message: () => ({ message: graceMessage, override: true }) })

/**
 * `--expires-in 30`: the key expires 30 days from the command (docs/operators.md, The key command line), for
 * `keys create` and `keys update` alike.
 */
export const expiresInOption = (description: string) =>
  Options.text("expires-in").pipe(
    Options.withSchema(
      Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 36_500)).annotations({
        message: () => ({ message: takes("--expires-in"), override: true })
      })
    ),
    Options.map(Duration.days),
    Options.optional,
    Options.withDescription(description)
  )

/** What a key id is, as the usage errors say it. */
export const keyIdTakes = "a key id as keys list shows it, 16 characters a-z and 0-9"

/**
 * Why what was typed for `keys <command>`'s key id is none: a whole key (`cak_<keyId>_<secret>`) is
 * answered with its id, so that the secret, once in the shell's history and the process list, is
 * not typed again; anything else is not repeated back, as it may hold a secret too.
 */
const notAKeyId = (command: string, typed: string) => {
  const keyId = /^cak_([a-z0-9]{16})(?:_|$)/.exec(typed.trim())?.[1]
  return keyId === undefined
    ? `That is not a key id: keys ${command} takes ${keyIdTakes}.`
    : `keys ${command} takes the key id alone, here ${keyId}, never the API key: its secret would stay in the shell's history.`
}

/**
 * The key `keys <command>` acts on: its id as `keys list` shows it, never the whole key, whose
 * secret would stay in the shell's history and show in the process list (docs/operators.md, The key command line).
 */
export const keyIdArg = (command: string, what: string) =>
  Args.text({ name: "keyId" }).pipe(
    Args.withSchema(
      Schema.Trim.pipe(Schema.pattern(/^[a-z0-9]{16}$/)).annotations({
        message: (issue) => ({ message: notAKeyId(command, String(issue.actual)), override: true })
      })
    ),
    Args.withDescription(`The key id, as \`keys list\` shows it (never the whole API key): that key is ${what}.`)
  )
