import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Effect, Option } from "effect"
import { Activations } from "../Activations.ts"
import { CampaignApi } from "../Api.ts"
import { CurrentKey } from "../ApiKeys/Api.ts"
import { type Activation, withDefaults } from "../Domain/Activation.ts"
import { type IdempotencyInProgress, NotFound } from "../Domain/Errors.ts"
import { Idempotency, type IdempotentAnswer } from "../Idempotency.ts"
import { IdempotencyKey } from "../Idempotency/Api.ts"
import { Metrics } from "../Metrics.ts"
import { addResponseHeaders, etagOf, jsonText, notModified } from "../Responses.ts"

/**
 * The answers' JSON, written directly: every field of a stored record is a string (or null) that
 * the schemas' encoders pass through as they are, so encoding twenty records through them cost a
 * page more than its query (docs/operators.md, Performance). The keys are in the schemas' order (the
 * repository builds records so), and a test holds these bytes to the encoders' own.
 */
export const recordJson = (activation: Activation): string => JSON.stringify({ ok: true, activation })
export const pageJson = (activations: ReadonlyArray<Activation>, hasMore: boolean): string =>
  JSON.stringify({ ok: true, activations, hasMore })

const defaultLimit = 20

/** The path as sent, without its query or a trailing slash: a trailing slash is the same route. */
const pathOf = (request: HttpServerRequest.HttpServerRequest) => {
  const query = request.url.indexOf("?")
  return (query === -1 ? request.url : request.url.slice(0, query)).replace(/\/$/, "")
}

const replayedHeaders = { "idempotent-replayed": "true" }
const stillInProgress = (error: IdempotencyInProgress) =>
  Effect.zipRight(addResponseHeaders({ "retry-after": "1" }), Effect.fail(error))

/**
 * The activations' endpoints (docs/integrators.md, API), once the middleware their definition declares have
 * passed (`Activations/Api.ts`): activate, under its Idempotency-Key, and the reads of one
 * brand's records, where another brand's record answers as one that does not exist.
 */
export const ActivationsHandlers = Effect.gen(function*() {
  const activations = yield* Activations
  const idempotency = yield* Idempotency
  const metrics = yield* Metrics
  // The stored bytes, marked when they answer a repeat; counted once committed and answered, never
  // inside the transaction, which may run more than once.
  const answered = (answer: IdempotentAnswer) => {
    if (!answer.replayed) metrics.activationCreated()
    return jsonText(
      answer.body,
      answer.replayed ? { status: answer.status, headers: replayedHeaders } : { status: answer.status }
    )
  }

  const activate = HttpApiBuilder.handler(
    CampaignApi,
    "activations",
    "activate",
    ({ path, payload, request }) =>
      Effect.flatMap(CurrentKey, (by) =>
        Effect.flatMap(IdempotencyKey, (key) => {
          const body = withDefaults(payload)
          const operation = Effect.map(activations.activate({ ...path, request: body, by }), (activation) => ({
            status: 200,
            body: recordJson(activation),
            resourceId: activation.id
          }))
          return idempotency.run({
            brandId: by.brandId,
            key,
            method: request.method,
            path: pathOf(request),
            body
          }, operation).pipe(
            Effect.map(answered),
            Effect.catchTag("IdempotencyInProgress", stillInProgress)
          )
        }))
  )

  const get = HttpApiBuilder.handler(
    CampaignApi,
    "activations",
    "get",
    ({ path: { activationId }, request }) =>
      Effect.flatMap(CurrentKey, ({ brandId }) =>
        Effect.flatMap(activations.find(brandId, activationId), (found) => {
          if (Option.isNone(found)) return Effect.fail(new NotFound({ message: `No activation ${activationId}.` }))
          const body = recordJson(found.value)
          const etag = etagOf(body)
          return Effect.succeed(
            notModified(request.headers["if-none-match"], etag)
              ? HttpServerResponse.empty({ status: 304, headers: { etag } })
              : jsonText(body, { headers: { etag } })
          )
        }))
  )

  const list = HttpApiBuilder.handler(
    CampaignApi,
    "activations",
    "list",
    ({ request, urlParams: query }) =>
      Effect.flatMap(CurrentKey, ({ brandId }) => {
        const limit = query.limit === undefined ? defaultLimit : Number(query.limit)
        // One more than the page: whether there is a next page, without counting.
        const page = {
          creatorId: query.creatorId,
          campaignId: query.campaignId,
          below: query.startingAfter,
          limit: limit + 1
        }
        return Effect.map(activations.list(brandId, page), (rows) => {
          const hasMore = rows.length > limit
          const shown = hasMore ? rows.slice(0, limit) : rows
          const body = pageJson(shown, hasMore)
          if (!hasMore) return jsonText(body)
          // The same filters and limit, from the last record shown: relative to this request (RFC 8288).
          const next = new URLSearchParams()
          if (query.creatorId !== undefined) next.set("creatorId", query.creatorId)
          if (query.campaignId !== undefined) next.set("campaignId", query.campaignId)
          if (query.limit !== undefined) next.set("limit", query.limit)
          next.set("startingAfter", shown.at(-1)!.id)
          return jsonText(body, { headers: { link: `<${pathOf(request)}?${next}>; rel="next"` } })
        })
      })
  )

  return { activate, get, list }
})
