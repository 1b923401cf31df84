import { HttpApiEndpoint, HttpApiGroup, HttpApiMiddleware, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { ApiKeyAuth } from "../ApiKeys/Api.ts"
import { ActivatePath, ActivateRequest, ActivateResponse } from "../Domain/Activation.ts"
import {
  Envelope,
  Forbidden,
  IdempotencyConflict,
  IdempotencyInProgress,
  IdempotencyKeyRequired,
  MalformedJson,
  PayloadTooLarge,
  UnsupportedMediaType,
  ValidationError
} from "../Domain/Errors.ts"
import { IdempotencyKeyHeader } from "../Domain/IdempotencyKey.ts"

/**
 * The definition's word for the checks of an activation after authentication, each with its
 * refusals for the OpenAPI document and the typed client. They run as the steps of the
 * handler (`Activations/Http.ts`), in the README's order of checks.
 */
export class RequireCampaignsWrite extends HttpApiMiddleware.Tag<RequireCampaignsWrite>()(
  "Activations/RequireCampaignsWrite",
  { failure: Envelope(Forbidden) }
) {}

export class RequireIdempotencyKey extends HttpApiMiddleware.Tag<RequireIdempotencyKey>()(
  "Activations/RequireIdempotencyKey",
  { failure: Schema.Union(Envelope(IdempotencyKeyRequired), Envelope(ValidationError)) }
) {}

export class JsonBody extends HttpApiMiddleware.Tag<JsonBody>()("Activations/JsonBody", {
  failure: Schema.Union(Envelope(UnsupportedMediaType), Envelope(PayloadTooLarge), Envelope(MalformedJson))
}) {}

const activate = HttpApiEndpoint.post("activate", "/creators/:creatorId/campaigns/:campaignId/activate")
  .setPath(ActivatePath)
  .setHeaders(Schema.Struct({ "idempotency-key": IdempotencyKeyHeader }))
  .setPayload(ActivateRequest)
  .addSuccess(ActivateResponse)
  .addError(Envelope(ValidationError))
  .addError(Envelope(IdempotencyConflict))
  .addError(Envelope(IdempotencyInProgress))
  .middleware(ApiKeyAuth)
  .middleware(RequireCampaignsWrite)
  .middleware(RequireIdempotencyKey)
  .middleware(JsonBody)
  .annotate(OpenApi.Summary, "Activate a campaign for a creator")
  .annotate(
    OpenApi.Description,
    "Creates an `ACTIVE` activation record. Requires the scope `campaigns:write` and an `Idempotency-Key`: a replay with the same body returns the original response with `Idempotent-Replayed: true`; the same key with another body is 409 `IDEMPOTENCY_CONFLICT`."
  )

export class ActivationsApi extends HttpApiGroup.make("activations")
  .add(activate)
  .annotate(OpenApi.Title, "Activations")
{}
