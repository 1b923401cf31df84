import { HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Clock, Effect, HashMap, Logger } from "effect"
import type { ApiKeyIdentity } from "./Domain/ApiKey.ts"
import { whenTracing } from "./Span.ts"

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
 * One access-log line's fields, logged as the message and lifted into annotations by the
 * logger (`withAccessLogFields`). `Effect.annotateLogs` would copy the fiber's locals twice
 * per request, whether or not the line is written at the configured level. With tracing on
 * the line is annotated the usual way, for the span's own log events.
 */
class AccessLogEntry {
  constructor(readonly fields: Readonly<Record<string, string | number | null>>) {}
}

/** Writes an access-log entry as the message "request" with its fields as annotations. */
export const withAccessLogFields = <Output>(logger: Logger.Logger<unknown, Output>) =>
  Logger.mapInputOptions(logger, (options) => {
    const [entry] = options.message as ReadonlyArray<unknown>
    if (!(entry instanceof AccessLogEntry)) return options
    let annotations = options.annotations
    for (const [key, value] of Object.entries(entry.fields)) annotations = HashMap.set(annotations, key, value)
    return { ...options, message: ["request"], annotations }
  })

// Spans record log lines as events, named by the message and with the annotations as attributes.
const logAccess = (fields: AccessLogEntry["fields"]) =>
  whenTracing(
    () => Effect.logInfo("request").pipe(Effect.annotateLogs(fields)),
    Effect.logInfo(new AccessLogEntry(fields))
  )

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
        Effect.flatMap(Clock.currentTimeNanos, (now) => {
          const identity = requestIdentity.get(request)
          return logAccess({
            method: request.method,
            route: route(request.url.split("?")[0]!),
            status: response.status,
            durationMs: Math.round(Number(now - started) / 1e3) / 1e3,
            keyId: identity?.keyId ?? null,
            brandId: identity?.brandId ?? null
          })
        })
      ),
      Effect.map((response) => HttpServerResponse.setHeader(response, "x-request-id", requestId)),
      Effect.annotateLogs("requestId", requestId)
    )
  })
