import { HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Clock, Effect } from "effect"
import type { ApiKeyIdentity } from "./Domain/ApiKey.ts"

/**
 * The key each request authenticated with, noted by the authentication middleware for the
 * access log. Keyed by the request object: a FiberRef would copy every fiber-local per request.
 */
export const requestIdentity = new WeakMap<HttpServerRequest.HttpServerRequest, ApiKeyIdentity>()

/** A caller's own request id is kept when it is sane: short, printable, no spaces. */
const saneRequestId = /^[A-Za-z0-9._:@+=\/-]{1,128}$/

export const isSaneRequestId = (header: string | null | undefined): header is string =>
  typeof header === "string" && saneRequestId.test(header)


/**
 * Gives every request an `X-Request-Id` that all its log lines carry, and writes one
 * access-log line per request. The key's id and brand are logged, never the key.
 */
export const withRequestLog = <E, R>(
  app: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>,
  route: (path: string) => string,
  newRequestId: Effect.Effect<string>
) =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const incoming = request.headers["x-request-id"]
    const requestId = isSaneRequestId(incoming) ? incoming : yield* newRequestId
    const started = yield* Clock.currentTimeNanos
    return yield* app.pipe(
      Effect.tap((response) =>
        Effect.gen(function*() {
          const identity = requestIdentity.get(request)
          const path = request.url.split("?")[0]!
          yield* Effect.logInfo("request").pipe(Effect.annotateLogs({
            method: request.method,
            route: route(path),
            status: response.status,
            durationMs: Math.round(Number((yield* Clock.currentTimeNanos) - started) / 1e3) / 1e3,
            keyId: identity?.keyId ?? null,
            brandId: identity?.brandId ?? null
          }))
        })
      ),
      Effect.map((response) => HttpServerResponse.setHeader(response, "x-request-id", requestId)),
      Effect.annotateLogs("requestId", requestId)
    )
  })
