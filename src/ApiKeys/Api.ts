import { HttpApiMiddleware, HttpApiSecurity, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { Envelope, RateLimited, Unauthorized } from "../Domain/Errors.ts"

/**
 * The definition's word for "this endpoint needs an API key": its security scheme and its two
 * refusals (401, then 429) go into the OpenAPI document and the typed client. The check itself
 * is `Authentication` (`ApiKeys/Authentication.ts`), the first step of every secured handler.
 */
export class ApiKeyAuth extends HttpApiMiddleware.Tag<ApiKeyAuth>()("ApiKeys/ApiKeyAuth", {
  failure: Schema.Union(Envelope(Unauthorized), Envelope(RateLimited)),
  security: {
    bearer: HttpApiSecurity.bearer.pipe(
      HttpApiSecurity.annotate(OpenApi.Description, "An API key: `Authorization: Bearer cak_<keyId>_<secret>`.")
    )
  }
}) {}
