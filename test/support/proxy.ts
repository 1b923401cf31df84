import { connect, createServer, type Socket } from "node:net"
import { Transform } from "node:stream"

/**
 * A TCP proxy in front of PostgreSQL or Redis, so a test can take the service's database or
 * store away (every connection cut, new ones closed at once) and bring it back, as a restart or a
 * network fault would, or slow it down, without touching the server that other tests use; and
 * count what the service sent through it.
 */
export interface FaultyLink {
  /** What to give the service instead of the real address. */
  readonly url: string
  /** Cuts every connection, and closes new ones as soon as they are accepted, until `restore`. */
  readonly cut: () => void
  readonly restore: () => void
  /** Holds every chunk, either way, this long before passing it on (0: at once), as a slow database would. */
  readonly slow: (ms: number) => void
  /** Bytes the service has sent through the link so far: nothing sent, nothing asked. */
  readonly sent: () => number
  /** On PostgreSQL, the statements the service has sent through the link so far (each simple query, and each extended one's Sync). */
  readonly statements: () => number
  readonly close: () => void
}

export const faultyLink = async (target: string): Promise<FaultyLink> => {
  const upstreamUrl = new URL(target)
  const defaultPorts: Record<string, number> = {
    "postgres:": 5432,
    "postgresql:": 5432,
    "redis:": 6379,
    "rediss:": 6379
  }
  const defaultPort = defaultPorts[upstreamUrl.protocol]
  if (upstreamUrl.port === "" && defaultPort === undefined) {
    throw new Error(`faultyLink: no port in ${upstreamUrl.protocol} ${target}`)
  }
  const upstreamPort = upstreamUrl.port === "" ? defaultPort! : Number(upstreamUrl.port)
  const sockets = new Set<Socket>()
  const track = (socket: Socket) => {
    sockets.add(socket)
    socket.on("close", () => sockets.delete(socket))
  }
  let down = false
  let delayMs = 0
  let sent = 0
  let statements = 0
  const isPostgres = upstreamUrl.protocol.startsWith("postgres")
  // Chunk by chunk, in order: each is held, then passed on before the next is taken.
  const held = (count: boolean) => {
    const countStatements = count && isPostgres ? statementCounter() : undefined
    return new Transform({
      transform(chunk: Buffer, _encoding, done) {
        if (count) sent += chunk.length
        if (countStatements !== undefined) statements += countStatements(chunk)
        if (delayMs === 0) return done(null, chunk)
        setTimeout(() => done(null, chunk), delayMs)
      }
    })
  }
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
    client.pipe(held(true)).pipe(upstream).pipe(held(false)).pipe(client)
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
    slow: (ms) => {
      delayMs = ms
    },
    sent: () => sent,
    statements: () => statements,
    close: () => {
      for (const socket of sockets) socket.destroy()
      listener.close()
    }
  }
}

/** The SSLRequest's code: the request before the startup message, which is still to come. */
const sslRequestCode = 80_877_103

/**
 * Counts, in what a client sends PostgreSQL over one connection, the messages that end a
 * statement: a simple query ('Q') or an extended query's Sync ('S'). Each message is a type byte
 * and a length, after the startup message, which has no type byte
 * (https://www.postgresql.org/docs/current/protocol-message-formats.html).
 */
const statementCounter = () => {
  let pending = Buffer.alloc(0)
  let started = false
  return (chunk: Buffer): number => {
    pending = Buffer.concat([pending, chunk])
    let ended = 0
    for (;;) {
      if (!started) {
        if (pending.length < 8) break
        const length = pending.readInt32BE(0)
        if (pending.length < length) break
        started = pending.readInt32BE(4) !== sslRequestCode
        pending = pending.subarray(length)
        continue
      }
      if (pending.length < 5) break
      const length = pending.readInt32BE(1)
      if (pending.length < 1 + length) break
      if (pending[0] === 0x51 || pending[0] === 0x53) ended++
      pending = pending.subarray(1 + length)
    }
    return ended
  }
}
