import * as Headers from "@effect/platform/Headers"
import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Effect, type Fiber, FiberRef, Option } from "effect"

/**
 * A pre-response handler that only sets headers, and says which: HttpApiBuilder runs it as any
 * other, and the edge, which sees the headers, sets them without making a response object for it.
 */
export interface HeadersHandler extends HttpApp.PreResponseHandler {
  readonly headers: Readonly<Record<string, string>>
}

const headersHandler = (headers: Record<string, string>, collecting = false): HeadersHandler => {
  const handler =
    ((_: unknown, response: HttpServerResponse.HttpServerResponse) =>
      Effect.succeed(HttpServerResponse.setHeaders(response, headers))) as unknown as HeadersHandler & {
        headers: typeof headers
        collecting: boolean
      }
  handler.headers = headers
  handler.collecting = collecting
  return handler
}

export const isHeadersHandler = (handler: HttpApp.PreResponseHandler): handler is HeadersHandler => "headers" in handler

/** A headers handler a server made for one request's fiber alone, which takes more headers in place. */
const isCollecting = (handler: HeadersHandler): boolean =>
  (handler as HeadersHandler & { collecting: boolean }).collecting

/**
 * The pre-response handler a server may start a request's fiber with, made for that request alone:
 * what `addResponseHeaders` adds goes into it, with no new handler written into the fiber's state
 * each time (the edge's, whose request fibers are its own). The library's own way, a handler
 * appended per header set (`HttpApp.appendPreResponseHandler`) with the key's note set as a fiber
 * ref, allocated 26.3 KB per whoami against 21.3 and took 21.3 against 17.2 µs in process
 * (bench/BENCHMARKS.md, One reading of each thing).
 */
export const collectResponseHeaders = (): HeadersHandler => headersHandler({}, true)

/** What the fiber's pre-response handler becomes once `headers` are added to it. */
const withHeaders = (
  current: Option.Option<HttpApp.PreResponseHandler>,
  headers: Readonly<Record<string, string>>
): Option.Option<HttpApp.PreResponseHandler> => {
  if (Option.isNone(current)) return Option.some(headersHandler(headers))
  const previous = current.value
  if (isHeadersHandler(previous)) return Option.some(headersHandler({ ...previous.headers, ...headers }))
  const next = headersHandler(headers)
  return Option.some((request, response) =>
    Effect.flatMap(previous(request, response), (response) => next(request, response))
  )
}

/**
 * `addResponseHeaders` on the fiber that serves the request: in place into the collector the
 * server made for this request, or else what to run to set the fiber's handler.
 */
export const addResponseHeadersOn = (
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  headers: Readonly<Record<string, string>>
): Effect.Effect<void> | undefined => {
  const current = fiber.getFiberRef(HttpApp.currentPreResponseHandlers)
  if (Option.isSome(current) && isHeadersHandler(current.value) && isCollecting(current.value)) {
    Object.assign(current.value.headers, headers)
    return undefined
  }
  return FiberRef.set(HttpApp.currentPreResponseHandlers, withHeaders(current, headers))
}

/**
 * Headers that whatever answer the request ends in carries, an error's included: the library's
 * pre-response handlers (`HttpApp.appendPreResponseHandler`), which HttpApiBuilder's server and
 * the edge both apply. Two that only set headers are one, later names over earlier ones, as
 * setting them one after the other would leave them.
 */
export const addResponseHeaders = (headers: Readonly<Record<string, string>>): Effect.Effect<void> =>
  Effect.withFiberRuntime((fiber) => addResponseHeadersOn(fiber, headers) ?? Effect.void)

/** What the fiber's pre-response handler becomes once `names` are taken off what it sets. */
const withoutHeaders = (
  handler: HttpApp.PreResponseHandler,
  names: ReadonlyArray<string>
): HttpApp.PreResponseHandler => {
  if (isHeadersHandler(handler)) {
    const headers = { ...handler.headers }
    for (const name of names) delete headers[name]
    return headersHandler(headers)
  }
  return (request, response) =>
    Effect.map(handler(request, response), (response) =>
      HttpServerResponse.setBody(
        HttpServerResponse.empty({
          status: response.status,
          statusText: response.statusText,
          headers: names.reduce((headers, name) => Headers.remove(headers, name), response.headers),
          cookies: response.cookies
        }),
        response.body
      ))
}

/**
 * Takes headers an earlier step added (`addResponseHeaders`) back off whatever answer the request
 * ends in, on both servers: in place from the collector the server made for this request, or else
 * by what the fiber's pre-response handler becomes without them. Names in lowercase, as they are added.
 */
export const removeResponseHeaders = (names: ReadonlyArray<string>): Effect.Effect<void> =>
  Effect.withFiberRuntime((fiber) => {
    const current = fiber.getFiberRef(HttpApp.currentPreResponseHandlers)
    if (Option.isNone(current)) return Effect.void
    if (isHeadersHandler(current.value) && isCollecting(current.value)) {
      const headers = current.value.headers as Record<string, string>
      for (const name of names) delete headers[name]
      return Effect.void
    }
    return FiberRef.set(HttpApp.currentPreResponseHandlers, Option.some(withoutHeaders(current.value, names)))
  })

/**
 * JSON already written (a stored answer replayed byte for byte, a read's record): the library's
 * raw body, which neither server encodes again.
 */
export const jsonText = (
  body: string,
  options?: { readonly status?: number; readonly headers?: Readonly<Record<string, string>> }
) => HttpServerResponse.raw(body, { ...options, contentType: "application/json" })

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
