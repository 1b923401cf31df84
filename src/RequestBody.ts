import { Context } from "effect"

/** Bodies above this are refused with 413 (CONTRACT.md). */
export const maxBodyBytes = 16 * 1024

/**
 * The request body as the server read it before the app ran: at most the size limit
 * is ever held in memory, and a body that does not arrive in time is given up on.
 */
export type RequestBody =
  | { readonly _tag: "Read"; readonly bytes: Uint8Array<ArrayBuffer> }
  | { readonly _tag: "TooLarge" }
  | { readonly _tag: "Incomplete" }

export const RequestBody = Context.GenericTag<"RequestBody", RequestBody>("RequestBody")

export const emptyBody: RequestBody = { _tag: "Read", bytes: new Uint8Array(0) }

export const readBody = async (request: Request, limit: number, timeoutMs: number): Promise<RequestBody> => {
  const declared = request.headers.get("content-length")
  if (declared !== null && Number(declared) > limit) return { _tag: "TooLarge" }
  if (request.body === null) return emptyBody
  const reader = request.body.getReader()
  const chunks: Array<Uint8Array<ArrayBuffer>> = []
  let size = 0
  let timedOut = false
  const timer = setTimeout(() => {
    timedOut = true
    void reader.cancel().catch(() => {})
  }, timeoutMs)
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (timedOut) return { _tag: "Incomplete" }
      if (done) break
      size += value.byteLength
      if (size > limit) {
        void reader.cancel().catch(() => {})
        return { _tag: "TooLarge" }
      }
      chunks.push(value)
    }
  } catch {
    return { _tag: "Incomplete" }
  } finally {
    clearTimeout(timer)
  }
  return { _tag: "Read", bytes: chunks.length === 1 ? chunks[0]! : new Uint8Array(Buffer.concat(chunks)) }
}
