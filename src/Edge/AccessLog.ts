import { Effect, type Fiber, FiberRef, Option } from "effect"
import { type AccessLogFields, AccessLogEntry, AccessLogOutput, notedKey } from "../Logging.ts"
import type { Reply } from "./Endpoint.ts"
import type { Exchange } from "./Exchange.ts"

/** The fields of a finished request's line: the key as its middleware noted it on the request's fiber. */
const fieldsOf = (exchange: Exchange, fiber: Fiber.RuntimeFiber<unknown, unknown>, status: number, startedAt: number): AccessLogFields => {
  const key = notedKey(fiber.getFiberRef(FiberRef.currentLogAnnotations))
  return {
    clientAddress: exchange.clientAddress,
    clientRequestId: exchange.clientRequestId,
    method: exchange.request.method,
    route: exchange.route,
    status,
    durationMs: Math.round((performance.now() - startedAt) * 1000) / 1000,
    keyId: key.keyId,
    brandId: key.brandId,
    reason: key.reason
  }
}

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
          if (wanted(reply.status)) write(fiber, fieldsOf(exchange, fiber, reply.status, startedAt))
          return reply
        })
    }
    const log = traced
      ? (fields: AccessLogFields) => Effect.logInfo("request").pipe(Effect.annotateLogs(fields))
      : (fields: AccessLogFields) => Effect.logInfo(new AccessLogEntry(fields))
    return (answer, fiber, exchange, startedAt, wanted) =>
      Effect.tap(answer, (reply) => wanted(reply.status) ? log(fieldsOf(exchange, fiber, reply.status, startedAt)) : Effect.void)
  })

/** A request's answer with its access-log line, from the request's fiber (see `makeAccessLog`). */
export type WithAccessLog = <E, R>(
  answer: Effect.Effect<Reply, E, R>,
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  exchange: Exchange,
  startedAt: number,
  wanted: (status: number) => boolean
) => Effect.Effect<Reply, E, R>

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
