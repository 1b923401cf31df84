import { Context, Effect, Layer } from "effect"
import { ApiKeys, unauthorized } from "../ApiKeys.ts"
import type { ApiKeyIdentity } from "../Domain/ApiKey.ts"
import { RateLimited, type Unauthorized } from "../Domain/Errors.ts"
import type { Exchange } from "../Edge/Exchange.ts"
import { RateLimit } from "../RateLimit.ts"

/** The scheme is case-insensitive (RFC 9110); anything but exactly one token is no key at all. */
const bearerToken = (header: string | null): string | undefined =>
  header === null ? undefined : /^bearer +([^\s,]+) *$/i.exec(header)?.[1]

/**
 * The first two checks of every secured endpoint, from the request's headers alone: the bearer
 * key (401 with `WWW-Authenticate: Bearer`), then its rate limit (429 with `Retry-After`). Every
 * response of an authenticated request carries the `RateLimit` headers, an error included.
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
          const token = bearerToken(exchange.request.headers.get("authorization"))
          const identity = token === undefined ? unauthorized : keys.authenticate(token)
          return Effect.matchEffect(identity, {
            onFailure: (error) => {
              exchange.headers["www-authenticate"] = "Bearer"
              return Effect.fail(error)
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
