import { Config, ConfigError, Context, Duration, Effect, Either, Layer, Option, Redacted } from "effect"
import { resolve } from "node:path"
import {
  type Cidr,
  cidrOf,
  decimal,
  isUrlWithHost,
  logLevels,
  onOff,
  positiveInt,
  shown,
  unsetFor,
  variable,
  wholeNumber,
  withoutPassword
} from "./Config/Settings.ts"

export {
  checkedFirst,
  type Cidr,
  configProblems,
  settingsList,
  StartupError,
  withoutPassword
} from "./Config/Settings.ts"

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

const databaseChoices = "a SQLite file path (sqlite: prefix allowed), or a postgres:// or postgresql:// URL"

/**
 * DATABASE_URL. Whatever begins with a URL scheme (`letters:`) is read as a URL and only
 * `sqlite:`, `postgres:` and `postgresql:` are taken: a typo such as `postgress://` must stop the
 * start, not become a SQLite file named after the URL, its password in a directory name. A file
 * whose name has a colon before any slash is written `./name`. Never shown with its value: it
 * may carry a password.
 */
const databaseUrl = variable(
  "DATABASE_URL",
  {
    parse: (raw): Either.Either<
      { readonly _tag: "sqlite"; readonly filename: string } | { readonly _tag: "postgres"; readonly url: string },
      string
    > => {
      const text = raw.trim()
      if (text === "") return Either.left(`is empty; give ${databaseChoices}, or ${unsetFor("DATABASE_URL")}`)
      const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):/.exec(text)?.[1]?.toLowerCase()
      if (scheme === undefined) return Either.right({ _tag: "sqlite", filename: raw })
      if (scheme === "sqlite") {
        const filename = text.replace(/^sqlite:(\/\/)?/i, "")
        return filename.trim() === ""
          ? Either.left(
            "names no file after sqlite:; give the SQLite file's path, e.g. sqlite:/var/lib/campaign-api/data.sqlite"
          )
          : Either.right({ _tag: "sqlite", filename })
      }
      if (scheme === "postgres" || scheme === "postgresql") {
        return isUrlWithHost(text, /^postgres(ql)?:$/i)
          ? Either.right({ _tag: "postgres", url: text })
          : Either.left("is a PostgreSQL URL without a host; write it as postgres://user:password@host:5432/database")
      }
      return Either.left(`has the scheme "${scheme}:", which this service does not take; use ${databaseChoices}`)
    }
  }
)

export const DatabaseConfig: Config.Config<DatabaseTarget> = Config.all({
  url: databaseUrl,
  // One connection holds the migration lock while the migrations run on another.
  poolSize: variable("DATABASE_POOL_MAX", {
    parse: (text) => {
      const n = wholeNumber(text)
      return n !== undefined && n >= 2
        ? Either.right(n)
        : Either.left(
          `not a whole number of at least 2 (one connection holds the migration lock); ${unsetFor("DATABASE_POOL_MAX")}`
        )
    }
  })
}).pipe(Config.map(({ poolSize, url }): DatabaseTarget =>
  url._tag === "postgres"
    ? { _tag: "postgres", url: Redacted.make(url.url), display: withoutPassword(url.url), poolSize }
    : url
))

/**
 * The database as the start-up log and the key commands name it: the SQLite file's absolute path
 * (a relative DATABASE_URL is taken from the working directory), or PostgreSQL's host, port and
 * database, never a user or password.
 */
export const databaseName = (target: DatabaseTarget): string => {
  if (target._tag === "sqlite") return target.filename === ":memory:" ? ":memory:" : resolve(target.filename)
  const url = new URL(Redacted.value(target.url))
  return `postgres://${url.host}${url.pathname === "" ? "/" : url.pathname}`
}

/** REDIS_URL: the rate limiter's shared store; unset (or empty) keeps the budgets in this process's memory. */
export const RedisConfig = variable("REDIS_URL", {
  unset: Option.none<Redacted.Redacted<string>>(),
  parse: (text) =>
    text.trim() === ""
      ? Either.right(Option.none())
      : isUrlWithHost(text, /^rediss?:$/)
      ? Either.right(Option.some(Redacted.make(text.trim())))
      : Either.left(
        "is not a redis:// or rediss:// URL with a host; correct it, or leave it unset to keep rate limits in memory"
      )
})

/** A port, 0 to 65535 (0 asks the system for a free one); undefined when `text` is none. */
const portOf = (text: string): number | undefined => {
  const n = /^\s*\d{1,5}\s*$/.test(text) ? Number(text) : undefined
  return n !== undefined && n <= 65535 ? n : undefined
}
const notAPort = "not a port number; use one from 0 to 65535 (0 picks a free port)"

export const ServerConfig = Config.all({
  // 0 asks the system for a free port (the tests use it); the address is logged at start.
  port: variable("PORT", {
    parse: (text) => {
      const port = portOf(text)
      return port === undefined ? Either.left(notAPort) : Either.right(port)
    }
  }),
  host: variable("HOST", {
    parse: (text) =>
      text.trim() === ""
        ? Either.left("names no address; use 0.0.0.0 (every interface), 127.0.0.1 or one of this machine's addresses")
        : Either.right(text)
  })
})

/**
 * METRICS_PORT and METRICS_HOST: Prometheus's `GET /metrics` on a listener of its own (docs/operators.md,
 * Operating it: Metrics), so that the API's port never shows it; unset, no listener at all. The
 * same port as the API's is refused here: otherwise the metrics listener, bound first, would make
 * the API's PORT the one said to be taken.
 */
export const MetricsConfig = Config.all({
  server: ServerConfig,
  port: variable("METRICS_PORT", {
    unset: Option.none<number>(),
    parse: (text) => {
      if (text.trim() === "") return Either.right(Option.none())
      const port = portOf(text)
      return port === undefined
        ? Either.left(`${notAPort}, or leave it unset for no metrics`)
        : Either.right(Option.some(port))
    }
  }),
  host: variable("METRICS_HOST", {
    parse: (text) =>
      text.trim() === ""
        ? Either.left("names no address; use 127.0.0.1 (this machine only), 0.0.0.0 or one of this machine's addresses")
        : Either.right(text.trim())
  })
}).pipe(
  Config.mapOrFail(({ host, port, server }) =>
    Option.isSome(port) && port.value !== 0 && port.value === server.port
      ? Either.left(
        ConfigError.InvalidData(
          [],
          `METRICS_PORT=${port.value}: the API's own PORT; give the metrics a port of their own.`
        )
      )
      : Either.right({ port, host })
  )
)

const seconds = (name: "SHUTDOWN_DELAY_SECONDS", max: number) =>
  variable(name, {
    parse: (text) => {
      const n = decimal(text)
      return n !== undefined && n <= max
        ? Either.right(Duration.millis(Math.round(n * 1000)))
        : Either.left(`not a number of seconds from 0 to ${max}; ${unsetFor(name)}`)
    }
  })

/**
 * SHUTDOWN_DELAY_SECONDS: after SIGTERM, how long requests are still served (each answer closing
 * its connection, `/readyz` 503) before the listener closes, so a load balancer moves traffic away
 * first; SIGINT skips it (docs/operators.md, Operating it: Shutdown).
 */
export const ShutdownConfig = seconds("SHUTDOWN_DELAY_SECONDS", 300)

/**
 * CONNECTIONS_PER_ADDRESS and CONNECTIONS_PER_PROXY: how many connections one peer address may
 * hold, a trusted proxy's apart (docs/operators.md, Operating it: Connections).
 */
export const ConnectionsConfig = Config.all({
  perAddress: positiveInt("CONNECTIONS_PER_ADDRESS"),
  perProxy: positiveInt("CONNECTIONS_PER_PROXY")
})

export const EdgeConfig = Config.all({
  docsEnabled: variable("DOCS_ENABLED", { parse: onOff }),
  /** The base URL the OpenAPI document names in `servers`; by default this server on localhost. */
  publicUrl: variable("PUBLIC_URL", {
    unset: Option.none<URL>(),
    parse: (text) =>
      isUrlWithHost(text, /^https?:$/)
        ? Either.right(Option.some(new URL(text.trim())))
        : Either.left("not an http:// or https:// URL; give the base URL clients call, e.g. https://api.example.com")
  })
})

/** Whether the server warms its request path up before it is ready (`WarmUp.ts`). */
export const WarmUpConfig = variable("WARM_UP", { parse: onOff })

export const LogLevelConfig = variable("LOG_LEVEL", {
  parse: (text) => {
    const level = logLevels[text.trim().toLowerCase()]
    return level === undefined
      ? Either.left(`not a log level; use one of ${Object.keys(logLevels).join(", ")}`)
      : Either.right(level)
  }
})

/** OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_SERVICE_NAME: spans go out only when the endpoint is set. */
export const TracingConfig = Config.all({
  // OpenTelemetry reads an empty variable as unset. Never shown: a collector URL may carry a token.
  endpoint: variable("OTEL_EXPORTER_OTLP_ENDPOINT", {
    unset: Option.none<URL>(),
    parse: (text) =>
      text.trim() === ""
        ? Either.right(Option.none())
        : isUrlWithHost(text, /^https?:$/)
        ? Either.right(Option.some(new URL(text.trim())))
        : Either.left(
          "is not an http:// or https:// URL; give the OTLP/HTTP collector's base URL, or leave it unset for no tracing"
        )
  }),
  serviceName: variable("OTEL_SERVICE_NAME", { parse: Either.right })
})

const RateLimitConfig = Config.all({
  max: positiveInt("RATE_LIMIT_MAX"),
  windowSeconds: positiveInt("RATE_LIMIT_WINDOW_SECONDS")
})

// Fractions are allowed (0.01 is 36 s): the soak test needs a TTL of seconds.
const IdempotencyTtlConfig = variable("IDEMPOTENCY_TTL_HOURS", {
  parse: (text) => {
    const hours = decimal(text)
    return hours !== undefined && hours * 3_600_000 >= 1000
      ? Either.right(Duration.millis(Math.round(hours * 3_600_000)))
      : Either.left(`not a number of hours of at least one second (0.0003); ${unsetFor("IDEMPOTENCY_TTL_HOURS")}`)
  }
})

export class AppConfig extends Context.Tag("Config/AppConfig")<AppConfig, {
  readonly rateLimit: { readonly max: number; readonly window: Duration.Duration }
  readonly idempotencyTtl: Duration.Duration
}>() {
  static readonly Live = Layer.effect(
    AppConfig,
    Effect.map(Config.all([RateLimitConfig, IdempotencyTtlConfig]), ([{ max, windowSeconds }, idempotencyTtl]) => ({
      rateLimit: { max, window: Duration.seconds(windowSeconds) },
      idempotencyTtl
    }))
  )
}

/**
 * TRUSTED_PROXIES: the reverse proxies whose client (in TRUSTED_PROXY_HEADER) and `X-Request-Id`
 * are believed (docs/operators.md, Configuration); unset, none: the socket's peer is the client.
 */
export const TrustedProxiesConfig = variable("TRUSTED_PROXIES", {
  unset: [] as ReadonlyArray<Cidr>,
  parse: (text): Either.Either<ReadonlyArray<Cidr>, string> => {
    const entries = text.split(/[\s,]+/).filter((entry) => entry !== "")
    const bad = entries.find((entry) => cidrOf(entry) === undefined)
    return bad !== undefined
      ? Either.left(
        `${
          shown(bad)
        } is not an address or a CIDR; give them separated by commas (127.0.0.1,10.0.0.0/8,fd00::/8), or leave it unset to trust none`
      )
      : Either.right(entries.map((entry) => cidrOf(entry)!))
  }
})

/** A forwarding header the trusted proxies may write, as a request's headers are looked up. */
export type ProxyHeader = "x-forwarded-for" | "forwarded"

const proxyHeaders: ReadonlyArray<ProxyHeader> = ["x-forwarded-for", "forwarded"]

/**
 * TRUSTED_PROXY_HEADER: the one forwarding header the trusted proxies write (docs/operators.md, Deployment:
 * Behind a reverse proxy). Only that one is read: behind a proxy that writes `Forwarded`, an
 * `X-Forwarded-For` can only be the client's own, passed on unread by the proxy.
 */
export const TrustedProxyHeaderConfig = variable("TRUSTED_PROXY_HEADER", {
  parse: (text): Either.Either<ProxyHeader, string> => {
    const header = proxyHeaders.find((name) => name === text.trim().toLowerCase())
    return header === undefined
      ? Either.left(
        `not a header the client is read from; use X-Forwarded-For or Forwarded, whichever the trusted proxies write, or ${
          unsetFor("TRUSTED_PROXY_HEADER")
        }`
      )
      : Either.right(header)
  }
})

/**
 * Every variable a command reads, read together before anything starts: a start with three bad
 * values names all three, not the first one each time (docs/operators.md, Configuration).
 */
export const ServeConfig = Config.all([
  ServerConfig,
  DatabaseConfig,
  RedisConfig,
  EdgeConfig,
  LogLevelConfig,
  TracingConfig,
  RateLimitConfig,
  IdempotencyTtlConfig,
  ShutdownConfig,
  ConnectionsConfig,
  MetricsConfig,
  TrustedProxiesConfig,
  TrustedProxyHeaderConfig,
  WarmUpConfig
])

/** What the key commands read: the server's database, and the log level. */
export const KeysConfig = Config.all([DatabaseConfig, LogLevelConfig])
