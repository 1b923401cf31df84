import { HttpApiMiddleware, HttpApiSecurity, OpenApi } from "@effect/platform"
import { Context, Schema } from "effect"
import type { ApiKeyIdentity } from "../Domain/ApiKey.ts"
import {
  Envelope,
  Forbidden,
  IdempotencyKeyRequired,
  MalformedJson,
  PayloadTooLarge,
  RateLimited,
  Unauthorized,
  UnsupportedMediaType,
  ValidationError
} from "../Domain/Errors.ts"
import type { IdempotencyKey } from "../Domain/IdempotencyKey.ts"

export class CurrentApiKey extends Context.Tag("Middleware/CurrentApiKey")<CurrentApiKey, ApiKeyIdentity>() {}

export class RequestIdempotencyKey
  extends Context.Tag("Middleware/RequestIdempotencyKey")<RequestIdempotencyKey, IdempotencyKey>()
{}

/** Resolves the bearer key (401), then charges its rate limit (429). */
export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("Middleware/Authentication", {
  provides: CurrentApiKey,
  failure: Schema.Union(Envelope(Unauthorized), Envelope(RateLimited)),
  security: {
    bearer: HttpApiSecurity.bearer.pipe(
      HttpApiSecurity.annotate(OpenApi.Description, "An API key: `Authorization: Bearer cak_<keyId>_<secret>`.")
    )
  }
}) {}

/** 403 unless the key carries `campaigns:write`. */
export class RequireCampaignsWrite extends HttpApiMiddleware.Tag<RequireCampaignsWrite>()("Middleware/RequireCampaignsWrite", {
  failure: Envelope(Forbidden)
}) {}

/** 400 unless an `Idempotency-Key` header of 1 to 255 visible ASCII characters is present. */
export class RequireIdempotencyKey extends HttpApiMiddleware.Tag<RequireIdempotencyKey>()("Middleware/RequireIdempotencyKey", {
  provides: RequestIdempotencyKey,
  failure: Schema.Union(Envelope(IdempotencyKeyRequired), Envelope(ValidationError))
}) {}

/** 415, 413, then 400 for a body that is not JSON, before the payload schema sees it. */
export class JsonBody extends HttpApiMiddleware.Tag<JsonBody>()("Middleware/JsonBody", {
  failure: Schema.Union(Envelope(UnsupportedMediaType), Envelope(PayloadTooLarge), Envelope(MalformedJson))
}) {}
