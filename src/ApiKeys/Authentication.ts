import { Context, Effect, Layer } from "effect"
import { ApiKeys, malformedKey } from "../ApiKeys.ts"
import type { ApiKeyIdentity } from "../Domain/ApiKey.ts"
import { KeyRefused, RateLimited, Unauthorized } from "../Domain/Errors.ts"
import type { Exchange } from "../Edge/Exchange.ts"
import { RateLimit } from "../RateLimit.ts"

/** The scheme is case-insensitive (RFC 9110); anything but exactly one token is refused. */
const bearerToken = (header: string | null): string | undefined =>
  header === null ? undefined : /^bearer +([^\s,]+) *$/i.exec(header)?.[1]

const bearerCredentials = /^bearer\s+\S/i
const missingKey = Effect.fail(new KeyRefused({ reason: "missing", keyId: null, brandId: null }))

/**
 * Why a header gave no token: Bearer credentials that are not one token were meant as a key
 * (`malformed`); no header, another scheme or a bare `Bearer` is no key at all (`missing`).
 */
const refusalWithoutToken = (header: string | null) =>
  header !== null && bearerCredentials.test(header) ? malformedKey : missingKey

/** Every refusal, whatever its reason, is this one answer: a 401 never tells whether a key id exists. */
const unauthorized = new Unauthorized({ message: "The API key is missing or invalid." })

/**
 * The first two checks of every secured endpoint, from the request's headers alone: the bearer
 * key (401 with `WWW-Authenticate: Bearer`, the reason noted for the access log only), then its
 * rate limit (429 with `Retry-After`). Every response of an authenticated request carries the
 * `RateLimit` headers, an error included.
 */
export class Authentication extends Context.Tag("ApiKeys/Authentication")<Authentication, {
  readonly authenticate: (exchange: Exchange) => Effect.Effect<ApiKeyIdentity, Unauthorized | RateLimited>
}>() {
  static readonly Live = Layer.effect(
    Authentication,
    Effect.gen(function*() {
      const keys = yield* ApiKeys
      const rateLimit = yield* RateLimit
      const { max, windowSeconds } = rateLimit.policy
      const policy = `"default";q=${max};w=${windowSeconds}`
      const charge = (exchange: Exchange, identity: ApiKeyIdentity) =>
        Effect.flatMap(rateLimit.consume(identity.keyId), (decision) => {
          exchange.headers["ratelimit-policy"] = policy
          exchange.headers["ratelimit"] = `"default";r=${decision.remaining};t=${decision.retryAfterSeconds}`
          if (decision.allowed) return Effect.succeed(identity)
          exchange.headers["retry-after"] = String(decision.retryAfterSeconds)
          return Effect.fail(
            new RateLimited({
              message: `Rate limit exceeded: ${max} requests per ${windowSeconds} seconds per API key. Retry after ${decision.retryAfterSeconds} seconds.`
            })
          )
        })
      return {
        authenticate: (exchange) => {
          const header = exchange.request.headers.get("authorization")
          const token = bearerToken(header)
          const identity = token === undefined ? refusalWithoutToken(header) : keys.authenticate(token)
          return Effect.matchEffect(identity, {
            onFailure: (refusal) => {
              exchange.refusal = refusal
              exchange.headers["www-authenticate"] = "Bearer"
              return unauthorized
            },
            onSuccess: (identity) => {
              exchange.identity = identity
              return charge(exchange, identity)
            }
          })
        }
      }
    })
  )
}
