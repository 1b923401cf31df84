import { HttpApiMiddleware, HttpApiSecurity, OpenApi } from "@effect/platform"
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
 * answer from then on carries the key's `RateLimit` headers (README, Rate limiting).
 */
export class ApiKeyAuth extends HttpApiMiddleware.Tag<ApiKeyAuth>()("ApiKeys/ApiKeyAuth", {
  failure: Schema.Union(Envelope(Unauthorized), Envelope(RateLimited)),
  provides: CurrentKey,
  security: { bearer }
}) {}

/** A key's checks with a scope: 401, then 429, then 403 when the key lacks the scope (README, Errors). */
const withScope = {
  failure: Schema.Union(Envelope(Unauthorized), Envelope(RateLimited), Envelope(Forbidden)),
  provides: CurrentKey,
  security: { bearer }
} as const

/**
 * "This endpoint needs a key with the scope `campaigns:read`" (which `campaigns:write` grants too):
 * an endpoint's scope is which of these it declares, once.
 */
export class CampaignsReadKey extends HttpApiMiddleware.Tag<CampaignsReadKey>()("ApiKeys/CampaignsReadKey", withScope) {
  static readonly scope: Scope = "campaigns:read"
}

/** "This endpoint needs a key with the scope `campaigns:write`". */
export class CampaignsWriteKey
  extends HttpApiMiddleware.Tag<CampaignsWriteKey>()("ApiKeys/CampaignsWriteKey", withScope)
{
  static readonly scope: Scope = "campaigns:write"
}

/** "This endpoint needs a key with the scope `analytics:read`". */
export class AnalyticsReadKey extends HttpApiMiddleware.Tag<AnalyticsReadKey>()("ApiKeys/AnalyticsReadKey", withScope) {
  static readonly scope: Scope = "analytics:read"
}

/** The middleware that check a scope, each with the scope it checks. */
export const scopedKeys = [CampaignsReadKey, CampaignsWriteKey, AnalyticsReadKey] as const

/** The scope an endpoint's middleware require: that of the one which checks a scope, if any. */
export const scopeOf = (middleware: Iterable<HttpApiMiddleware.TagClassAny>): Scope | undefined => {
  for (const tag of middleware) {
    const scoped = scopedKeys.find((key) => key.key === tag.key)
    if (scoped !== undefined) return scoped.scope
  }
  return undefined
}
