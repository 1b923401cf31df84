import { Effect } from "effect"

/** At most this many requests on one connection per window, then it is closed after its answer. */
const requestsPerConnection = 1_000
const requestsPerConnectionWindowMs = 10_000

/**
 * Requests per connection (client address and port) in the current window (README, Operating it:
 * Connections). Bun answers the requests pipelined on one connection one after the other without
 * serving anyone else: past the limit the connection is closed after its answer, as nginx's
 * keepalive_requests does, so one client cannot hold the event loop for long. `overLimit` is
 * true for the request after which its connection closes.
 */
export const makeConnectionLimit = Effect.gen(function*() {
  const perConnection = new Map<string, { served: number; since: number }>()
  // Forgets connections whose window ended: the map holds at most the connections of a window.
  const sweep = setInterval(() => {
    const now = performance.now()
    for (const [connection, { since }] of perConnection) {
      if (now - since > requestsPerConnectionWindowMs) perConnection.delete(connection)
    }
  }, requestsPerConnectionWindowMs)
  sweep.unref()
  yield* Effect.addFinalizer(() => Effect.sync(() => clearInterval(sweep)))
  return {
    overLimit: (peer: { readonly address: string; readonly port: number } | null | undefined): boolean => {
      if (peer === undefined || peer === null) return false
      const connection = `${peer.address}:${peer.port}`
      const now = performance.now()
      const window = perConnection.get(connection)
      if (window === undefined || now - window.since > requestsPerConnectionWindowMs) {
        perConnection.set(connection, { served: 1, since: now })
        return requestsPerConnection <= 1
      }
      window.served++
      return window.served >= requestsPerConnection
    }
  }
})
