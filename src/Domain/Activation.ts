import { type FastCheck, Schema } from "effect"

const message = (text: string) => ({ message: () => text })

const Uuid = (field: string) =>
  Schema.String.pipe(
    Schema.pattern(
      /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i,
      message(`${field} must be a UUID`)
    )
  ).annotations({
    ...message(`${field} must be a UUID`),
    jsonSchema: {
      type: "string",
      format: "uuid",
      minLength: 36,
      maxLength: 36,
      description: `The ${field.replace("Id", "")}'s UUID, in any letter case`
    },
    arbitrary: () => (fc) => fc.uuid().chain((uuid) => fc.constantFrom(uuid, uuid.toUpperCase()))
  })

export const ActivatePath = Schema.Struct({
  creatorId: Uuid("creatorId"),
  campaignId: Uuid("campaignId")
})

const isCalendarDate = (value: string): boolean => {
  const [year, month, day] = value.split("-").map(Number) as [number, number, number]
  const date = new Date(0)
  date.setUTCFullYear(year, month - 1, day)
  return date.getUTCFullYear() === year && date.getUTCMonth() === month - 1 && date.getUTCDate() === day
}

const datePattern = /^\d{4}-\d{2}-\d{2}$/

/**
 * Property tests' values of a day from `first` to `last`: the schemas' own rules are predicates,
 * which a random string almost never keeps.
 */
const daysFrom = (first: string, last: string) => () => (fc: typeof FastCheck) =>
  fc.date({ min: new Date(`${first}T00:00:00Z`), max: new Date(`${last}T23:59:59Z`), noInvalidDate: true })
    .map((date) => date.toISOString().slice(0, 10))

/**
 * The days a post can be planned for: each planned day is an entry of its campaign's analytics, so
 * the window bounds that answer (docs/integrators.md, Analytics). Dates of this shape order as strings.
 */
const plannedPostWindow = { first: "2000-01-01", last: "2099-12-31" } as const
const outsideWindow = `plannedPostAt must be a date from ${plannedPostWindow.first} to ${plannedPostWindow.last}`

/**
 * The request's fields are one refinement each, returning the message of the first rule a value
 * breaks: each refinement of a chain is a decoding step of its own, and chains allocated several
 * times as much per request (bench/BENCHMARKS.md, Less allocated per request).
 */
export const PlannedPostDate = Schema.String.annotations(message("plannedPostAt must be a date string YYYY-MM-DD"))
  .pipe(Schema.filter((value) =>
    !datePattern.test(value)
      ? "plannedPostAt must be a date in the form YYYY-MM-DD"
      : !isCalendarDate(value)
      ? "plannedPostAt must be a real calendar date"
      : (value >= plannedPostWindow.first && value <= plannedPostWindow.last) || outsideWindow
  ))
  .annotations({
    jsonSchema: {
      type: "string",
      format: "date",
      // The window's years are those that begin with 20.
      pattern: "^20\\d{2}-\\d{2}-\\d{2}$",
      minLength: 10,
      maxLength: 10,
      description:
        `The day the creator will post (YYYY-MM-DD), from ${plannedPostWindow.first} to ${plannedPostWindow.last}; null or omitted when not planned`
    },
    examples: ["2026-12-01"],
    arbitrary: daysFrom(plannedPostWindow.first, plannedPostWindow.last)
  })

/**
 * A handle: `@` and at least one more character, at most 100 characters (code points), none of
 * them a control character (`\u0000`–`\u001f`, `\u007f`–`\u009f`), a line or paragraph separator,
 * or half of a surrogate pair (it would be stored as U+FFFD: the record would differ from the
 * answer). The same rule is the document's pattern, so both say the same thing.
 */
const handleCharacters = "[^\\p{Cc}\\p{Zl}\\p{Zp}\\p{Cs}]"
const forbiddenCharacter = /[\p{Cc}\p{Zl}\p{Zp}\p{Cs}]/u

export const SocialUsername = Schema.String.annotations(message("socialUsername must be a string")).pipe(
  Schema.filter((s) =>
    !s.startsWith("@")
      ? `socialUsername must start with "@"`
      : s.length < 2
      ? `socialUsername must have at least one character after "@"`
      // Counted in code points, spread only when the UTF-16 length could exceed it.
      : s.length > 100 && [...s].length > 100
      ? "socialUsername must be at most 100 characters"
      : !forbiddenCharacter.test(s) ||
        "socialUsername must not contain control characters, line separators or unpaired surrogates"
  )
).annotations({
  jsonSchema: {
    type: "string",
    pattern: `^@${handleCharacters}+$`,
    minLength: 2,
    maxLength: 100,
    description:
      "The creator's posting handle, returned exactly as sent: `@` and 1 to 99 more characters, none a control character, a line or paragraph separator or an unpaired surrogate"
  },
  examples: ["@janedoe"],
  arbitrary: () => (fc) =>
    fc.string({
      minLength: 1,
      maxLength: 99,
      unit: fc.constantFrom(..."abcdefghijklmnopqrstuvwxyz0123456789._-ÄéßŁ中文🙂")
    }).map((rest) => `@${rest}`)
})

export const ActivateRequest = Schema.Struct({
  socialUsername: SocialUsername,
  // Omitted is null (`withDefaults`, applied by the handler), not a schema transformation, which
  // cost much of the payload's decode (bench/BENCHMARKS.md).
  plannedPostAt: Schema.optional(Schema.NullOr(PlannedPostDate))
}).annotations({
  identifier: "ActivateRequest",
  parseOptions: { onExcessProperty: "error" },
  examples: [{ socialUsername: "@janedoe", plannedPostAt: "2026-12-01" }]
})
export type ActivateRequest = typeof ActivateRequest.Type

/** A request as it is activated and fingerprinted: an omitted `plannedPostAt` is null, as sent. */
export interface ActivationRequest {
  readonly socialUsername: string
  readonly plannedPostAt: string | null
}

export const withDefaults = (request: ActivateRequest): ActivationRequest => ({
  socialUsername: request.socialUsername,
  plannedPostAt: request.plannedPostAt ?? null
})

/** A response field: the value as stored, documented with its format (the request schemas validate it). */
const formatted = (format: string, description: string) =>
  Schema.String.annotations({ jsonSchema: { type: "string", format, description } })

export const Activation = Schema.Struct({
  id: formatted("uuid", "The activation record's id"),
  campaignId: formatted("uuid", "The campaign, as given in the path"),
  creatorId: formatted("uuid", "The creator, as given in the path"),
  status: Schema.Literal("ACTIVE"),
  socialUsername: Schema.String.annotations({ description: "Exactly as submitted" }),
  plannedPostAt: Schema.NullOr(formatted("date", "The planned posting day, or null")),
  activatedAt: formatted("date-time", "When the activation was made (UTC)")
}).annotations({ identifier: "Activation" })
export type Activation = typeof Activation.Type

export const ActivateResponse = Schema.Struct({
  ok: Schema.Literal(true),
  activation: Activation
}).annotations({
  identifier: "ActivateResponse",
  // A real answer of the service, to the README walkthrough's path.
  examples: [{
    ok: true,
    activation: {
      id: "b3af032d-83ae-454d-b26e-68ac511bf8d9",
      campaignId: "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d",
      creatorId: "5d2a7c3e-1b4f-4e6a-8c9d-0e1f2a3b4c5d",
      status: "ACTIVE",
      socialUsername: "@jane",
      plannedPostAt: null,
      activatedAt: "2026-11-22T14:16:39.780Z"
    }
  }]
})

/** `GET /v1/activations/{activationId}`: the id, a UUID in any letter case. */
export const ActivationIdPath = Schema.Struct({
  activationId: Uuid("activationId")
})

const notAPageLimit = "limit must be a whole number from 1 to 100"

/**
 * A page size, 1 to 100, in any decimal spelling of it (docs/integrators.md, Reads): leading zeros, a `+` and a
 * fractional part of zeros, as a client that writes the document's integer its own way may send it.
 */
const pageLimitSpelling = /^\+?0*(?:[1-9]\d?|100)(?:\.0+)?$/

const PageLimit = Schema.transform(
  Schema.String.annotations(message(notAPageLimit)).pipe(
    Schema.filter((text) => pageLimitSpelling.test(text) || notAPageLimit)
  ),
  Schema.String,
  // Its plain spelling, which the next page's `Link` repeats.
  { strict: true, decode: (text) => String(Number(text)), encode: (limit) => limit }
).annotations({
  // A number on the wire as every query parameter is text: the document gives its range and default
  // (a `pattern` would be ignored on an integer, and a string would make typed clients send text).
  jsonSchema: {
    type: "integer",
    minimum: 1,
    maximum: 100,
    default: 20,
    description:
      "How many records a page holds: a whole number from 1 to 100 in decimal, leading zeros, a `+` (`%2B` in a query) and a fractional part of zeros allowed (`05`, `%2B5`, `5.0`)"
  },
  examples: ["20"],
  arbitrary: () => (fc) =>
    fc.tuple(
      fc.constantFrom("", "+"),
      fc.constantFrom("", "0", "00"),
      fc.integer({ min: 1, max: 100 }),
      fc.constantFrom("", ".0", ".00")
    ).map(([sign, zeros, limit, fraction]) => `${sign}${zeros}${limit}${fraction}`)
})

/**
 * `GET /v1/activations`'s query parameters, all optional; any other is refused, naming it
 * (docs/integrators.md, Reads).
 */
export const ListActivationsQuery = Schema.Struct({
  creatorId: Schema.optional(Uuid("creatorId")),
  campaignId: Schema.optional(Uuid("campaignId")),
  limit: Schema.optional(PageLimit),
  startingAfter: Schema.optional(
    Uuid("startingAfter").annotations({
      jsonSchema: {
        type: "string",
        format: "uuid",
        minLength: 36,
        maxLength: 36,
        description:
          "An activation id: the page holds the records whose id is below it (the `Link` header's next page names it)"
      }
    })
  )
}).annotations({ parseOptions: { onExcessProperty: "error" } })
export type ListActivationsQuery = typeof ListActivationsQuery.Type

export const ActivationList = Schema.Struct({
  ok: Schema.Literal(true),
  activations: Schema.Array(Activation).pipe(Schema.maxItems(100)).annotations({
    title: "activations",
    description: "The page's records, newest first: at most `limit`"
  }),
  hasMore: Schema.Boolean.annotations({ description: "Whether there is a next page (the `Link` header names it)" })
}).annotations({ identifier: "ActivationList" })

/** A UTC calendar day, `YYYY-MM-DD`, for an analytics range. */
const Day = (field: string) =>
  Schema.String.annotations(message(`${field} must be a date YYYY-MM-DD`)).pipe(
    Schema.filter((value) =>
      !datePattern.test(value)
        ? `${field} must be a date in the form YYYY-MM-DD`
        : isCalendarDate(value) || `${field} must be a real calendar date`
    )
  ).annotations({
    jsonSchema: {
      type: "string",
      format: "date",
      minLength: 10,
      maxLength: 10,
      description: `The range's ${
        field === "from" ? "first" : "last"
      } UTC day, inclusive; omitted, the range is open on that side. ${
        field === "from" ? "After `to`" : "Before `from`"
      }: 400 \`VALIDATION_ERROR\``
    },
    examples: [field === "from" ? "2026-12-01" : "2026-12-31"],
    arbitrary: daysFrom("2026-01-01", "2027-12-31")
  })

export const AnalyticsPath = Schema.Struct({
  campaignId: Uuid("campaignId")
})

/** `from` and `to`, both optional (that `from` is not after `to` is the handler's check). */
export const AnalyticsQuery = Schema.Struct({
  from: Schema.optional(Day("from")),
  to: Schema.optional(Day("to"))
}).annotations({ parseOptions: { onExcessProperty: "error" } })
export type AnalyticsQuery = typeof AnalyticsQuery.Type

/**
 * A brand's line for its analytics calls (docs/integrators.md, Analytics): one answered at a time, at most
 * `waiting` others waiting their turn, none of them longer than `longestWaitSeconds`; a call past
 * either bound is refused rather than queued.
 */
export const analyticsLine = { waiting: 4, longestWaitSeconds: 10 } as const

/** A count: a whole number, never negative. */
const Count = (description: string) =>
  Schema.Number.pipe(Schema.filter((n) => Number.isInteger(n) && n >= 0)).annotations({
    jsonSchema: { type: "integer", minimum: 0, description }
  })

const DayCount = <K extends string>(identifier: string, field: K, description: string) =>
  Schema.Struct(
    {
      date: formatted("date", "A UTC day"),
      [field]: Count(description)
    } as { date: typeof Schema.String } & { [P in K]: ReturnType<typeof Count> }
  ).annotations({ identifier })

export const CampaignAnalytics = Schema.Struct({
  campaignId: formatted("uuid", "The campaign, as given in the path"),
  from: Schema.NullOr(formatted("date", "The range's first day, or null when open")),
  to: Schema.NullOr(formatted("date", "The range's last day, or null when open")),
  activations: Count("The brand's activations of the campaign in the range"),
  creators: Count("How many distinct creators among them"),
  activationsByDay: Schema.Array(DayCount("ActivationsOnDay", "activations", "Activations made that UTC day")),
  plannedPostsByDay: Schema.Array(
    DayCount("PlannedPostsOnDay", "posts", "Of those activations, the posts planned for that day")
  ),
  unscheduled: Count("Of those activations, the ones without a planned post")
}).annotations({ identifier: "CampaignAnalytics" })
export type CampaignAnalytics = typeof CampaignAnalytics.Type

export const AnalyticsResponse = Schema.Struct({
  ok: Schema.Literal(true),
  analytics: CampaignAnalytics
}).annotations({ identifier: "AnalyticsResponse" })
