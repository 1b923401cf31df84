import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { ApiKeyAuth, RequiredScope, RequireScope } from "../ApiKeys/Api.ts"
import { ActivatePath, ActivateRequest, ActivateResponse } from "../Domain/Activation.ts"
import { Envelope, IdempotencyConflict, IdempotencyInProgress, ValidationError } from "../Domain/Errors.ts"
import { IdempotencyKeyHeader } from "../Domain/IdempotencyKey.ts"
import { JsonBody } from "../Domain/JsonBody.ts"
import { RequireIdempotencyKey } from "../Idempotency/Api.ts"

const activate = HttpApiEndpoint.post("activate", "/creators/:creatorId/campaigns/:campaignId/activate")
  .setPath(ActivatePath)
  .setHeaders(Schema.Struct({ "idempotency-key": IdempotencyKeyHeader }))
  .setPayload(ActivateRequest)
  .addSuccess(ActivateResponse)
  .addError(Envelope(ValidationError))
  .addError(Envelope(IdempotencyConflict))
  .addError(Envelope(IdempotencyInProgress))
  // The order of checks (README, Errors), run by the edge in this order before the handler.
  .middleware(ApiKeyAuth)
  .middleware(RequireScope)
  .middleware(RequireIdempotencyKey)
  .middleware(JsonBody)
  .annotate(RequiredScope, "campaigns:write")
  .annotate(OpenApi.Summary, "Activate a campaign for a creator")
  .annotate(
    OpenApi.Description,
    "Creates an `ACTIVE` activation record. Requires the scope `campaigns:write` and an `Idempotency-Key`: a replay with the same body returns the original response with `Idempotent-Replayed: true`; the same key with another body is 409 `IDEMPOTENCY_CONFLICT`."
  )

export class ActivationsApi extends HttpApiGroup.make("activations")
  .add(activate)
  .annotate(OpenApi.Title, "Activations")
{}
