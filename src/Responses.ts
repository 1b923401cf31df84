import { HttpApp, HttpServerResponse } from "@effect/platform"
import { Effect, FiberRef, Option } from "effect"

/**
 * A pre-response handler that only sets headers, and says which: HttpApiBuilder runs it as any
 * other, and the edge, which sees the headers, sets them without making a response object for it.
 */
export interface HeadersHandler extends HttpApp.PreResponseHandler {
  readonly headers: Readonly<Record<string, string>>
}

const headersHandler = (headers: Readonly<Record<string, string>>): HeadersHandler =>
  Object.assign(
    (_: unknown, response: HttpServerResponse.HttpServerResponse) => Effect.succeed(HttpServerResponse.setHeaders(response, headers)),
    { headers }
  )

export const isHeadersHandler = (handler: HttpApp.PreResponseHandler): handler is HeadersHandler => "headers" in handler

/**
 * Headers that whatever answer the request ends in carries, an error's included: the library's
 * pre-response handlers (`HttpApp.appendPreResponseHandler`), which HttpApiBuilder's server and
 * the edge both apply. Two that only set headers are one, later names over earlier ones, as
 * setting them one after the other would leave them.
 */
export const addResponseHeaders = (headers: Readonly<Record<string, string>>): Effect.Effect<void> =>
  FiberRef.update(HttpApp.currentPreResponseHandlers, (current) => {
    if (Option.isNone(current)) return Option.some(headersHandler(headers))
    const previous = current.value
    if (isHeadersHandler(previous)) return Option.some(headersHandler({ ...previous.headers, ...headers }))
    const next = headersHandler(headers)
    return Option.some((request, response) => Effect.flatMap(previous(request, response), (response) => next(request, response)))
  })

/**
 * JSON already written (a stored answer replayed byte for byte, a read's record): the library's
 * raw body, which neither server encodes again.
 */
export const jsonText = (body: string, options?: { readonly status?: number; readonly headers?: Readonly<Record<string, string>> }) =>
  HttpServerResponse.raw(body, { ...options, contentType: "application/json" })

/** A strong validator of a response body (RFC 9110 §8.8.3): its SHA-256, quoted. */
export const etagOf = (body: string): string => `"${Bun.SHA256.hash(body, "base64url").slice(0, 27)}"`

/**
 * Whether `If-None-Match` names `etag` (weak comparison, as RFC 9110 §13.1.2 has it for this
 * header), or is `*`.
 */
export const notModified = (ifNoneMatch: string | null | undefined, etag: string): boolean => {
  if (ifNoneMatch === null || ifNoneMatch === undefined) return false
  for (const tag of ifNoneMatch.split(",")) {
    const candidate = tag.trim()
    if (candidate === "*" || candidate === etag || candidate === `W/${etag}`) return true
  }
  return false
}
