import { Effect } from "effect"
import { spawnSync } from "node:child_process"
import { readFileSync } from "node:fs"
import type { Cidr } from "../Config.ts"
import { trustedBy } from "./Caller.ts"

/** At most this many requests on one connection per window, then it is closed after its answer. */
const requestsPerConnection = 1_000
const requestsPerConnectionWindowMs = 10_000

/**
 * Descriptors kept from connections for everything else the process opens: the database's files or
 * PostgreSQL's pool, Redis, the log, the metrics listener and its scrapes, the OTLP export, the
 * warm-up's copy (README, Operating it: Connections).
 */
const descriptorReserve = 256

/**
 * Past this share of the total, or at an address's limit, idle connections are closed, at most once
 * per `relieveEveryMs`.
 */
const pressureShare = 0.9
const relieveEveryMs = 1_000

/** How often connections that have gone idle stop counting. */
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

/** A connection that has sent a request, counted until it has gone idle for the idle timeout. */
export interface Connection {
  readonly key: string
  readonly address: string
  served: number
  windowStart: number
  lastSeen: number
  inFlight: number
}

/** What was refused and closed since the last `takeCounts`. */
export interface ConnectionCounts {
  readonly overAddressLimit: number
  readonly overTotal: number
  readonly closedIdle: number
  readonly firstAddressRefused: string | undefined
}

/**
 * The connections the server holds, counted per socket peer address (README, Operating it:
 * Connections). Bun tells the server nothing when a connection opens or closes: a connection is
 * known by its peer's address and port from its first request on, and counts until `idleTimeoutMs`
 * passes without a request (when Bun closes it), or until it ends with `Connection: close`. A
 * connection closed by its client without saying so still counts until then: the count is never
 * below what is open.
 *
 * A first request on a connection over its address's limit, or over the process's total, is
 * refused (the caller answers it 503 and closes the connection), once the idle connections have
 * been closed (`closeIdle`, at most once a second) and no longer count: near the total, and when an
 * address reaches its limit, since many of what it holds may be connections its client closed. A connection also closes after its
 * answer once it carried 1,000 requests in 10 s, as nginx's `keepalive_requests` does: Bun answers
 * the requests pipelined on one connection one after the other without serving anyone else.
 */
export const makeConnectionLimit = (options: {
  readonly limits: ConnectionLimits
  readonly trustedProxies: ReadonlyArray<Cidr>
  readonly idleTimeoutMs: number
  readonly closeIdle: () => number
}) =>
  Effect.gen(function*() {
    const { idleTimeoutMs, limits } = options
    const isProxy = trustedBy(options.trustedProxies)

    const connections = new Map<string, Connection>()
    const perAddress = new Map<string, number>()
    const pressureAt = Math.floor(limits.total * pressureShare)
    let relievedAt = Number.NEGATIVE_INFINITY
    let counts = {
      overAddressLimit: 0,
      overTotal: 0,
      closedIdle: 0,
      firstAddressRefused: undefined as string | undefined
    }

    const forget = (connection: Connection) => {
      if (connections.get(connection.key) !== connection) return
      connections.delete(connection.key)
      const held = perAddress.get(connection.address)! - 1
      if (held === 0) perAddress.delete(connection.address)
      else perAddress.set(connection.address, held)
    }

    // Closing idle connections is a relief, not a duty: should it fail, the limits still hold without it.
    const relieve = (now: number) => {
      if (now - relievedAt < relieveEveryMs) return
      relievedAt = now
      try {
        counts.closedIdle += options.closeIdle()
        for (const connection of connections.values()) if (connection.inFlight === 0) forget(connection)
      } catch {
        // The count stays high, never low.
      }
    }

    const refuse = (refusal: Refusal, address: string): Refusal => {
      if (refusal === "address") counts.overAddressLimit++
      else counts.overTotal++
      counts.firstAddressRefused ??= address
      return refusal
    }

    // A timer of its own: whatever went wrong in a sweep, the next one runs, and the process goes on.
    const sweep = setInterval(() => {
      try {
        const now = performance.now()
        for (const connection of connections.values()) {
          if (connection.inFlight === 0 && now - connection.lastSeen > idleTimeoutMs) forget(connection)
        }
      } catch {
        // Nothing in the sweep opens a file or a socket; should it fail all the same, the count stays high, never low.
      }
    }, sweepEveryMs)
    sweep.unref()
    yield* Effect.addFinalizer(() => Effect.sync(() => clearInterval(sweep)))

    return {
      /**
       * A request arrives from `peer`: its connection (counted from now on if it is new), a refusal,
       * or undefined when it has no socket peer (in process, the warm-up's Unix socket).
       */
      admit: (peer: { readonly address: string; readonly port: number } | null | undefined) => {
        if (peer === undefined || peer === null) return undefined
        const key = `${peer.address}:${peer.port}`
        const now = performance.now()
        let connection = connections.get(key)
        if (connection === undefined) {
          const limit = isProxy(peer.address) ? limits.perProxy : limits.perAddress
          if ((perAddress.get(peer.address) ?? 0) >= limit) {
            // Most of what it holds may be connections its client already closed (a client that
            // opens a connection per request and closes it without a word): the idle ones are
            // closed, and no longer counted, before its new one is refused.
            relieve(now)
            if ((perAddress.get(peer.address) ?? 0) >= limit) return refuse("address", peer.address)
          }
          const held = perAddress.get(peer.address) ?? 0
          if (connections.size >= pressureAt) {
            relieve(now)
            if (connections.size >= limits.total) return refuse("total", peer.address)
          }
          connection = { key, address: peer.address, served: 0, windowStart: now, lastSeen: now, inFlight: 0 }
          connections.set(key, connection)
          perAddress.set(peer.address, held + 1)
        }
        if (now - connection.windowStart > requestsPerConnectionWindowMs) {
          connection.windowStart = now
          connection.served = 0
        }
        connection.served++
        connection.inFlight++
        connection.lastSeen = now
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
      /** What was refused and closed since the last call. */
      takeCounts: (): ConnectionCounts => {
        const drained = counts
        counts = { overAddressLimit: 0, overTotal: 0, closedIdle: 0, firstAddressRefused: undefined }
        return drained
      }
    }
  })
