import { HttpApp, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect, Layer } from "effect"
import { ApiKeys, unauthorized } from "../ApiKeys.ts"
import {
  Forbidden,
  IdempotencyKeyRequired,
  MalformedJson,
  PayloadTooLarge,
  RateLimited,
  UnsupportedMediaType,
  ValidationError
} from "../Domain/Errors.ts"
import { parseIdempotencyKey } from "../Domain/IdempotencyKey.ts"
import { RateLimit } from "../RateLimit.ts"
import { maxBodyBytes, RequestBody } from "../RequestBody.ts"
import { requestIdentity } from "../RequestLog.ts"
import {
  Authentication,
  CurrentApiKey,
  JsonBody,
  RequireCampaignsWrite,
  RequireIdempotencyKey
} from "./Api.ts"


/** Headers for whatever response this request ends in, an error envelope included. */
export const setHeaders = (headers: Record<string, string>) =>
  HttpApp.appendPreResponseHandler((_request, response) =>
    Effect.succeed(HttpServerResponse.setHeaders(response, headers))
  )

/** The scheme is case-insensitive (RFC 9110); anything but exactly one token is no key at all. */
const bearerToken = (header: string | undefined): string | undefined =>
  header === undefined ? undefined : /^bearer +([^\s,]+) *$/i.exec(header)?.[1]

// HttpApiSecurity.bearer slices the header without checking its scheme and hands over "" when it
// is absent, so the header is read here instead:
// https://github.com/Effect-TS/effect/blob/%40effect/platform%400.94.5/packages/platform/src/HttpApiBuilder.ts#L1041
export const AuthenticationLive = Layer.effect(
  Authentication,
  Effect.gen(function*() {
    const keys = yield* ApiKeys
    const rateLimit = yield* RateLimit
    const policy = `"default";q=${rateLimit.policy.max};w=${rateLimit.policy.windowSeconds}`
    return {
      bearer: () =>
        Effect.gen(function*() {
          const request = yield* HttpServerRequest.HttpServerRequest
          const token = bearerToken(request.headers.authorization)
          const identity = yield* (token === undefined ? unauthorized : keys.authenticate(token)).pipe(
            Effect.tapError(() => setHeaders({ "www-authenticate": "Bearer" }))
          )
          requestIdentity.set(request, identity)
          const decision = yield* rateLimit.consume(identity.keyId)
          yield* setHeaders({
            "ratelimit-policy": policy,
            "ratelimit": `"default";r=${decision.remaining};t=${decision.retryAfterSeconds}`
          })
          if (!decision.allowed) {
            yield* setHeaders({ "retry-after": String(decision.retryAfterSeconds) })
            return yield* new RateLimited({
              message: `Rate limit exceeded: ${rateLimit.policy.max} requests per ${rateLimit.policy.windowSeconds} seconds per API key. Retry after ${decision.retryAfterSeconds} seconds.`
            })
          }
          return identity
        })
    }
  })
)

const requireScope = (scope: string) =>
  Effect.gen(function*() {
    // Authentication runs before this middleware and provides the key; its absence is a wiring bug.
    const identity = yield* Effect.orDie(Effect.serviceOptional(CurrentApiKey))
    if (identity.scopes.includes(scope as never)) return
    yield* setHeaders({ "www-authenticate": `Bearer error="insufficient_scope", scope="${scope}"` })
    return yield* new Forbidden({ message: `This API key lacks the scope "${scope}" that this operation requires.` })
  })

export const RequireCampaignsWriteLive = Layer.succeed(RequireCampaignsWrite, requireScope("campaigns:write"))

export const RequireIdempotencyKeyLive = Layer.succeed(
  RequireIdempotencyKey,
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const parsed = parseIdempotencyKey(request.headers["idempotency-key"])
    switch (parsed._tag) {
      case "Missing":
        return yield* new IdempotencyKeyRequired({
          message: "The Idempotency-Key header is required: send a unique value per activation, and the same value to retry it."
        })
      case "Invalid":
        return yield* new ValidationError({ message: parsed.message })
      case "Valid":
        return parsed.key
    }
  })
)

const mediaType = (contentType: string) => contentType.split(";")[0]!.trim().toLowerCase()

const tooLarge = new PayloadTooLarge({ message: `The request body must be at most ${maxBodyBytes} bytes.` })
const incomplete = new MalformedJson({ message: "The request body did not arrive completely in time." })
const notJson = new MalformedJson({ message: "The request body is not valid JSON." })
const utf8 = new TextDecoder("utf-8", { fatal: true })

export const JsonBodyLive = Layer.succeed(
  JsonBody,
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const contentType = request.headers["content-type"]
    if (contentType !== undefined && contentType.trim() !== "" && mediaType(contentType) !== "application/json") {
      return yield* new UnsupportedMediaType({ message: "Content-Type must be application/json." })
    }
    // The web server reads the body (bounded in size and time) before the app runs.
    const body = yield* Effect.orDie(Effect.serviceOptional(RequestBody))
    if (body._tag === "TooLarge") return yield* tooLarge
    if (body._tag === "Incomplete") return yield* incomplete
    try {
      JSON.parse(utf8.decode(body.bytes))
    } catch {
      return yield* notJson
    }
  })
)

export const MiddlewareLive = Layer.mergeAll(
  AuthenticationLive,
  RequireCampaignsWriteLive,
  RequireIdempotencyKeyLive,
  JsonBodyLive
)
