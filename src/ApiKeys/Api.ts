import { HttpApiMiddleware, HttpApiSecurity, OpenApi } from "@effect/platform"
import { Context, Schema } from "effect"
import type { ApiKeyIdentity, Scope } from "../Domain/ApiKey.ts"
import { Envelope, Forbidden, RateLimited, Unauthorized } from "../Domain/Errors.ts"

/** The key a request authenticated with: what `ApiKeyAuth` gives the steps after it and the handler. */
export class CurrentKey extends Context.Tag("ApiKeys/CurrentKey")<CurrentKey, ApiKeyIdentity>() {}

/**
 * The definition's word for "this endpoint needs an API key": its security scheme and its two
 * refusals (401, then 429) go into the OpenAPI document and the typed client, and the edge runs
 * its step (`ApiKeys/Http.ts`) where the endpoint declares it.
 */
export class ApiKeyAuth extends HttpApiMiddleware.Tag<ApiKeyAuth>()("ApiKeys/ApiKeyAuth", {
  failure: Schema.Union(Envelope(Unauthorized), Envelope(RateLimited)),
  provides: CurrentKey,
  security: {
    bearer: HttpApiSecurity.bearer.pipe(
      HttpApiSecurity.annotate(OpenApi.Description, "An API key: `Authorization: Bearer cak_<keyId>_<secret>`.")
    )
  }
}) {}

/** The scope an endpoint requires, an annotation on its definition: `.annotate(RequiredScope, "campaigns:write")`. */
export class RequiredScope extends Context.Tag("ApiKeys/RequiredScope")<RequiredScope, Scope>() {}

/**
 * "The key must carry the endpoint's `RequiredScope`": 403 with the scope named in
 * `WWW-Authenticate`. Declared after `ApiKeyAuth`, whose key it reads.
 */
export class RequireScope extends HttpApiMiddleware.Tag<RequireScope>()("ApiKeys/RequireScope", {
  failure: Envelope(Forbidden)
}) {}
