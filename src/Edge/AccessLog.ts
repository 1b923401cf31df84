import { Context, Effect, type Fiber, HashMap, Logger, Option } from "effect"
import type { RefusalReason } from "../Domain/Errors.ts"
import type { Exchange, Reply } from "./Exchange.ts"

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
 * One access-log line's fields; the key's id and brand, never the key. A refused key (a 401) keeps
 * its id when it parses and its brand when it is known, and `reason` (null on every other line) says
 * why: support can tell from the log what the answer must not (README, Operating it).
 */
export type AccessLogFields = {
  readonly method: string
  readonly route: string
  readonly status: number
  readonly durationMs: number
  readonly keyId: string | null
  readonly brandId: string | null
  readonly reason: RefusalReason | null
}

/** The fields of a finished request's line. */
const fieldsOf = (exchange: Exchange, status: number, startedAt: number): AccessLogFields => {
  const { key } = exchange
  return {
    method: exchange.request.method,
    route: exchange.route,
    status,
    durationMs: Math.round((performance.now() - startedAt) * 1000) / 1000,
    keyId: key?.keyId ?? null,
    brandId: key?.brandId ?? null,
    reason: key?.reason ?? null
  }
}

/**
 * An access-log line as the message of a log call: the terminal's pretty logger gets it so and
 * lifts its fields into annotations (`withAccessLogFields`).
 */
export class AccessLogEntry {
  constructor(readonly fields: AccessLogFields) {}
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
 * The JSON logging's writer of an access line: at once, with the request's fiber for its
 * annotations, log spans and id, in the shape of every other line. It needs no Effect step of its
 * own, nor Effect's logger (a copy of the fiber's locals and a walk of its loggers per line).
 */
export class AccessLogOutput extends Context.Tag("AccessLogOutput")<
  AccessLogOutput,
  (fiber: Fiber.RuntimeFiber<unknown, unknown>, fields: AccessLogFields) => void
>() {}

/**
 * Adds the access-log line to a request's answer, decided once when the edge is built: the JSON
 * logging's writer called as the answer passes, or else a log call (the terminal's pretty logger;
 * with tracing on, the line is also the span's `request` event, its fields the attributes).
 * `wanted` says whether a status is logged (401s after the first from an address are only counted).
 */
export const makeAccessLog = (traced: boolean) =>
  Effect.map(Effect.serviceOption(AccessLogOutput), (output): WithAccessLog => {
    if (!traced && Option.isSome(output)) {
      const write = output.value
      return (answer, fiber, exchange, startedAt, wanted) =>
        Effect.map(answer, (reply) => {
          if (wanted(reply.status)) write(fiber, fieldsOf(exchange, reply.status, startedAt))
          return reply
        })
    }
    const log = traced
      ? (fields: AccessLogFields) => Effect.logInfo("request").pipe(Effect.annotateLogs(fields))
      : (fields: AccessLogFields) => Effect.logInfo(new AccessLogEntry(fields))
    return (answer, _fiber, exchange, startedAt, wanted) =>
      Effect.tap(answer, (reply) => wanted(reply.status) ? log(fieldsOf(exchange, reply.status, startedAt)) : Effect.void)
  })

/** A request's answer with its access-log line, from the request's fiber (see `makeAccessLog`). */
export type WithAccessLog = <E>(
  answer: Effect.Effect<Reply, E>,
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  exchange: Exchange,
  startedAt: number,
  wanted: (status: number) => boolean
) => Effect.Effect<Reply, E>

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
