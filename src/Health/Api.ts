import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { Envelope, ServiceUnavailable } from "../Domain/Errors.ts"

export const Health = Schema.Struct({
  ok: Schema.Literal(true),
  status: Schema.Literal("alive")
}).annotations({ identifier: "Health" })

export const Readiness = Schema.Struct({
  ok: Schema.Literal(true),
  status: Schema.Literal("ready"),
  database: Schema.Literal("sqlite", "postgres").annotations({ description: "The database this instance uses." }),
  rateLimiter: Schema.Literal("memory", "redis", "degraded").annotations({
    description:
      "Where the rate limits are kept: `memory` (this instance), `redis` (shared by every instance), or `degraded`: Redis does not answer and requests are served without limits until it does."
  })
}).annotations({ identifier: "Readiness" })

const alive = HttpApiEndpoint.get("alive", "/healthz")
  .addSuccess(Health)
  .annotate(OpenApi.Summary, "Liveness")
  .annotate(OpenApi.Description, "200 while the process serves HTTP. Needs no API key and is not rate limited.")

const ready = HttpApiEndpoint.get("ready", "/readyz")
  .addSuccess(Readiness)
  .addError(Envelope(ServiceUnavailable))
  .annotate(OpenApi.Summary, "Readiness")
  .annotate(
    OpenApi.Description,
    "200 when the database answers, 503 `SERVICE_UNAVAILABLE` when it does not or the server is draining. A rate limiter whose Redis does not answer is reported as `degraded` and does not fail readiness: requests are then served without limits. Needs no API key and is not rate limited."
  )

/** For load balancers and orchestrators: no key, no rate limit. */
export class HealthApi extends HttpApiGroup.make("health")
  .add(alive)
  .add(ready)
  .annotate(OpenApi.Title, "Health")
{
  static readonly alive = alive
  static readonly ready = ready
}
