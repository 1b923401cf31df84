import { HttpApi, OpenApi } from "@effect/platform"
import { ActivationsApi } from "./Activations/Api.ts"
import { finishDocument } from "./Edge/ApiDocument.ts"
import { Envelope, InternalError, ServiceUnavailable } from "./Domain/Errors.ts"
import { HealthApi } from "./Health/Api.ts"
import { IdentityApi } from "./Identity/Api.ts"
import { version } from "./Version.ts"

/** The whole public API, definition only: handlers live beside each feature. */
export class CampaignApi extends HttpApi.make("campaign-api")
  .add(ActivationsApi.prefix("/v1"))
  .add(IdentityApi.prefix("/v1"))
  .add(HealthApi)
  .addError(Envelope(InternalError))
  .addError(Envelope(ServiceUnavailable))
  .annotate(OpenApi.Title, "Campaign Activation and Identity API")
  .annotate(OpenApi.Version, version)
  .annotate(
    OpenApi.Description,
    "Activate campaigns for creators and resolve the identity behind an API key. Every error is `{ ok: false, code, message }`; every authenticated response carries `RateLimit` and `RateLimit-Policy` headers."
  )
  .annotate(OpenApi.Transform, finishDocument)
{}
