import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { Envelope, ServiceUnavailable } from "../Domain/Errors.ts"

export const Health = Schema.Struct({
  ok: Schema.Literal(true),
  status: Schema.Literal("alive", "ready")
}).annotations({ identifier: "Health" })

/** For load balancers and orchestrators: no key, no rate limit. */
export class HealthApi extends HttpApiGroup.make("health")
  .add(
    HttpApiEndpoint.get("alive", "/healthz")
      .addSuccess(Health)
      .annotate(OpenApi.Summary, "Liveness")
      .annotate(OpenApi.Description, "200 while the process serves HTTP. Needs no API key and is not rate limited.")
  )
  .add(
    HttpApiEndpoint.get("ready", "/readyz")
      .addSuccess(Health)
      .addError(Envelope(ServiceUnavailable))
      .annotate(OpenApi.Summary, "Readiness")
      .annotate(
        OpenApi.Description,
        "200 when the database answers, 503 `SERVICE_UNAVAILABLE` when it does not or the server is draining. Needs no API key and is not rate limited."
      )
  )
  .annotate(OpenApi.Title, "Health")
{}
