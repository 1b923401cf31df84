import { HttpApi, OpenApi } from "@effect/platform"
import { ActivationsApi } from "./Activations/Api.ts"
import { AnalyticsApi } from "./Analytics/Api.ts"
import { finishDocument } from "./ApiDocument.ts"
import {
  Envelope,
  InternalError,
  MethodNotAllowed,
  NotFound,
  ServiceUnavailable,
  ValidationError
} from "./Domain/Errors.ts"
import { HealthApi } from "./Health/Api.ts"
import { IdentityApi } from "./Identity/Api.ts"
import { version } from "./Version.ts"

const definition = HttpApi.make("campaign-api")
  .add(ActivationsApi.prefix("/v1"))
  .add(AnalyticsApi.prefix("/v1"))
  .add(IdentityApi.prefix("/v1"))
  .add(HealthApi)
  // Any request may miss its route: a path of another spelling is 404, another method 405 with `Allow`.
  .addError(Envelope(NotFound))
  .addError(Envelope(MethodNotAllowed))
  // And any may carry a query parameter its operation does not take, or one twice (README, Errors).
  .addError(Envelope(ValidationError))
  .addError(Envelope(InternalError))
  .addError(Envelope(ServiceUnavailable))
  .annotate(OpenApi.Title, "Campaign Activation and Identity API")
  .annotate(OpenApi.Version, version)
  .annotate(
    OpenApi.Description,
    "Activate campaigns for creators, read back what was activated and a campaign's numbers, and resolve the identity behind an API key. Every error the service answers is `{ ok: false, code, message }`; every authenticated response carries `RateLimit` and `RateLimit-Policy` headers, and `Api-Key-Expires` when the secret sent has an end. Each route has one spelling (a trailing slash aside): another letter case, `//`, `;params`, a dot segment (`/./`, `/../`), a backslash or any percent-encoding is 404. `HEAD` is answered on every GET route, as the GET without its body. Some requests never reach the service: the HTTP server (Bun) answers them itself, with no body, `Connection: close` and none of the headers this document lists: 431 for a request line and headers over 16 KiB or more than 198 header fields; 400 for a target that is neither a path nor a full URL (`OPTIONS *`), both `Content-Length` and `Transfer-Encoding`, an HTTP/1.1 request without `Host`, or a header line it cannot read; 505 for a request line it cannot read. A method it does not know closes the connection without an answer."
  )

/** The whole public API, definition only: handlers and steps live beside each feature. */
export class CampaignApi extends definition.annotate(OpenApi.Transform, finishDocument(definition)) {}
