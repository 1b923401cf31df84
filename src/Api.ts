import * as HttpApi from "@effect/platform/HttpApi"
import * as OpenApi from "@effect/platform/OpenApi"
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
import { DocumentsApi } from "./Edge/DocumentsApi.ts"
import { HealthApi } from "./Health/Api.ts"
import { IdentityApi } from "./Identity/Api.ts"
import { version } from "./Version.ts"

/**
 * What the docs page opens with (docs/integrators.md): how to authenticate and the first call,
 * then what every answer has; the HTTP server's fine print last.
 */
const description = [
  "Activate campaigns for creators, read back what was activated and a campaign's numbers, and resolve the identity behind an API key. This document is served at `/openapi.json`; the docs page at `/docs` shows it.",
  "## Authentication",
  "Every operation under `/v1` takes an API key as a bearer token: `Authorization: Bearer cak_<keyId>_<secret>` (the scheme in any case). The operators of this deployment make keys, each for one brand with its scopes; each operation names the scope it needs. A key missing, unknown, revoked or expired is 401 `UNAUTHORIZED`; one without the scope, 403 `FORBIDDEN`. `GET /`, this document and the health probes need no key.",
  "## The first call",
  "Which identity does the key resolve to? With `API_URL` this document's server and `API_KEY` the key:",
  "```sh\ncurl -i \"$API_URL/v1/whoami\" -H \"Authorization: Bearer $API_KEY\"\n```",
  "The answer is `200` with the key's id, its brand and its scopes: `{\"ok\":true,\"keyId\":\"…\",\"brandId\":\"…\",\"scopes\":[\"campaigns:write\"]}`. Then activate a campaign for a creator (`POST …/activate` with an `Idempotency-Key`), and read back what was activated.",
  "## Every answer",
  "Every error the service answers is `{ \"ok\": false, \"code\": \"…\", \"message\": \"…\" }`. Every authenticated response carries `RateLimit` and `RateLimit-Policy` headers, and `Api-Key-Expires` when the secret sent has an end.",
  "## HTTP fine print",
  "The HTTP reference (docs/http-reference.md in the repository) says all of it; in short:",
  [
    "- A request body is JSON in UTF-8. A body without `Content-Type` is read as JSON, and a byte order mark (U+FEFF) before it is ignored. A `Content-Type` other than `application/json`, a `charset` other than `utf-8` or a `Content-Encoding` other than `identity` is 415 `UNSUPPORTED_MEDIA_TYPE`.",
    "- A `Host` missing (HTTP/1.0), given more than once or not a `host[:port]` is 400 `VALIDATION_ERROR`, before the route is read.",
    "- Each route has one spelling (a trailing slash aside): another letter case, `//`, `;params`, a dot segment (`/./`, `/../`), a backslash or any percent-encoding is 404.",
    "- `HEAD` is answered on every GET route, as the GET without its body: this document declares each, and the docs page shows the GET."
  ].join("\n"),
  "Some requests never reach the service: the HTTP server (Bun) answers them itself, with no body, `Connection: close` and none of the headers this document lists.",
  [
    "- 431: a request line and headers over 16 KiB together, or more than 198 header fields.",
    "- 400: a target that is neither a path nor a full URL (`OPTIONS *`); an HTTP/1.1 request without `Host`; a header line it cannot read (a folded one, or `Transfer-Encoding : chunked`, a space before the colon).",
    "- 400, for the framing of a body: both `Content-Length` and `Transfer-Encoding`; a `Transfer-Encoding` other than `chunked`, or chunked on HTTP/1.0; a `Content-Length` that is not one decimal number (`-1`, `+24`, `0x18`, `24, 24`, two different lengths) or has 19 digits or more; a chunk size that is not hexadecimal (`zz`), which Bun finds once the service reads the body: nothing is stored.",
    "- 400 for a chunked body with trailer fields: the request has reached the service with the body up to its last chunk, and run; its answer is lost unless it was sent before the trailer was read. Send no trailer; to learn whether an activation was made, send it again with the same `Idempotency-Key`.",
    "- 505: a request line it cannot read (a space or a control character in the target, bare LF line ends, a version other than HTTP/1.0 and 1.1).",
    "- A method it does not know (`FOO`, or `get` in lower case) closes the connection without an answer."
  ].join("\n")
].join("\n\n")

const definition = HttpApi.make("campaign-api")
  .add(ActivationsApi.prefix("/v1"))
  .add(AnalyticsApi.prefix("/v1"))
  .add(IdentityApi.prefix("/v1"))
  .add(HealthApi)
  .add(DocumentsApi)
  // Any request may miss its route: a path of another spelling is 404, another method 405 with `Allow`.
  .addError(Envelope(NotFound))
  .addError(Envelope(MethodNotAllowed))
  // And any may carry a query parameter its operation does not take, or one twice, or a Host that
  // names no host (docs/integrators.md, Errors).
  .addError(Envelope(ValidationError))
  .addError(Envelope(InternalError))
  .addError(Envelope(ServiceUnavailable))
  .annotate(OpenApi.Title, "Campaign Activation and Identity API")
  .annotate(OpenApi.Version, version)
  .annotate(OpenApi.Description, description)

/** The whole public API, definition only: handlers and steps live beside each feature. */
export class CampaignApi extends definition.annotate(OpenApi.Transform, finishDocument(definition)) {}
