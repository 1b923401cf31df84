import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { CampaignsReadKey, CampaignsWriteKey } from "../ApiKeys/Api.ts"
import { OptionalRequestHeaders, SuccessHeaders } from "../Declaration.ts"
import {
  ActivatePath,
  ActivateRequest,
  ActivateResponse,
  ActivationIdPath,
  ActivationList,
  ListActivationsQuery
} from "../Domain/Activation.ts"
import { Envelope, IdempotencyConflict, IdempotencyInProgress, ValidationError } from "../Domain/Errors.ts"
import { DeclaredIdempotencyKeyHeader } from "../Domain/IdempotencyKey.ts"
import { JsonBody } from "../Domain/JsonBody.ts"
import { RequireIdempotencyKey } from "../Idempotency/Api.ts"

const activate = HttpApiEndpoint.post("activate", "/creators/:creatorId/campaigns/:campaignId/activate")
  .setPath(ActivatePath)
  .setHeaders(Schema.Struct({ "idempotency-key": DeclaredIdempotencyKeyHeader }))
  .setPayload(ActivateRequest)
  .addSuccess(ActivateResponse)
  .addError(Envelope(ValidationError))
  .addError(Envelope(IdempotencyConflict))
  .addError(Envelope(IdempotencyInProgress))
  // The order of checks (docs/integrators.md, Errors) as HttpApiBuilder runs an endpoint's middleware: the last
  // declared first. So the key (401, 429, 403), then the Idempotency-Key (400), then the body (415,
  // 413, 400), all before the path, query and payload are decoded (400).
  .middleware(JsonBody)
  .middleware(RequireIdempotencyKey)
  .middleware(CampaignsWriteKey)
  .annotate(OpenApi.Summary, "Activate a campaign for a creator")
  .annotate(
    OpenApi.Description,
    "Creates an `ACTIVE` activation record. Requires the scope `campaigns:write` and an `Idempotency-Key`: a replay with the same body returns the original response with `Idempotent-Replayed: true`; the same key with another body is 409 `IDEMPOTENCY_CONFLICT`."
  )

const get = HttpApiEndpoint.get("get", "/activations/:activationId")
  .setPath(ActivationIdPath)
  .addSuccess(ActivateResponse)
  .addSuccess(
    Schema.Void.annotations({
      description: "Not Modified: the `ETag` sent in `If-None-Match` is the record's; no body."
    }),
    { status: 304 }
  )
  .addError(Envelope(ValidationError))
  .middleware(CampaignsReadKey)
  .annotate(SuccessHeaders, {
    ETag: { description: "A strong validator of the record: send it in `If-None-Match` for a `304`.", always: true }
  })
  .annotate(OptionalRequestHeaders, {
    "If-None-Match":
      "The record's `ETag` (or a list of tags, or `*`): `304 Not Modified` without a body when it matches."
  })
  .annotate(OpenApi.Summary, "Retrieve an activation")
  .annotate(
    OpenApi.Description,
    "The brand's activation with this id, exactly as activate answered it. Requires the scope `campaigns:read` (or `campaigns:write`). Another brand's activation is 404 `NOT_FOUND`, as an id that does not exist. Send the `ETag` back in `If-None-Match` for a `304` without a body."
  )

const list = HttpApiEndpoint.get("list", "/activations")
  .setUrlParams(ListActivationsQuery)
  .addSuccess(ActivationList)
  .addError(Envelope(ValidationError))
  .middleware(CampaignsReadKey)
  .annotate(SuccessHeaders, {
    Link: {
      description:
        "With `hasMore`, the next page: `</v1/activations?…&startingAfter=<last id>>; rel=\"next\"` (RFC 8288, relative to this request).",
      // Only when there is a next page.
      always: false
    }
  })
  .annotate(OpenApi.Summary, "List activations")
  .annotate(
    OpenApi.Description,
    "The brand's activations, newest first (by id: ids are UUIDv7), `limit` at a time (1 to 100, default 20), filtered by `creatorId` and `campaignId` in any letter case. `startingAfter` is a keyset cursor: the page holds the records whose id is below it, so new activations never shift a page. Requires the scope `campaigns:read` (or `campaigns:write`). Any other query parameter is 400 `VALIDATION_ERROR`."
  )

export class ActivationsApi extends HttpApiGroup.make("activations")
  .add(activate)
  .add(get)
  .add(list)
  .annotate(OpenApi.Title, "Activations")
{
  static readonly activate = activate
  static readonly get = get
  static readonly list = list
}
