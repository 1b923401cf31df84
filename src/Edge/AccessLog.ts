import { Duration, Effect, type Fiber, Option } from "effect"
import { AccessLogEntry, type AccessLogFields, AccessLogOutput, currentKeyNote, droppedLogLines } from "../Logging.ts"
import { clientKeyOf } from "./Caller.ts"
import type { Exchange } from "./Exchange.ts"

/** The fields of a finished request's line: the key as its middleware noted it on the request's fiber. */
const fieldsOf = (
  exchange: Exchange,
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  status: number,
  startedAt: number
): AccessLogFields => {
  const key = fiber.getFiberRef(currentKeyNote).note
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
 * The access-log line of a request's answer, decided once when the edge is built: the JSON
 * logging's writer called at once (nothing more to run), or else a log call to run (the terminal's
 * pretty logger; with tracing on, the line is also the span's `request` event, its fields the
 * attributes).
 */
export const makeAccessLog = (traced: boolean) =>
  Effect.map(Effect.serviceOption(AccessLogOutput), (output): AccessLog => {
    if (!traced && Option.isSome(output)) {
      const write = output.value
      return (fiber, exchange, status, startedAt) => {
        write(fiber, fieldsOf(exchange, fiber, status, startedAt))
        return undefined
      }
    }
    return traced
      ? (fiber, exchange, status, startedAt) =>
        Effect.logInfo("request").pipe(Effect.annotateLogs(fieldsOf(exchange, fiber, status, startedAt)))
      : (fiber, exchange, status, startedAt) =>
        Effect.logInfo(new AccessLogEntry(fieldsOf(exchange, fiber, status, startedAt)))
  })

/** Writes a request's access-log line from its fiber, or says what to run to log it. */
export type AccessLog = (
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  exchange: Exchange,
  status: number,
  startedAt: number
) => Effect.Effect<void> | undefined

/** Addresses tracked per interval; past this, refusals are counted under one bucket. */
const maxTrackedAddresses = 10_000
const otherAddresses = "(other addresses)"

/**
 * 401s by client address over an interval (an IPv6 client by its /64, `clientKeyOf`): the first
 * from an address is logged as any request, the rest only counted and logged as one line per
 * address when the interval ends. A client hammering the service with bad keys costs a counter,
 * not a log line per request.
 */
export const makeRefusalTally = () => {
  let counts = new Map<string, number>()
  return {
    /** Notes a 401 from `address`; true when it is the address's first of the interval. */
    first: (address: string): boolean => {
      const client = clientKeyOf(address)
      const key = counts.has(client) || counts.size < maxTrackedAddresses ? client : otherAddresses
      const seen = counts.get(key)
      counts.set(key, seen === undefined ? 0 : seen + 1)
      return seen === undefined && key === client
    },
    /** The addresses with unlogged refusals since the last call, and how many each. */
    drain: (): ReadonlyArray<readonly [address: string, count: number]> => {
      const ended = counts
      counts = new Map()
      return [...ended].filter(([, count]) => count > 0)
    }
  }
}

/** A count the log sums up every `interval`, and once more when the server stops. */
export interface Summary {
  readonly interval: Duration.Duration
  readonly write: (stopping: boolean) => Effect.Effect<void>
}

/** How often repeated 401s from one address are summed up in the log. */
const refusalSummaryInterval = Duration.minutes(1)

/** The 401s counted rather than logged (`makeRefusalTally`), with the summary that logs them. */
export const makeRefusalSummary = () => {
  const tally = makeRefusalTally()
  const summary: Summary = {
    interval: refusalSummaryInterval,
    write: () =>
      Effect.suspend(() =>
        Effect.forEach(
          tally.drain(),
          ([clientAddress, count]) =>
            Effect.logInfo("repeated unauthorized requests", { clientAddress, count, status: 401 }),
          { discard: true }
        )
      )
  }
  return { tally, summary }
}

/**
 * The log lines dropped since the last summary, because stderr's pipe stayed full past its bound
 * (`Logging/Stderr.ts`): one warning a minute while any were, and at the stop. It may be dropped
 * too while the pipe stays full; the next summary's count then includes the lines since.
 */
export const makeDroppedLinesSummary = (): Summary => {
  let reported = droppedLogLines()
  return {
    interval: refusalSummaryInterval,
    write: () =>
      Effect.suspend(() => {
        const dropped = droppedLogLines()
        const count = dropped - reported
        if (count === 0) return Effect.void
        // Counted as said only once the line itself was taken (the writer drops it at once or not at all).
        return Effect.tap(
          Effect.logWarning("log lines dropped: stderr's pipe stayed full", { count }),
          () => {
            if (droppedLogLines() === dropped) reported = dropped
          }
        )
      })
  }
}
