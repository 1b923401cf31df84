import type * as HttpApi from "@effect/platform/HttpApi"
import { Context, Effect, Layer, Option, Redacted } from "effect"
import { ApiKeys, malformedKey } from "../ApiKeys.ts"
import { declaredEndpoints, middlewareOf } from "../Declaration.ts"
import { type ApiKeyIdentity, type Authenticated, grants, type RateLimitPolicy, type Scope } from "../Domain/ApiKey.ts"
import { Forbidden, KeyRefused, RateLimited, Unauthorized } from "../Domain/Errors.ts"
import type { MiddlewareOf } from "../Handlers.ts"
import { type KeyNote, noteKey, noteKeyOn } from "../Logging.ts"
import { RateLimit } from "../RateLimit.ts"
import { addResponseHeaders, addResponseHeadersOn } from "../Responses.ts"
import { ApiKeyAuth, isScopedKey } from "./Api.ts"
import { KeyUsage } from "./KeyUsage.ts"

/** The scheme is case-insensitive (RFC 9110); anything but exactly one token is refused. */
const bearerToken = /^bearer +([^\s,]+) *$/i
const bearerCredentials = /^bearer\s+\S/i
const missingKey = Effect.fail(new KeyRefused({ reason: "missing", keyId: null, brandId: null }))

/**
 * Why a header gave no token: Bearer credentials that are not one token were meant as a key
 * (`malformed`); no header, another scheme or a bare `Bearer` is no key at all (`missing`).
 */
const refusalWithoutToken = (header: string) => bearerCredentials.test(header) ? malformedKey : missingKey

/** Every refusal, whatever its reason, is this one answer: a 401 never tells whether a key id exists. */
const unauthorized = Effect.zipRight(
  addResponseHeaders({ "www-authenticate": "Bearer" }),
  Effect.fail(new Unauthorized({ message: "The API key is missing or invalid." }))
)

const forbidden = (scope: Scope) =>
  Effect.zipRight(
    addResponseHeaders({ "www-authenticate": `Bearer error="insufficient_scope", scope="${scope}"` }),
    Effect.fail(new Forbidden({ message: `This API key lacks the scope "${scope}" that this operation requires.` }))
  )

/** A limit as its `RateLimit-Policy` header and its 429's sentence tell it. */
interface LimitText {
  readonly policy: string
  readonly exceeded: string
}

const limitText = (limit: RateLimitPolicy, whose: string): LimitText => ({
  policy: `"default";q=${limit.max};w=${limit.windowSeconds}`,
  exceeded: `Rate limit exceeded: ${limit.max} requests per ${limit.windowSeconds} seconds ${whose}.`
})

/**
 * The keys' middleware (docs/integrators.md, Errors): the bearer key (401 with `WWW-Authenticate: Bearer`, its
 * reason noted for the log only), then its rate limit, its own or the server's (429 with
 * `Retry-After`), then, for the middleware that check one, its scope (403). Every answer from the
 * rate limit on carries the `RateLimit` headers, an error's included, and `Api-Key-Expires` when
 * the secret sent has an end. The key's use is noted for its last-used time.
 *
 * The security scheme hands over the `Authorization` header whole (`Api.ts`): whether it is Bearer
 * credentials of one token at all, and why not, is read from it with the token, in one parse.
 */
const keyChecks = Effect.gen(function*() {
  const keys = yield* ApiKeys
  const usage = yield* KeyUsage
  const rateLimit = yield* RateLimit
  const serverWide = limitText(rateLimit.policy, "per API key")
  // ApiKeys keeps one object per distinct limit: each is told once.
  const ownText = new WeakMap<RateLimitPolicy, LimitText>()
  const textOf = (limit: RateLimitPolicy) => {
    let text = ownText.get(limit)
    if (text === undefined) ownText.set(limit, text = limitText(limit, "for this API key"))
    return text
  }
  // An end as an IMF-fixdate (RFC 9110), formatted once per distinct end.
  let lastEnd = { at: Number.NaN, header: "" }
  const endHeader = (at: number) => {
    if (lastEnd.at !== at) lastEnd = { at, header: new Date(at).toUTCString() }
    return lastEnd.header
  }

  // Each key's note, made once per key as ApiKeys keeps it.
  const notes = new WeakMap<ApiKeyIdentity, KeyNote>()
  const noteOf = (identity: ApiKeyIdentity) => {
    let note = notes.get(identity)
    if (note === undefined) {
      notes.set(identity, note = { keyId: identity.keyId, brandId: identity.brandId, reason: null })
    }
    return note
  }

  const charge = ({ endsAt, identity, rateLimit: own, secretSha256 }: Authenticated) => {
    usage.record(identity.keyId, secretSha256)
    const limit = own === null ? serverWide : textOf(own)
    return Effect.flatMap(rateLimit.consume(identity.keyId, own), (decision) =>
      // The key noted and the headers added on the request's fiber in one step: the first
      // middleware of every request runs this.
      Effect.withFiberRuntime<ApiKeyIdentity, RateLimited>((fiber) => {
        const headers: Record<string, string> = {
          "ratelimit-policy": limit.policy,
          "ratelimit": `"default";r=${decision.remaining};t=${decision.retryAfterSeconds}`
        }
        if (endsAt !== null) headers["api-key-expires"] = endHeader(endsAt)
        if (!decision.allowed) headers["retry-after"] = String(decision.retryAfterSeconds)
        const noted = noteKeyOn(fiber, noteOf(identity))
        const added = addResponseHeadersOn(fiber, headers)
        const answer = decision.allowed
          ? Effect.succeed(identity)
          : Effect.fail(
            new RateLimited({ message: `${limit.exceeded} Retry after ${decision.retryAfterSeconds} seconds.` })
          )
        // Both were done in place on a server's request fiber; elsewhere they are set first.
        return noted === undefined && added === undefined
          ? answer
          : Effect.zipRight(Effect.zipRight(noted ?? Effect.void, added ?? Effect.void), answer)
      }))
  }
  const refuse = (refusal: KeyRefused) => Effect.zipRight(noteKey(refusal), unauthorized)

  /** The whole `Authorization` header (empty without one), read once: its scheme, then its token. */
  const authenticate = (authorization: Redacted.Redacted<string>) => {
    const header = Redacted.value(authorization)
    const token = bearerToken.exec(header)?.[1]
    const authenticated = token === undefined ? refusalWithoutToken(header) : keys.authenticate(token)
    return Effect.matchEffect(authenticated, { onFailure: refuse, onSuccess: charge })
  }

  const withScope = (scope: Scope) => {
    const refused = forbidden(scope)
    return (token: Redacted.Redacted<string>) =>
      Effect.flatMap(
        authenticate(token),
        (identity): Effect.Effect<ApiKeyIdentity, Forbidden> =>
          grants(identity.scopes, scope) ? Effect.succeed(identity) : refused
      )
  }
  return { authenticate, withScope }
})

/** The middleware of a definition that check a scope (their `scopedKey`), by their identifiers. */
type ScopedKeysOf<Api> = Extract<MiddlewareOf<Api>, { readonly scopedKey: Scope }>

/**
 * The implementation of each of the keys' middleware a definition declares: any valid key
 * (`ApiKeyAuth`), or one with the scope each scoped key of its endpoints checks.
 */
export const keysMiddlewareOf = <Api extends HttpApi.HttpApi.Any>(
  api: Api
): Layer.Layer<ApiKeyAuth | ScopedKeysOf<Api>, never, ApiKeys | KeyUsage | RateLimit> =>
  Layer.effectContext(
    Effect.map(keyChecks, ({ authenticate, withScope }) => {
      let context = Context.make(ApiKeyAuth, { bearer: authenticate }) as Context.Context<unknown>
      for (const declared of declaredEndpoints(api)) {
        for (const tag of middlewareOf(declared)) {
          if (isScopedKey(tag) && Option.isNone(Context.getOption(context, tag as never))) {
            context = Context.add(context, tag as never, { bearer: withScope(tag.scope) } as never)
          }
        }
      }
      return context as Context.Context<ApiKeyAuth | ScopedKeysOf<Api>>
    })
  )
