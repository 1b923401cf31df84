import { HttpApiBuilder } from "@effect/platform"
import { Effect, Schema } from "effect"
import { Activations } from "../Activations.ts"
import { CampaignApi } from "../Api.ts"
import { ActivateResponse } from "../Domain/Activation.ts"
import { Idempotency } from "../Idempotency.ts"
import { CurrentApiKey, RequestIdempotencyKey } from "../Middleware/Api.ts"
import { setHeaders } from "../Middleware/Http.ts"

const encodeResponse = Schema.encodeSync(Schema.parseJson(ActivateResponse))

export const HttpActivationsLive = HttpApiBuilder.group(CampaignApi, "activations", (handlers) =>
  Effect.gen(function*() {
    const activations = yield* Activations
    const idempotency = yield* Idempotency
    return handlers.handle("activate", ({ path, payload, request }) =>
      Effect.gen(function*() {
        const by = yield* CurrentApiKey
        const key = yield* RequestIdempotencyKey
        const operation = activations.activate({ ...path, request: payload, by }).pipe(
          Effect.map((activation) => ({
            status: 200,
            body: encodeResponse({ ok: true, activation }),
            resourceId: activation.id
          }))
        )
        return yield* idempotency.run({
          brandId: by.brandId,
          key,
          method: request.method,
          // The router serves the path with or without a trailing slash: both are one request.
          path: request.url.split("?")[0]!.replace(/\/$/, ""),
          body: payload
        }, operation).pipe(
          Effect.tapErrorTag("IdempotencyInProgress", () => setHeaders({ "retry-after": "1" }))
        )
      }))
  }))
