import type { Socket, TCPSocketListener } from "bun"

/**
 * A TCP proxy in front of PostgreSQL or Redis, so a test can take the service's database or
 * store away (every connection cut, new ones refused) and bring it back, as a restart or a
 * network fault would, without touching the server that other tests use.
 */
export interface FaultyLink {
  /** What to give the service instead of the real address. */
  readonly url: string
  /** Cuts every connection and refuses new ones until `restore`. */
  readonly cut: () => void
  readonly restore: () => void
  readonly close: () => void
}

interface Pair {
  client: Socket<Pair>
  upstream?: Socket<Pair>
  pending: Array<Uint8Array>
}

export const faultyLink = (target: string): FaultyLink => {
  const upstreamUrl = new URL(target)
  const upstreamPort = Number(upstreamUrl.port)
  const pairs = new Set<Pair>()
  let down = false
  const listener: TCPSocketListener<Pair> = Bun.listen<Pair>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(client) {
        if (down) return void client.end()
        const pair: Pair = { client, pending: [] }
        client.data = pair
        pairs.add(pair)
        void Bun.connect<Pair>({
          hostname: upstreamUrl.hostname,
          port: upstreamPort,
          socket: {
            open(upstream) {
              upstream.data = pair
              pair.upstream = upstream
              for (const chunk of pair.pending) upstream.write(chunk)
              pair.pending = []
            },
            data(_, chunk) {
              pair.client.write(chunk)
            },
            close() {
              pair.client.end()
              pairs.delete(pair)
            },
            error() {
              pair.client.end()
            }
          }
        }).catch(() => client.end())
      },
      data(client, chunk) {
        const pair = client.data
        if (pair.upstream === undefined) pair.pending.push(new Uint8Array(chunk))
        else pair.upstream.write(chunk)
      },
      close(client) {
        client.data?.upstream?.end()
        if (client.data !== undefined) pairs.delete(client.data)
      }
    }
  })
  const proxied = new URL(target)
  proxied.hostname = "127.0.0.1"
  proxied.port = String(listener.port)
  return {
    url: proxied.toString().replace(/\/$/, ""),
    cut: () => {
      down = true
      for (const pair of pairs) {
        pair.client.terminate()
        pair.upstream?.terminate()
      }
      pairs.clear()
    },
    restore: () => {
      down = false
    },
    close: () => listener.stop(true)
  }
}
