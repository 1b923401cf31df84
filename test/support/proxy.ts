import { createServer, connect, type Socket } from "node:net"

/**
 * A TCP proxy in front of PostgreSQL or Redis, so a test can take the service's database or
 * store away (every connection cut, new ones closed at once) and bring it back, as a restart or a
 * network fault would, without touching the server that other tests use.
 */
export interface FaultyLink {
  /** What to give the service instead of the real address. */
  readonly url: string
  /** Cuts every connection, and closes new ones as soon as they are accepted, until `restore`. */
  readonly cut: () => void
  readonly restore: () => void
  readonly close: () => void
}

export const faultyLink = async (target: string): Promise<FaultyLink> => {
  const upstreamUrl = new URL(target)
  const defaultPorts: Record<string, number> = { "postgres:": 5432, "postgresql:": 5432, "redis:": 6379, "rediss:": 6379 }
  const defaultPort = defaultPorts[upstreamUrl.protocol]
  if (upstreamUrl.port === "" && defaultPort === undefined) throw new Error(`faultyLink: no port in ${upstreamUrl.protocol} ${target}`)
  const upstreamPort = upstreamUrl.port === "" ? defaultPort! : Number(upstreamUrl.port)
  const sockets = new Set<Socket>()
  const track = (socket: Socket) => {
    sockets.add(socket)
    socket.on("close", () => sockets.delete(socket))
  }
  let down = false
  // `pipe` writes what the other side takes and waits for it to drain: nothing is lost or
  // reordered under load, as it could be when a partial write was ignored.
  const listener = createServer((client) => {
    if (down) return void client.destroy()
    const upstream = connect(upstreamPort, upstreamUrl.hostname)
    track(client)
    track(upstream)
    const both = () => {
      client.destroy()
      upstream.destroy()
    }
    client.on("error", both).on("close", both)
    upstream.on("error", both).on("close", both)
    client.pipe(upstream).pipe(client)
  })
  await new Promise<void>((resolve, reject) => {
    listener.once("error", reject).listen(0, "127.0.0.1", () => {
      listener.off("error", reject)
      resolve()
    })
  })
  const address = listener.address()
  if (address === null || typeof address === "string") throw new Error("the proxy has no TCP port")
  const proxied = new URL(target)
  proxied.hostname = "127.0.0.1"
  proxied.port = String(address.port)
  return {
    url: proxied.toString().replace(/\/$/, ""),
    cut: () => {
      down = true
      for (const socket of sockets) socket.destroy()
      sockets.clear()
    },
    restore: () => {
      down = false
    },
    close: () => {
      for (const socket of sockets) socket.destroy()
      listener.close()
    }
  }
}
