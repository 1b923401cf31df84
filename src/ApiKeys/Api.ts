import * as HttpApiMiddleware from "@effect/platform/HttpApiMiddleware"
import * as HttpApiSecurity from "@effect/platform/HttpApiSecurity"
import * as OpenApi from "@effect/platform/OpenApi"
import { Context, Schema } from "effect"
import type { ApiKeyIdentity, Scope } from "../Domain/ApiKey.ts"
import { Envelope, Forbidden, RateLimited, Unauthorized } from "../Domain/Errors.ts"

/** The key a request authenticated with: what the key's middleware gives the handler. */
export class CurrentKey extends Context.Tag("ApiKeys/CurrentKey")<CurrentKey, ApiKeyIdentity>() {}

/**
 * The `Authorization` header, whole: the keys' middleware reads the Bearer scheme and its token from
 * it in one parse (`ApiKeys/Http.ts`). The library's own bearer scheme would hand over the header
 * past its first seven characters whatever its scheme, and the scheme would be read a second time
 * from the request. The document names it for what it is, a Bearer token (`ApiDocument.ts`).
 */
const bearer = HttpApiSecurity.apiKey({ key: "Authorization", in: "header" }).pipe(
  HttpApiSecurity.annotate(OpenApi.Description, "An API key: `Authorization: Bearer cak_<keyId>_<secret>`.")
)

/**
 * "This endpoint needs an API key, any valid one": its bearer scheme and its two refusals (401,
 * then 429 past the key's rate limit) go into the OpenAPI document and the typed client; every
 * answer from then on carries the key's `RateLimit` headers (docs/integrators.md, Rate limiting).
 */
export class ApiKeyAuth extends HttpApiMiddleware.Tag<ApiKeyAuth>()("ApiKeys/ApiKeyAuth", {
  failure: Schema.Union(Envelope(Unauthorized), Envelope(RateLimited)),
  provides: CurrentKey,
  security: { bearer }
}) {}

/** A key's checks with a scope: 401, then 429, then 403 when the key lacks the scope (docs/integrators.md, Errors). */
export const withScope = {
  failure: Schema.Union(Envelope(Unauthorized), Envelope(RateLimited), Envelope(Forbidden)),
  provides: CurrentKey,
  security: { bearer }
} as const

/**
 * "This endpoint needs a key with the scope ...": a middleware of its own per scope, which an
 * endpoint declares once (its scope is which of these it declares). Each is a tag with its scope
 * as a static and, for the type of the definition's middleware, as `scopedKey`. One
 * implementation serves them all (`keysMiddlewareOf` in `ApiKeys/Http.ts`, from the scopes the
 * definition declares), so a new scope is a new class like these beside the endpoint that needs
 * it, and nothing else here. (They are written out rather than made by a factory: the client's
 * declarations cannot name a class a function returns.)
 */
export class CampaignsReadKey extends HttpApiMiddleware.Tag<CampaignsReadKey>()("ApiKeys/CampaignsReadKey", withScope) {
  /** `campaigns:write` grants it too (docs/integrators.md, Authentication). */
  static readonly scope = "campaigns:read" satisfies Scope
  declare readonly scopedKey: typeof CampaignsReadKey.scope
}

/** "This endpoint needs a key with the scope `campaigns:write`". */
export class CampaignsWriteKey
  extends HttpApiMiddleware.Tag<CampaignsWriteKey>()("ApiKeys/CampaignsWriteKey", withScope)
{
  static readonly scope = "campaigns:write" satisfies Scope
  declare readonly scopedKey: typeof CampaignsWriteKey.scope
}

/** "This endpoint needs a key with the scope `analytics:read`". */
export class AnalyticsReadKey extends HttpApiMiddleware.Tag<AnalyticsReadKey>()("ApiKeys/AnalyticsReadKey", withScope) {
  static readonly scope = "analytics:read" satisfies Scope
  declare readonly scopedKey: typeof AnalyticsReadKey.scope
}

/** A middleware tag that checks a scope, with it. */
export type ScopedKeyTag = HttpApiMiddleware.TagClassAny & { readonly scope: Scope }

/** Whether a middleware tag is one that checks a scope. */
export const isScopedKey = (tag: HttpApiMiddleware.TagClassAny): tag is ScopedKeyTag =>
  typeof (tag as Partial<ScopedKeyTag>).scope === "string"

/** The scope an endpoint's middleware require: that of the one which checks a scope, if any. */
export const scopeOf = (middleware: Iterable<HttpApiMiddleware.TagClassAny>): Scope | undefined => {
  for (const tag of middleware) if (isScopedKey(tag)) return tag.scope
  return undefined
}
