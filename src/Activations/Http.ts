import { Context, Effect } from "effect"
import { Activations } from "../Activations.ts"
import type { CampaignApi } from "../Api.ts"
import { CurrentKey } from "../ApiKeys/Api.ts"
import { withDefaults } from "../Domain/Activation.ts"
import type { IdempotencyInProgress } from "../Domain/Errors.ts"
import { JsonPayload } from "../Domain/JsonBody.ts"
import { compile } from "../Edge/Endpoint.ts"
import { type Handlers, Refused, type Reply } from "../Edge/Exchange.ts"
import { Idempotency, type IdempotentAnswer } from "../Idempotency.ts"
import { recorder } from "../Metrics.ts"
import { IdempotencyKey } from "../Idempotency/Api.ts"
import { ActivationsApi } from "./Api.ts"
import { ActivationReads } from "./Reads.ts"

const endpoint = compile(ActivationsApi.activate)

const replayedHeaders = { "idempotent-replayed": "true" }

/** The stored bytes, marked when they answer a repeat. */
const toReply = (answer: IdempotentAnswer): Reply =>
  answer.replayed
    ? { status: answer.status, body: answer.body, headers: replayedHeaders }
    : { status: answer.status, body: answer.body }

const retryShortly = { "retry-after": "1" }
const stillInProgress = (error: IdempotencyInProgress) => Effect.fail(new Refused(error, retryShortly))

/**
 * The activations' endpoints: the reads (`Reads.ts`), and POST
 * /v1/creators/{creatorId}/campaigns/{campaignId}/activate, once the steps its definition
 * declares have passed (key, rate limit, scope, Idempotency-Key, JSON body: `Activations/Api.ts`):
 * the path and the payload validated, then the activation under its Idempotency-Key.
 */
export const ActivationsHandlers = Effect.gen(function*() {
  const activations = yield* Activations
  const idempotency = yield* Idempotency
  const reads = yield* ActivationReads
  const metrics = yield* recorder
  // Counted once committed and answered, never inside the transaction, which may run more than once.
  const answered = (answer: IdempotentAnswer): Reply => {
    if (!answer.replayed) metrics.activationCreated()
    return toReply(answer)
  }

  const handlers: Handlers<typeof CampaignApi>["activations"] = {
    activate: (exchange, given) =>
      Effect.flatMap(endpoint.decodePath(exchange.params), (path) =>
        Effect.flatMap(endpoint.decodePayload(Context.get(given, JsonPayload)), (payload) => {
          const by = Context.get(given, CurrentKey)
          const request = withDefaults(payload)
          const operation = Effect.map(activations.activate({ ...path, request, by }), (activation) => ({
            status: 200,
            body: endpoint.encodeSuccess({ ok: true, activation }),
            resourceId: activation.id
          }))
          return idempotency.run({
            brandId: by.brandId,
            key: Context.get(given, IdempotencyKey),
            method: exchange.request.method,
            // A trailing slash is the same route: both spellings are one request.
            path: exchange.path.replace(/\/$/, ""),
            body: request
          }, operation).pipe(
            Effect.map(answered),
            Effect.catchTag("IdempotencyInProgress", stillInProgress)
          )
        })),
    get: reads.get,
    list: reads.list
  }
  return handlers
})
