import { HttpApi, OpenApi } from "@effect/platform"
import { ActivationsApi } from "./Activations/Api.ts"
import { Envelope, InternalError, ServiceUnavailable } from "./Domain/Errors.ts"
import { IdentityApi } from "./Identity/Api.ts"

/** The whole public API, definition only: handlers live beside each feature. */
export class CampaignApi extends HttpApi.make("campaign-api")
  .add(ActivationsApi)
  .add(IdentityApi)
  .addError(Envelope(InternalError))
  .addError(Envelope(ServiceUnavailable))
  .prefix("/v1")
  .annotate(OpenApi.Title, "Campaign Activation and Identity API")
  .annotate(OpenApi.Version, "1.0.0")
{}
