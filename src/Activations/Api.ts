import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { ActivatePath, ActivateRequest, ActivateResponse } from "../Domain/Activation.ts"
import { Envelope, IdempotencyConflict, IdempotencyInProgress, ValidationError } from "../Domain/Errors.ts"
import { Authentication, JsonBody, RequireCampaignsWrite, RequireIdempotencyKey } from "../Middleware/Api.ts"

/**
 * HttpApiBuilder runs an endpoint's middleware last-added first, so the list
 * below reads inside out: authentication and rate limit, then scope, then the
 * Idempotency-Key header, then media type, size and JSON: CONTRACT.md's order.
 */
const activate = HttpApiEndpoint.post("activate", "/creators/:creatorId/campaigns/:campaignId/activate")
  .setPath(ActivatePath)
  .setHeaders(Schema.Struct({
    "idempotency-key": Schema.String.annotations({
      description: "Any unique string of 1 to 255 visible ASCII characters, kept 24 hours per brand"
    })
  }))
  .setPayload(ActivateRequest)
  .addSuccess(ActivateResponse)
  .addError(Envelope(ValidationError))
  .addError(Envelope(IdempotencyConflict))
  .addError(Envelope(IdempotencyInProgress))
  .middleware(JsonBody)
  .middleware(RequireIdempotencyKey)
  .middleware(RequireCampaignsWrite)
  .middleware(Authentication)
  .annotate(OpenApi.Summary, "Activate a campaign for a creator")
  .annotate(
    OpenApi.Description,
    "Creates an `ACTIVE` activation record. Requires the scope `campaigns:write` and an `Idempotency-Key`: a replay with the same body returns the original response with `Idempotent-Replayed: true`; the same key with another body is 409 `IDEMPOTENCY_CONFLICT`."
  )

export class ActivationsApi extends HttpApiGroup.make("activations")
  .add(activate)
  .annotate(OpenApi.Title, "Activations")
{}
