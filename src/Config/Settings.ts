import { Config, ConfigError, Data, Effect, Either, Layer, LogLevel, Option } from "effect"
import { isIP } from "node:net"

/**
 * How a variable of the environment is read (docs/operators.md, Configuration): the table of every variable
 * the server reads, and the parsing each one's value goes through, with the one sentence an
 * operator reads when it is wrong.
 */

/**
 * A configured value that cannot be used: the database path, the address or the port. The
 * message is one sentence naming the variable and what to do; the process exits 78 with it.
 */
export class StartupError extends Data.TaggedError("StartupError")<{
  readonly variable: string
  readonly message: string
}> {}

export const logLevels: Record<string, LogLevel.LogLevel> = {
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

/** The words DOCS_ENABLED and WARM_UP take, each pair's first for on and second for off. */
const switchWords = [["true", "false"], ["yes", "no"], ["on", "off"], ["1", "0"]] as const
const switchChoices = `true or false (or ${switchWords.slice(1).map((pair) => pair.join("/")).join(", ")})`

interface Setting {
  /** Read, when the variable is unset, exactly as a value set to it would be. */
  readonly default?: string
  readonly meaning: string
  /** It may hold a password: never shown with its value. */
  readonly secret?: true
}

/**
 * Every variable the server reads (docs/operators.md, Configuration): its default and what it is for, in one
 * line. The parsing below reads only these names, and `serve --help` lists them, so the two say
 * the same. A `default` is read exactly as a value set to it would be: the default shown is the
 * one used. Without one, an unset variable means what `meaning` says.
 */
export const settings = {
  PORT: { default: "3000", meaning: "the port to listen on, 0-65535 (0 picks a free one; the log says which)" },
  HOST: { default: "0.0.0.0", meaning: "the address to listen on (127.0.0.1: this machine only)" },
  DATABASE_URL: {
    secret: true,
    default: "data/campaign-api.sqlite",
    meaning:
      "a SQLite file path (sqlite: prefix allowed; relative to the working directory), or a postgres:// or postgresql:// URL"
  },
  DATABASE_POOL_MAX: { default: "10", meaning: "PostgreSQL only: connections in this instance's pool, at least 2" },
  REDIS_URL: {
    secret: true,
    meaning:
      "a redis:// or rediss:// URL: the rate limits' store, shared by every instance; unset: this instance's memory"
  },
  RATE_LIMIT_MAX: { default: "120", meaning: "requests per window for each API key without a limit of its own" },
  RATE_LIMIT_WINDOW_SECONDS: { default: "60", meaning: "the rate limit's window" },
  IDEMPOTENCY_TTL_HOURS: {
    default: "24",
    meaning: "how long an Idempotency-Key is remembered (fractions allowed: 0.5 is 30 minutes)"
  },
  SHUTDOWN_DELAY_SECONDS: {
    default: "5",
    meaning:
      "on SIGTERM, how long requests are still served (/readyz 503) before the listener closes, 0-300; SIGINT (Ctrl-C) skips it"
  },
  CONNECTIONS_PER_ADDRESS: {
    default: "1024",
    meaning:
      "connections one client address (an IPv6 one by its /64) may hold: a connection counts from its first request until it can no longer be open (34 s after its last answer, 5 s once the address holds half this many); a request on one more is answered 503"
  },
  CONNECTIONS_PER_PROXY: {
    default: "4096",
    meaning: "the same for the address of each of the TRUSTED_PROXIES, whose connections carry many clients"
  },
  LOG_LEVEL: { default: "info", meaning: `the log's level: ${Object.keys(logLevels).join(", ")}` },
  DOCS_ENABLED: { default: "true", meaning: `serve the docs page at /docs: ${switchChoices}` },
  WARM_UP: {
    default: "true",
    meaning:
      `before /readyz first answers 200, run the request path on a private in-memory copy of the service (about 2 s on an idle 2-core machine, longer under load), so that the first clients meet compiled code: ${switchChoices}`
  },
  PUBLIC_URL: { meaning: "the base URL the OpenAPI document names in servers; unset: http://localhost:<PORT>" },
  OTEL_EXPORTER_OTLP_ENDPOINT: {
    secret: true,
    meaning: "the OTLP/HTTP collector's base URL for spans and metrics; unset: no tracing"
  },
  OTEL_SERVICE_NAME: { default: "campaign-api", meaning: "the service name on exported spans and metrics" },
  METRICS_PORT: {
    meaning: "serve Prometheus metrics at GET /metrics on this port, never the API's; unset: no listener"
  },
  METRICS_HOST: { default: "127.0.0.1", meaning: "the metrics listener's address (127.0.0.1: this machine only)" },
  TRUSTED_PROXIES: {
    meaning:
      "addresses or CIDRs of reverse proxies, comma-separated, whose client (in TRUSTED_PROXY_HEADER) and X-Request-Id are believed; unset: none, the socket's peer is the client"
  },
  TRUSTED_PROXY_HEADER: {
    default: "X-Forwarded-For",
    meaning: "the header the trusted proxies name the client in: X-Forwarded-For or Forwarded; the other one is ignored"
  }
} as const satisfies Record<string, Setting>

export type Name = keyof typeof settings

/** `settings` in its order, each with its name, as `serve --help` lists them. */
export const settingsList: ReadonlyArray<Setting & { readonly name: Name }> = Object.entries(settings).map((
  [name, setting]
) => ({ name: name as Name, ...setting }))

/** What an unset variable gives: its default read as a value, or, when it has none, `unset`. */
type Unset<N extends Name, A> = (typeof settings)[N] extends { readonly default: string } ? { readonly unset?: never }
  : { readonly unset: A }

/**
 * One environment variable of `settings`: set (or unset with a default), `parse` gives its value
 * or what is wrong with it, and the failure is the whole sentence the operator reads (docs/operators.md,
 * Configuration): `NAME=value: what is wrong; what to do.` A variable that may hold a password
 * (`secret` in `settings`) is named without its value: `NAME is what is wrong; what to do.`
 */
export const variable = <N extends Name, A>(
  name: N,
  options: {
    readonly parse: (text: string) => Either.Either<A, string>
  } & Unset<N, A>
): Config.Config<A> => {
  const { default: fallback, secret } = settings[name] as Setting
  const read = (text: string) =>
    Either.mapLeft(
      options.parse(text),
      (problem) => ConfigError.InvalidData([], `${name}${secret === true ? " " : `=${shown(text)}: `}${problem}.`)
    )
  return Config.string(name).pipe(
    Config.option,
    Config.mapOrFail(Option.match({
      onNone: () => fallback === undefined ? Either.right(options.unset as A) : read(fallback),
      onSome: read
    }))
  )
}

/** What to say about leaving `name` unset: its default, as `settings` has it. */
export const unsetFor = (name: Name) => `leave it unset for ${(settings[name] as Setting).default}`

/** A value as a message shows it: as typed, unless it has characters a terminal would act on. */
export const shown = (text: string) => /^[\x20-\x7e]*$/.test(text) ? text : JSON.stringify(text)

export const wholeNumber = (text: string): number | undefined => /^\s*\d+\s*$/.test(text) ? Number(text) : undefined

export const decimal = (text: string): number | undefined =>
  /^\s*(\d+(\.\d*)?|\.\d+)\s*$/.test(text) ? Number(text) : undefined

export const positiveInt = (
  name: "RATE_LIMIT_MAX" | "RATE_LIMIT_WINDOW_SECONDS" | "CONNECTIONS_PER_ADDRESS" | "CONNECTIONS_PER_PROXY"
) =>
  variable(name, {
    parse: (text) => {
      const n = wholeNumber(text)
      return n !== undefined && n > 0
        ? Either.right(n)
        : Either.left(`not a whole number above 0; give one, or ${unsetFor(name)}`)
    }
  })

/** Whether `text` is a URL of a protocol `protocol` matches that names a host. */
export const isUrlWithHost = (text: string, protocol: RegExp) => {
  try {
    const parsed = new URL(text.trim())
    return protocol.test(parsed.protocol) && parsed.hostname !== ""
  } catch {
    return false
  }
}

/** A URL with its password replaced, so that it can be printed. */
export const withoutPassword = (url: string): string => {
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

const switches = new Map<string, boolean>(switchWords.flatMap(([on, off]) => [[on, true], [off, false]]))

/** A switch's value: one of `switchWords`, in any case. */
export const onOff = (text: string): Either.Either<boolean, string> => {
  const value = switches.get(text.trim().toLowerCase())
  return value === undefined ? Either.left(`neither true nor false; use ${switchChoices}`) : Either.right(value)
}

/** An address or a block of them (`10.0.0.0/8`, `fd00::/8`, or one address: its whole length). */
export interface Cidr {
  readonly address: string
  readonly prefix: number
  readonly family: "ipv4" | "ipv6"
}

export const cidrOf = (text: string): Cidr | undefined => {
  const [address = "", prefix, ...rest] = text.split("/")
  const version = isIP(address)
  if (version === 0 || rest.length > 0) return undefined
  const bits = version === 4 ? 32 : 128
  const length = prefix === undefined ? bits : /^\d{1,3}$/.test(prefix) ? Number(prefix) : Number.NaN
  return length >= 0 && length <= bits
    ? { address, prefix: length, family: version === 4 ? "ipv4" : "ipv6" }
    : undefined
}

/** `layer`, built only once every variable of `config` is good. */
export const checkedFirst = (config: Config.Config<unknown>) => <A, E, R>(layer: Layer.Layer<A, E, R>) =>
  Layer.unwrapEffect(Effect.as(config, layer))

/** Each sentence of a configuration error, once: one per bad variable. */
export const configProblems = (error: ConfigError.ConfigError): ReadonlyArray<string> => {
  const sentences = ConfigError.reduceWithContext(error, undefined, {
    andCase: (_, left: ReadonlyArray<string>, right: ReadonlyArray<string>) => [...left, ...right],
    orCase: (_, left: ReadonlyArray<string>, right: ReadonlyArray<string>) => [...left, ...right],
    invalidDataCase: (_, path, message) => [path.length === 0 ? message : `${path.join(".")}: ${message}`],
    missingDataCase: (_, path, message) => [`${path.join(".")}: ${message}`],
    sourceUnavailableCase: (_, path, message) => [`${path.join(".")}: ${message}`],
    unsupportedCase: (_, path, message) => [`${path.join(".")}: ${message}`]
  })
  return [...new Set(sentences)]
}
