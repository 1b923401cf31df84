import { Context, Effect } from "effect"
import { ApiKeys, malformedKey } from "../ApiKeys.ts"
import { type ApiKeyIdentity, grants } from "../Domain/ApiKey.ts"
import { Forbidden, KeyRefused, RateLimited, Unauthorized } from "../Domain/Errors.ts"
import type { Exchange, Passed, Step, Steps } from "../Edge/Exchange.ts"
import { Refused } from "../Edge/Exchange.ts"
import { RateLimit } from "../RateLimit.ts"
import { ApiKeyAuth, CurrentKey, RequiredScope, RequireScope } from "./Api.ts"

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
const challenge = { "www-authenticate": "Bearer" }

const forbidden = (scope: string) =>
  new Refused(
    new Forbidden({ message: `This API key lacks the scope "${scope}" that this operation requires.` }),
    { "www-authenticate": `Bearer error="insufficient_scope", scope="${scope}"` }
  )

/**
 * The steps of the keys' middleware (README, Errors): `ApiKeyAuth`, the bearer key (401 with
 * `WWW-Authenticate: Bearer`, the reason noted for the access line only) then its rate limit (429
 * with `Retry-After`), from the request's headers alone; every answer from then on carries the
 * `RateLimit` headers, an error's included. `RequireScope`, the endpoint's `RequiredScope` (403).
 */
export const ApiKeysSteps = Effect.gen(function*() {
  const keys = yield* ApiKeys
  const rateLimit = yield* RateLimit
  const { max, windowSeconds } = rateLimit.policy
  const policy = `"default";q=${max};w=${windowSeconds}`

  const charge = (identity: ApiKeyIdentity): Effect.Effect<Passed, Refused> => {
    const key = { keyId: identity.keyId, brandId: identity.brandId, reason: null }
    return Effect.flatMap(rateLimit.consume(identity.keyId), (decision) => {
      const headers = {
        "ratelimit-policy": policy,
        "ratelimit": `"default";r=${decision.remaining};t=${decision.retryAfterSeconds}`
      }
      if (decision.allowed) return Effect.succeed({ provides: Context.make(CurrentKey, identity), headers, key })
      return Effect.fail(
        new Refused(
          new RateLimited({
            message: `Rate limit exceeded: ${max} requests per ${windowSeconds} seconds per API key. Retry after ${decision.retryAfterSeconds} seconds.`
          }),
          { ...headers, "retry-after": String(decision.retryAfterSeconds) },
          key
        )
      )
    })
  }
  const refuse = (refusal: KeyRefused) =>
    Effect.fail(new Refused(unauthorized, challenge, { keyId: refusal.keyId, brandId: refusal.brandId, reason: refusal.reason }))

  const authenticate: Step = (exchange: Exchange) => {
    const header = exchange.request.headers.get("authorization")
    const token = bearerToken(header)
    const identity = token === undefined ? refusalWithoutToken(header) : keys.authenticate(token)
    return Effect.matchEffect(identity, { onFailure: refuse, onSuccess: charge })
  }

  const steps: Steps = {
    [ApiKeyAuth.key]: () => authenticate,
    [RequireScope.key]: (endpoint) => {
      const scope = Context.getOrElse(endpoint.annotations, RequiredScope, () => {
        throw new Error(`${endpoint.name} declares RequireScope without a RequiredScope annotation`)
      })
      const refused = Effect.fail(forbidden(scope))
      const passed = Effect.succeed<Passed>({})
      return (_, given) => grants(Context.get(given as Context.Context<CurrentKey>, CurrentKey).scopes, scope) ? passed : refused
    }
  }
  return steps
})
