import { Effect } from "effect"
import { spawnSync } from "node:child_process"
import { readFileSync } from "node:fs"
import type { Cidr } from "../Config.ts"
import { clientKeyOf, trustedBy } from "./Caller.ts"

/** At most this many requests on one connection per window, then it is closed after its answer. */
const requestsPerConnection = 1_000
const requestsPerConnectionWindowMs = 10_000

/**
 * Descriptors kept from connections for everything else the process opens: the database's files or
 * PostgreSQL's pool, Redis, the log, the metrics listener and its scrapes, the OTLP export, the
 * warm-up's copy (docs/operators.md, Operating it: Connections).
 */
const descriptorReserve = 256

/**
 * Bun closes a connection idle past its timeout on a timer that ticks every 4 s (uSockets'
 * `LIBUS_TIMEOUT_GRANULARITY`): measured with Bun 1.4.4, a timeout of 1 s closed at 4 s, 5 s at 8 s
 * and 30 s at 32 s, whether or not the connection held part of a next request.
 */
const timerGranularitySeconds = 4

/**
 * From this share of its limit on, an address's requests leave their connections with the short
 * idle timeout; so do every address's past this share of the process's total.
 */
const nearLimitShare = 0.5
const pressureShare = 0.9

/** The idle timeout a request leaves its connection with when its address nears its limit. */
const shortIdleTimeoutSeconds = 1

/** How often connections that can no longer be open stop counting. */
const sweepEveryMs = 1_000

/**
 * The process's limit of open descriptors, RLIMIT_NOFILE's soft limit (which Bun raises to the hard
 * limit as it starts): from /proc on Linux, else from a shell it starts, which inherits it.
 * Undefined when unlimited or unknown.
 */
export const descriptorLimit = (): number | undefined => {
  const parse = (text: string | undefined) => (text !== undefined && /^\d+$/.test(text) ? Number(text) : undefined)
  try {
    const line = readFileSync("/proc/self/limits", "utf8").split("\n").find((l) => l.startsWith("Max open files"))
    return parse(line?.split(/\s+/)[3])
  } catch {
    try {
      return parse(spawnSync("sh", ["-c", "ulimit -n"], { encoding: "utf8" }).stdout?.trim())
    } catch {
      return undefined
    }
  }
}

/** The connections the process serves at most: its descriptor limit less the reserve (half of it, under 512). */
export const connectionsWithin = (limit: number | undefined): number =>
  limit === undefined ? Number.POSITIVE_INFINITY : limit - Math.min(descriptorReserve, Math.floor(limit / 2))

/** How many connections a peer address may hold (a trusted proxy's apart), and the process in all. */
export interface ConnectionLimits {
  readonly perAddress: number
  readonly perProxy: number
  readonly total: number
}

/** Why a request was refused: its address holds its share of connections, or the process all it may. */
export type Refusal = "address" | "total"

/** What one client address holds: its connections counted, and how many it may hold. */
interface Holder {
  readonly key: string
  readonly limit: number
  held: number
}

/** A connection that has sent a request, counted until it can no longer be open. */
export interface Connection {
  readonly key: string
  readonly holder: Holder
  served: number
  windowStart: number
  lastSeen: number
  inFlight: number
  /** The idle timeout its last request left it with, in seconds. */
  idleTimeoutSeconds: number
}

/** What was refused and shortened since the last `takeCounts`. */
export interface ConnectionCounts {
  readonly overAddressLimit: number
  readonly overTotal: number
  readonly shortened: number
  readonly firstAddressRefused: string | undefined
}

/**
 * The connections the server holds, counted per client address (docs/operators.md, Operating it:
 * Connections): the socket peer's, an IPv6 address by its /64 (`clientKeyOf`). Bun tells the
 * server nothing when a connection opens or closes: a connection is known by its peer's address
 * and port from its first request on, and counts until it can no longer be open: while a request
 * is in flight on it (Bun sets no idle timeout then), and after its last answer for its idle
 * timeout and the timer's granularity (when Bun has closed it, whatever part of a next request it
 * holds), or until it ends with `Connection: close` or with its client gone mid-request. The count
 * is never below what is open.
 *
 * A first request on a connection over its address's limit, or over the process's total, is
 * refused (the caller answers it 503 and closes the connection). Once an address holds half its
 * limit, each of its requests leaves its connection with an idle timeout of 1 s (`shorten`): its own
 * idle connections go within seconds, and no other address's; past 90 % of the total, every
 * address's do. A connection also closes after its answer once it carried 1,000 requests in 10 s,
 * as nginx's `keepalive_requests` does: Bun answers the requests pipelined on one connection one
 * after the other without serving anyone else.
 */
export const makeConnectionLimit = (options: {
  readonly limits: ConnectionLimits
  readonly trustedProxies: ReadonlyArray<Cidr>
  /** The idle timeout Bun gives a connection after each request unless told otherwise. */
  readonly idleTimeoutSeconds: number
  /** Gives the connection of `request` the short idle timeout, after this request only. */
  readonly shorten: (request: Request, seconds: number) => void
}) =>
  Effect.gen(function*() {
    const { limits } = options
    const isProxy = trustedBy(options.trustedProxies)

    const connections = new Map<string, Connection>()
    const holders = new Map<string, Holder>()
    const pressureAt = Math.floor(limits.total * pressureShare)
    let counts = {
      overAddressLimit: 0,
      overTotal: 0,
      shortened: 0,
      firstAddressRefused: undefined as string | undefined
    }

    const forget = (connection: Connection) => {
      if (connections.get(connection.key) !== connection) return
      connections.delete(connection.key)
      const { holder } = connection
      if (--holder.held === 0) holders.delete(holder.key)
    }

    const refuse = (refusal: Refusal, address: string): Refusal => {
      if (refusal === "address") counts.overAddressLimit++
      else counts.overTotal++
      counts.firstAddressRefused ??= address
      return refusal
    }

    /** Whether the connection may still be open at `now`: Bun closes it past its idle timeout, on its timer's next tick. */
    const mayBeOpen = (connection: Connection, now: number) =>
      connection.inFlight > 0 ||
      now - connection.lastSeen <= (connection.idleTimeoutSeconds + timerGranularitySeconds) * 1000

    // A timer of its own: whatever went wrong in a sweep, the next one runs, and the process goes on.
    const sweep = setInterval(() => {
      try {
        const now = performance.now()
        for (const connection of connections.values()) if (!mayBeOpen(connection, now)) forget(connection)
      } catch {
        // Nothing in the sweep opens a file or a socket; should it fail all the same, the count stays high, never low.
      }
    }, sweepEveryMs)
    sweep.unref()
    yield* Effect.addFinalizer(() => Effect.sync(() => clearInterval(sweep)))

    return {
      /**
       * `request` arrives from `peer`: its connection (counted from now on if it is new), a refusal,
       * or undefined when it has no socket peer (in process, the warm-up's Unix socket).
       */
      admit: (request: Request, peer: { readonly address: string; readonly port: number } | null | undefined) => {
        if (peer === undefined || peer === null) return undefined
        const key = `${peer.address}:${peer.port}`
        const now = performance.now()
        let connection = connections.get(key)
        if (connection === undefined) {
          const client = clientKeyOf(peer.address)
          let holder = holders.get(client)
          if (holder === undefined) {
            holder = { key: client, limit: isProxy(peer.address) ? limits.perProxy : limits.perAddress, held: 0 }
          }
          if (holder.held >= holder.limit) return refuse("address", client)
          if (connections.size >= limits.total) return refuse("total", client)
          if (holder.held === 0) holders.set(client, holder)
          holder.held++
          connection = { key, holder, served: 0, windowStart: now, lastSeen: now, inFlight: 0, idleTimeoutSeconds: 0 }
          connections.set(key, connection)
        }
        if (now - connection.windowStart > requestsPerConnectionWindowMs) {
          connection.windowStart = now
          connection.served = 0
        }
        connection.served++
        connection.inFlight++
        connection.lastSeen = now
        // Bun gives a connection its default idle timeout again with each request.
        if (connection.holder.held >= connection.holder.limit * nearLimitShare || connections.size >= pressureAt) {
          options.shorten(request, shortIdleTimeoutSeconds)
          connection.idleTimeoutSeconds = shortIdleTimeoutSeconds
          counts.shortened++
        } else {
          connection.idleTimeoutSeconds = options.idleTimeoutSeconds
        }
        return connection
      },
      /** Whether the connection closes after this answer: it carried its last request of the window. */
      last: (connection: Connection) => connection.served >= requestsPerConnection,
      /** The request on `connection` is answered; `closing`: the connection ends with it. */
      answered: (connection: Connection, closing: boolean) => {
        connection.inFlight--
        connection.lastSeen = performance.now()
        if (closing) forget(connection)
      },
      /** What was refused and shortened since the last call. */
      takeCounts: (): ConnectionCounts => {
        const drained = counts
        counts = { overAddressLimit: 0, overTotal: 0, shortened: 0, firstAddressRefused: undefined }
        return drained
      }
    }
  })
