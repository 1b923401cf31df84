import { Context, Effect } from "effect"
import { ApiKeys, malformedKey } from "../ApiKeys.ts"
import { type Authenticated, grants, type RateLimitPolicy } from "../Domain/ApiKey.ts"
import { Forbidden, KeyRefused, RateLimited, Unauthorized } from "../Domain/Errors.ts"
import type { Exchange, Passed, Step, Steps } from "../Edge/Exchange.ts"
import { Refused } from "../Edge/Exchange.ts"
import { RateLimit } from "../RateLimit.ts"
import { ApiKeyAuth, CurrentKey, RequiredScope, RequireScope } from "./Api.ts"
import { KeyUsage } from "./KeyUsage.ts"

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

/** A limit as its `RateLimit-Policy` header and its 429's sentence tell it. */
interface Told {
  readonly policy: string
  readonly exceeded: string
}

const told = (limit: RateLimitPolicy, whose: string): Told => ({
  policy: `"default";q=${limit.max};w=${limit.windowSeconds}`,
  exceeded: `Rate limit exceeded: ${limit.max} requests per ${limit.windowSeconds} seconds ${whose}.`
})

/**
 * The steps of the keys' middleware (README, Errors): `ApiKeyAuth`, the bearer key (401 with
 * `WWW-Authenticate: Bearer`, the reason noted for the access line only) then its rate limit, its
 * own or the server's (429 with `Retry-After`), from the request's headers alone; every answer
 * from then on carries the `RateLimit` headers, an error's included, and `Api-Key-Expires` when
 * the secret sent has an end. The key's use is noted for its last-used time.
 * `RequireScope`, the endpoint's `RequiredScope` (403).
 */
export const ApiKeysSteps = Effect.gen(function*() {
  const keys = yield* ApiKeys
  const usage = yield* KeyUsage
  const rateLimit = yield* RateLimit
  const serverWide = told(rateLimit.policy, "per API key")
  // ApiKeys keeps one object per distinct limit: each is told once.
  const ownTold = new WeakMap<RateLimitPolicy, Told>()
  const tellOwn = (limit: RateLimitPolicy) => {
    let said = ownTold.get(limit)
    if (said === undefined) ownTold.set(limit, said = told(limit, "for this API key"))
    return said
  }
  // An end as an IMF-fixdate (RFC 9110), formatted once per distinct end.
  let lastEnd = { at: Number.NaN, header: "" }
  const endHeader = (at: number) => {
    if (lastEnd.at !== at) lastEnd = { at, header: new Date(at).toUTCString() }
    return lastEnd.header
  }

  const charge = ({ endsAt, identity, rateLimit: own, secretSha256 }: Authenticated): Effect.Effect<Passed, Refused> => {
    usage.record(identity.keyId, secretSha256)
    const key = { keyId: identity.keyId, brandId: identity.brandId, reason: null }
    const limit = own === null ? serverWide : tellOwn(own)
    return Effect.flatMap(rateLimit.consume(identity.keyId, own), (decision) => {
      const headers: Record<string, string> = {
        "ratelimit-policy": limit.policy,
        "ratelimit": `"default";r=${decision.remaining};t=${decision.retryAfterSeconds}`
      }
      if (endsAt !== null) headers["api-key-expires"] = endHeader(endsAt)
      if (decision.allowed) return Effect.succeed({ provides: Context.make(CurrentKey, identity), headers, key })
      return Effect.fail(
        new Refused(
          new RateLimited({ message: `${limit.exceeded} Retry after ${decision.retryAfterSeconds} seconds.` }),
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
