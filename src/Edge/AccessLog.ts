import { Context, Effect, HashMap, Logger, Option } from "effect"
import type { Exchange } from "./Exchange.ts"

/** A caller's own request id is kept when it is sane: short, printable, no spaces. */
const saneRequestId = /^[A-Za-z0-9._:@+=\/-]{1,128}$/

const isSaneRequestId = (header: string | null | undefined): header is string =>
  typeof header === "string" && saneRequestId.test(header)

/** The caller's `X-Request-Id` when it is sane, a new UUID otherwise. */
export const requestIdOf = (request: Request): string => {
  const incoming = request.headers.get("x-request-id")
  return isSaneRequestId(incoming) ? incoming : crypto.randomUUID()
}

/**
 * One access-log line's fields. The JSON logging writes them as annotations of the line itself
 * (`AccessLogOutput`); the terminal's pretty logger gets them as the message and lifts them into
 * annotations (`withAccessLogFields`). `Effect.annotateLogs` would copy the fiber's locals per
 * request. With tracing on the line is annotated the usual way, for the span's own log events.
 */
export class AccessLogEntry {
  constructor(readonly fields: Readonly<Record<string, string | number | null>>) {}
}

/** Writes an access-log entry as the message "request" with its fields as annotations. */
export const withAccessLogFields = <Output>(logger: Logger.Logger<unknown, Output>) =>
  Logger.mapInputOptions(logger, (options) => {
    const [entry] = options.message as ReadonlyArray<unknown>
    if (!(entry instanceof AccessLogEntry)) return options
    let annotations = options.annotations
    for (const [key, value] of Object.entries(entry.fields)) annotations = HashMap.set(annotations, key, value)
    return { ...options, message: ["request"], annotations }
  })

/**
 * Where an access-log entry goes. The JSON logging writes it straight to its output, in the shape
 * of every other line, without Effect's logger (which copies the fiber's locals and walks its
 * loggers per line); without this service the entry is logged as any other message.
 */
export class AccessLogOutput extends Context.Tag("AccessLogOutput")<
  AccessLogOutput,
  (entry: AccessLogEntry) => Effect.Effect<void>
>() {}

/**
 * The access-log line of a finished request: `method`, `route`, `status`, `durationMs`, and the
 * key's id and brand (never the key); the request id is an annotation of every line. Decided once,
 * when the edge is built: with tracing on the line is also the span's `request` event, with the
 * fields as its attributes.
 */
export const makeAccessLog = (traced: boolean) =>
  Effect.map(Effect.serviceOption(AccessLogOutput), (output) => {
    const write = traced
      ? (entry: AccessLogEntry) => Effect.logInfo("request").pipe(Effect.annotateLogs(entry.fields))
      : Option.getOrElse(output, () => (entry: AccessLogEntry) => Effect.logInfo(entry))
    return (exchange: Exchange, status: number, startedAt: number): Effect.Effect<void> =>
      write(
        new AccessLogEntry({
          method: exchange.request.method,
          route: exchange.route,
          status,
          durationMs: Math.round((performance.now() - startedAt) * 1000) / 1000,
          keyId: exchange.identity?.keyId ?? null,
          brandId: exchange.identity?.brandId ?? null
        })
      )
  })

/** Addresses tracked per interval; past this, refusals are counted under one bucket. */
const maxTrackedAddresses = 10_000
const otherAddresses = "(other addresses)"

/**
 * 401s by client address over an interval: the first from an address is logged as any request,
 * the rest only counted and logged as one line per address when the interval ends. A client
 * hammering the service with bad keys costs a counter, not a log line per request.
 */
export const makeRefusalTally = () => {
  let counts = new Map<string, number>()
  return {
    /** Notes a 401 from `address`; true when it is the address's first of the interval. */
    first: (address: string): boolean => {
      const key = counts.has(address) || counts.size < maxTrackedAddresses ? address : otherAddresses
      const seen = counts.get(key)
      counts.set(key, seen === undefined ? 0 : seen + 1)
      return seen === undefined && key === address
    },
    /** The addresses with unlogged refusals since the last call, and how many each. */
    drain: (): ReadonlyArray<readonly [address: string, count: number]> => {
      const ended = counts
      counts = new Map()
      return [...ended].filter(([, count]) => count > 0)
    }
  }
}
