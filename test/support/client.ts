import { connect, type Socket } from "node:net"
import { stateDeadlineMs } from "./deadlines.ts"

export const creatorId = "11111111-1111-4111-8111-111111111111"
export const campaignId = "22222222-2222-4222-8222-222222222222"
export const activatePath = (creator = creatorId, campaign = campaignId) =>
  `/v1/creators/${creator}/campaigns/${campaign}/activate`
/** The activate route as the access log and spans name it. */
export const activateRoute = "/v1/creators/:creatorId/campaigns/:campaignId/activate"

export const uniqueKey = () => `test-${crypto.randomUUID()}`

export interface Answer {
  readonly status: number
  readonly headers: Headers
  readonly text: string
  /** The body parsed as JSON, or undefined when it is not JSON. */
  readonly json: any
}

const parseJson = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

export interface Call {
  readonly method?: string
  readonly path: string
  readonly apiKey?: string | undefined
  readonly headers?: Record<string, string>
  readonly body?: string | Uint8Array | ReadableStream<Uint8Array>
}

/**
 * How long `call` waits for a whole answer: past the server's own bound on reading a body (10 s,
 * docs/integrators.md, Errors), short of a test's timeout, so that a request left hanging fails as itself.
 */
const answerTimeoutMs = stateDeadlineMs

/** One request through fetch: the status, headers and body text exactly as answered. */
export const call = async (
  base: string,
  { apiKey, body, headers = {}, method = "GET", path }: Call
): Promise<Answer> => {
  const signal = AbortSignal.timeout(answerTimeoutMs)
  try {
    const response = await fetch(`${base}${path}`, {
      method,
      headers: { ...(apiKey === undefined ? {} : { authorization: `Bearer ${apiKey}` }), ...headers },
      ...(body === undefined ? {} : { body }),
      ...(body instanceof ReadableStream ? { duplex: "half" } : {}),
      signal
    } as RequestInit)
    const text = await response.text()
    return { status: response.status, headers: response.headers, text, json: parseJson(text) }
  } catch (error) {
    if (!signal.aborted) throw error
    throw new Error(`${method} ${path}: no whole answer within ${answerTimeoutMs / 1000} s`, { cause: error })
  }
}

export interface Activate {
  readonly apiKey: string | undefined
  readonly key?: string
  readonly body?: unknown
  /** Sent as is instead of `body`. */
  readonly rawBody?: string | Uint8Array | ReadableStream<Uint8Array>
  readonly path?: string
  /** `application/json` unless given; `null` sends no Content-Type. */
  readonly contentType?: string | null
}

export const activate = (base: string, options: Activate): Promise<Answer> =>
  call(base, {
    method: "POST",
    path: options.path ?? activatePath(),
    apiKey: options.apiKey,
    headers: {
      ...(options.contentType === null ? {} : { "content-type": options.contentType ?? "application/json" }),
      ...(options.key === undefined ? {} : { "idempotency-key": options.key })
    },
    body: options.rawBody ?? JSON.stringify(options.body ?? { socialUsername: "@jane" })
  })

export const whoami = (base: string, apiKey: string): Promise<Answer> => call(base, { path: "/v1/whoami", apiKey })

const encoder = new TextEncoder()

/** A request body that sends `first`, then `rest` only once `release` resolves. */
export const gatedBody = (first: string, rest: string, release: Promise<void>): ReadableStream<Uint8Array> =>
  new ReadableStream({
    async start(controller) {
      controller.enqueue(encoder.encode(first))
      await release
      controller.enqueue(encoder.encode(rest))
      controller.close()
    }
  })

/** A request body that never ends: only a server that stops reading can answer it. */
export const endlessBody = (): ReadableStream<Uint8Array> => {
  const chunk = encoder.encode(" ".repeat(1024))
  return new ReadableStream({
    async pull(controller) {
      await Bun.sleep(1)
      controller.enqueue(chunk)
    }
  })
}

// Raw HTTP/1.1 over a socket: for what fetch will not send (bad bytes, lying Content-Length,
// unusual methods, unnormalised paths) and for watching how a connection ends.

export interface RawResponse {
  readonly status: number
  /** Header names in lower case; repeated headers joined with ", ". */
  readonly headers: Record<string, string>
  readonly body: string
  readonly json: any
}

/** How a raw exchange ended: with a response, a clean close (FIN), a reset, or nothing before the deadline. */
export type RawOutcome =
  | { readonly _tag: "Answered"; readonly response: RawResponse }
  | { readonly _tag: "Closed" }
  | { readonly _tag: "Reset" }
  | { readonly _tag: "Hung" }

/** Header lines in the order they are sent; a name may repeat. */
export type HeaderLines = ReadonlyArray<readonly [string, string]>

/** The response of an outcome that must be one; anything else fails the test, naming what happened. */
export const responseOf = (outcome: RawOutcome): RawResponse => {
  if (outcome._tag !== "Answered") throw new Error(`expected a response, the connection ${outcome._tag}`)
  return outcome.response
}

/**
 * The bytes of one request. Header values are written byte for byte as Latin-1, so a caller
 * can send any byte; `Content-Length` is added for a body unless a header list already has one.
 */
export const rawRequest = (
  method: string,
  target: string,
  headers: HeaderLines,
  body?: string | Uint8Array
): Uint8Array => {
  const bodyBytes = body === undefined ? new Uint8Array(0) : typeof body === "string" ? encoder.encode(body) : body
  const declared = headers.some(([name]) => name.toLowerCase() === "content-length")
  const lines = [
    `${method} ${target} HTTP/1.1`,
    "host: 127.0.0.1",
    ...headers.map(([name, value]) => `${name}: ${value}`),
    ...(body !== undefined && !declared ? [`content-length: ${bodyBytes.byteLength}`] : []),
    "",
    ""
  ]
  return new Uint8Array(Buffer.concat([Buffer.from(lines.join("\r\n"), "latin1"), bodyBytes]))
}

/** A header value as the UTF-8 bytes of `text`, for `rawRequest`. */
export const utf8Header = (text: string) => Buffer.from(text, "utf8").toString("latin1")

const headerEnd = Buffer.from("\r\n\r\n")

/** The first complete response in `data`, if there is one, and the bytes after it. */
const parseResponse = (data: Buffer, bodyless: boolean): { response: RawResponse; rest: Buffer } | undefined => {
  const end = data.indexOf(headerEnd)
  if (end < 0) return undefined
  const [statusLine, ...lines] = data.subarray(0, end).toString("latin1").split("\r\n")
  const headers: Record<string, string> = {}
  for (const line of lines) {
    const colon = line.indexOf(":")
    const name = line.slice(0, colon).trim().toLowerCase()
    const value = line.slice(colon + 1).trim()
    headers[name] = name in headers ? `${headers[name]}, ${value}` : value
  }
  const length = bodyless ? 0 : Number(headers["content-length"] ?? 0)
  const start = end + headerEnd.length
  if (data.length < start + length) return undefined
  const body = data.subarray(start, start + length).toString("utf8")
  return {
    response: { status: Number(statusLine!.split(" ")[1]), headers, body, json: parseJson(body) },
    rest: data.subarray(start + length)
  }
}

export interface RawConnection {
  /** This end's port: the connection's name in the server's socket table. */
  readonly localPort: number
  readonly send: (bytes: string | Uint8Array) => void
  /** Closes the sending side only (a truncated request). */
  readonly endWriting: () => void
  /** The next response on this connection, or how the connection ended instead. */
  readonly next: (options?: { readonly timeoutMs?: number; readonly bodyless?: boolean }) => Promise<RawOutcome>
  /** How many bytes have arrived that no `next` has returned yet. */
  readonly pending: () => number
  readonly destroy: () => void
}

/**
 * Opens a connection, from `localAddress` when given (any of 127.0.0.0/8 on Linux); rejects with
 * the socket error (ECONNREFUSED when nothing listens).
 */
export const openConnection = (url: string, localAddress?: string): Promise<RawConnection> =>
  new Promise((resolve, reject) => {
    const { hostname, port } = new URL(url)
    const socket: Socket = connect({
      port: Number(port),
      host: hostname,
      ...(localAddress === undefined ? {} : { localAddress })
    })
    let buffer: Buffer = Buffer.alloc(0)
    let ended: RawOutcome | undefined
    let wake = () => {}
    socket.on("data", (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk])
      wake()
    })
    socket.on("end", () => {
      ended ??= { _tag: "Closed" }
      wake()
    })
    socket.on("close", () => {
      ended ??= { _tag: "Closed" }
      wake()
    })
    socket.on("error", (error: NodeJS.ErrnoException) => {
      ended ??= error.code === "ECONNRESET" || error.code === "EPIPE" ? { _tag: "Reset" } : { _tag: "Closed" }
      wake()
      reject(error)
    })
    socket.once("connect", () =>
      resolve({
        localPort: socket.localPort!,
        send: (bytes) => socket.write(bytes),
        endWriting: () => socket.end(),
        pending: () => buffer.length,
        destroy: () => socket.destroy(),
        next: async ({ bodyless = false, timeoutMs = stateDeadlineMs } = {}) => {
          const deadline = Date.now() + timeoutMs
          for (;;) {
            const parsed = parseResponse(buffer, bodyless)
            if (parsed !== undefined) {
              buffer = parsed.rest
              return { _tag: "Answered", response: parsed.response }
            }
            if (ended !== undefined) return ended
            const remaining = deadline - Date.now()
            if (remaining <= 0) return { _tag: "Hung" }
            await new Promise<void>((woken) => {
              const timer = setTimeout(woken, remaining)
              wake = () => {
                clearTimeout(timer)
                woken()
              }
            })
          }
        }
      }))
  })

/** Sends one request on a fresh connection and reports how it ended. */
export const exchange = async (
  url: string,
  request: Uint8Array,
  options: { readonly timeoutMs?: number; readonly bodyless?: boolean } = {}
): Promise<RawOutcome> => {
  const connection = await openConnection(url)
  try {
    connection.send(request)
    return await connection.next(options)
  } finally {
    connection.destroy()
  }
}
