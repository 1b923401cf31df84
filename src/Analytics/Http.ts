import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect } from "effect"
import { Analytics } from "../Analytics.ts"
import { CampaignApi } from "../Api.ts"
import { CurrentKey } from "../ApiKeys/Api.ts"
import { type ConcurrencyLimited, ValidationError } from "../Domain/Errors.ts"
import { addResponseHeaders, removeResponseHeaders } from "../Responses.ts"

// The one rule of the range that is not a rule of one query parameter, which is all the
// definition's URL parameter schema can hold (its fields are the document's query parameters).
const backwards = Effect.fail(new ValidationError({ message: "from must not be after to." }))

/**
 * The brand's line is full, or the call waited too long in it: a 429 of its own, which says nothing
 * of the key's quota (its RateLimit headers, which the keys' middleware added, would tell a client
 * it may go on, and it may not yet).
 */
const limited = (error: ConcurrencyLimited) =>
  Effect.zipRight(
    Effect.zipRight(
      removeResponseHeaders(["ratelimit-policy", "ratelimit"]),
      addResponseHeaders({ "retry-after": "1" })
    ),
    Effect.fail(error)
  )

/** GET /v1/campaigns/{campaignId}/analytics (docs/integrators.md, Analytics): the brand's activations of it, counted. */
export const AnalyticsHandlers = Effect.gen(function*() {
  const analytics = yield* Analytics
  const campaign = HttpApiBuilder.handler(
    CampaignApi,
    "analytics",
    "campaign",
    ({ path: { campaignId }, urlParams: { from, to } }) =>
      from !== undefined && to !== undefined && from > to
        ? backwards
        : Effect.flatMap(CurrentKey, ({ brandId }) =>
          analytics.campaign(brandId, campaignId, { from, to }).pipe(
            Effect.map((counted) => ({ ok: true as const, analytics: counted })),
            Effect.catchTag("ConcurrencyLimited", limited)
          ))
  )
  return { campaign }
})
