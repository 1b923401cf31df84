import { Config, Context, Data, Duration, Effect, Layer, LogLevel, Option, Redacted } from "effect"

/**
 * A configured value that cannot be used: the database path, the address or the port. The
 * message is one sentence naming the variable and what to do; the process exits 78 with it.
 */
export class StartupError extends Data.TaggedError("StartupError")<{
  readonly variable: string
  readonly message: string
}> {}

const positiveInt = (name: string, fallback: number) =>
  Config.integer(name).pipe(
    Config.validate({ message: "Expected a whole number greater than 0", validation: (n) => n > 0 }),
    Config.withDefault(fallback)
  )

/** Where the data lives: a SQLite file (the embedded default), or a PostgreSQL server shared by instances. */
export type DatabaseTarget =
  | { readonly _tag: "sqlite"; readonly filename: string }
  | {
    readonly _tag: "postgres"
    readonly url: Redacted.Redacted<string>
    /** The URL with its password hidden, for messages and logs. */
    readonly display: string
    readonly poolSize: number
  }

const isPostgresUrl = (url: string) => /^postgres(ql)?:\/\//i.test(url.trim())

/** Whether `text` is a URL of a protocol `protocol` matches that names a host. */
const isUrlWithHost = (text: string, protocol: RegExp) => {
  try {
    const parsed = new URL(text.trim())
    return protocol.test(parsed.protocol) && parsed.hostname !== ""
  } catch {
    return false
  }
}

/** A URL with its password replaced, so that it can be printed. */
const withoutPassword = (url: string): string => {
  try {
    const parsed = new URL(url)
    if (parsed.password !== "") parsed.password = "***"
    for (const name of [...parsed.searchParams.keys()]) {
      if (/pass/i.test(name)) parsed.searchParams.set(name, "***")
    }
    return parsed.toString()
  } catch {
    return url.replace(/\/\/[^@/]*@/, "//***@")
  }
}

/** DATABASE_URL: `postgres://…` or `postgresql://…`, else a file path with an optional `sqlite:` prefix. */
const withoutScheme = (url: string) => url.replace(/^sqlite:(\/\/)?/, "")
// A string, redacted only once validated: a failed validation of Config.redacted names no variable.
const databaseUrl = Config.string("DATABASE_URL").pipe(
  Config.validate({
    message: "Expected a SQLite file path or a postgres:// URL",
    validation: (text) =>
      isPostgresUrl(text) ? isUrlWithHost(text, /^postgres(ql)?:$/i) : withoutScheme(text).trim().length > 0
  }),
  Config.withDefault("data/campaign-api.sqlite")
)

export const DatabaseConfig: Config.Config<DatabaseTarget> = Config.all({
  url: databaseUrl,
  // One connection holds the migration lock while the migrations run on another.
  poolSize: Config.integer("DATABASE_POOL_MAX").pipe(
    Config.validate({ message: "Expected a whole number of at least 2", validation: (n) => n >= 2 }),
    Config.withDefault(10)
  )
}).pipe(Config.map(({ poolSize, url: text }): DatabaseTarget => {
  return isPostgresUrl(text)
    ? { _tag: "postgres", url: Redacted.make(text.trim()), display: withoutPassword(text.trim()), poolSize }
    : { _tag: "sqlite", filename: withoutScheme(text) }
}))

/** REDIS_URL: the rate limiter's shared store; unset (or empty) keeps the budgets in this process's memory. */
export const RedisConfig = Config.string("REDIS_URL").pipe(
  Config.validate({
    message: "Expected a redis:// or rediss:// URL",
    validation: (url) => url.trim() === "" || isUrlWithHost(url, /^rediss?:$/)
  }),
  // After the validation: a failed validation of a defaulted Config names no variable.
  Config.withDefault(""),
  Config.map((url) => url.trim() === "" ? Option.none() : Option.some(Redacted.make(url.trim())))
)

export const ServerConfig = Config.all({
  // 0 asks the system for a free port (the tests use it); the address is logged at start.
  port: Config.string("PORT").pipe(
    Config.validate({
      message: "Expected a port number from 0 to 65535",
      validation: (text) => /^\d{1,5}$/.test(text.trim()) && Number(text) <= 65535
    }),
    Config.map(Number),
    Config.withDefault(3000)
  ),
  host: Config.string("HOST").pipe(
    Config.validate({ message: "Expected a host name or address", validation: (h) => h.trim().length > 0 }),
    Config.withDefault("0.0.0.0")
  )
})

export const EdgeConfig = Config.all({
  docsEnabled: Config.boolean("DOCS_ENABLED").pipe(Config.withDefault(true)),
  /** The base URL the OpenAPI document names in `servers`; by default this server on localhost. */
  publicUrl: Config.option(
    Config.url("PUBLIC_URL").pipe(
      Config.validate({ message: "Expected an http or https URL", validation: (url) => /^https?:$/.test(url.protocol) })
    )
  )
})

const logLevels: Record<string, LogLevel.LogLevel> = {
  all: LogLevel.All,
  trace: LogLevel.Trace,
  debug: LogLevel.Debug,
  info: LogLevel.Info,
  warn: LogLevel.Warning,
  warning: LogLevel.Warning,
  error: LogLevel.Error,
  fatal: LogLevel.Fatal,
  none: LogLevel.None
}

const levelName = (name: string) => name.trim().toLowerCase()

export const LogLevelConfig = Config.string("LOG_LEVEL").pipe(
  Config.validate({
    message: `Expected one of ${Object.keys(logLevels).join(", ")}`,
    validation: (name) => levelName(name) in logLevels
  }),
  Config.withDefault("info"),
  Config.map((name) => logLevels[levelName(name)]!)
)

export class AppConfig extends Context.Tag("Config/AppConfig")<AppConfig, {
  readonly rateLimit: { readonly max: number; readonly window: Duration.Duration }
  readonly idempotencyTtl: Duration.Duration
}>() {
  static readonly Live = Layer.effect(
    AppConfig,
    Effect.gen(function*() {
      const max = yield* positiveInt("RATE_LIMIT_MAX", 120)
      const windowSeconds = yield* positiveInt("RATE_LIMIT_WINDOW_SECONDS", 60)
      // Fractions are allowed (0.01 is 36 s): the soak test needs a TTL of seconds.
      const ttlHours = yield* Config.number("IDEMPOTENCY_TTL_HOURS").pipe(
        Config.validate({
          message: "Expected a number of hours of at least one second (0.0003)",
          validation: (n) => n * 3_600_000 >= 1000
        }),
        Config.withDefault(24)
      )
      return {
        rateLimit: { max, window: Duration.seconds(windowSeconds) },
        idempotencyTtl: Duration.millis(Math.round(ttlHours * 3_600_000))
      }
    })
  )
}
