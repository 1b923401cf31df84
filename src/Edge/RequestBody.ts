import { bodyTimeoutMs, maxBodyBytes, maxBodyChunks } from "../Domain/JsonBody.ts"

/**
 * A request body as read: at most the size limit is ever held in memory, and a body that does
 * not arrive in time is given up on.
 */
export type RequestBody =
  | { readonly _tag: "Read"; readonly bytes: Uint8Array<ArrayBuffer> }
  | { readonly _tag: "TooLarge" }
  | { readonly _tag: "TooManyChunks" }
  | { readonly _tag: "Incomplete" }

const emptyBody: RequestBody = { _tag: "Read", bytes: new Uint8Array(0) }
const tooLarge: RequestBody = { _tag: "TooLarge" }
const tooManyChunks: RequestBody = { _tag: "TooManyChunks" }
const incomplete: RequestBody = { _tag: "Incomplete" }

/** A chunked body, read chunk by chunk and given up on past the size or the number of chunks. */
const readChunked = async (body: ReadableStream<Uint8Array<ArrayBuffer>>, limit: number): Promise<RequestBody> => {
  const reader = body.getReader()
  const chunks: Array<Uint8Array<ArrayBuffer>> = []
  let size = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    size += value.byteLength
    if (size > limit || chunks.length === maxBodyChunks) {
      void reader.cancel().catch(() => {})
      return size > limit ? tooLarge : tooManyChunks
    }
    chunks.push(value)
  }
  return { _tag: "Read", bytes: chunks.length === 1 ? chunks[0]! : new Uint8Array(Buffer.concat(chunks)) }
}

/** A request that announced a body (of declared length above zero, or chunked). */
export const hasBody = (request: Request): boolean => {
  const length = request.headers.get("content-length")
  return length !== null ? length !== "0" : request.headers.has("transfer-encoding")
}

export const readBody = async (
  request: Request,
  limit = maxBodyBytes,
  timeoutMs = bodyTimeoutMs
): Promise<RequestBody> => {
  const declared = request.headers.get("content-length")
  if (declared !== null && Number(declared) > limit) return tooLarge
  if (declared === "0") return emptyBody
  // A declared length is read without touching `request.body`: that makes Bun build a stream,
  // and reading the body after it costs several times more than the native `arrayBuffer()`.
  // Without one (chunked, or a Request made in process) the stream is all there is.
  const stream = declared === null ? request.body : null
  if (declared === null && stream === null) return emptyBody
  // Given up on, the read is left pending: the answer closes the connection, which ends it.
  let timer: Timer | undefined
  const timedOut = new Promise<RequestBody>((resolve) => {
    timer = setTimeout(() => resolve(incomplete), timeoutMs)
  })
  // A declared length within the limit bounds what can arrive: Bun reads it whole, natively, for
  // less CPU than reading the stream chunk by chunk.
  const read = stream === null
    ? request.arrayBuffer().then((buffer): RequestBody => ({ _tag: "Read", bytes: new Uint8Array(buffer) }))
    : readChunked(stream, limit)
  try {
    return await Promise.race([read.catch(() => incomplete), timedOut])
  } finally {
    clearTimeout(timer)
  }
}
