import { Context, Effect } from "effect"
import { ActivationsRepo } from "../Activations/ActivationsRepo.ts"
import type { CampaignApi } from "../Api.ts"
import { CurrentKey } from "../ApiKeys/Api.ts"
import { ValidationError } from "../Domain/Errors.ts"
import { compile } from "../Edge/Endpoint.ts"
import type { Handlers } from "../Edge/Exchange.ts"
import { AnalyticsApi } from "./Api.ts"

const endpoint = compile(AnalyticsApi.campaign)

// The one rule of the range that is not a rule of one query parameter, which is all the
// definition's URL parameter schema can hold (its fields are the document's query parameters).
const backwards = Effect.fail(new ValidationError({ message: "from must not be after to." }))

/** GET /v1/campaigns/{campaignId}/analytics (README, Analytics): the brand's activations of it, counted. */
export const AnalyticsHandlers = Effect.gen(function*() {
  const repo = yield* ActivationsRepo
  const handlers: Handlers<typeof CampaignApi>["analytics"] = {
    campaign: (exchange, given) =>
      Effect.flatMap(endpoint.decodePath(exchange.params), ({ campaignId }) =>
        Effect.flatMap(endpoint.decodeQuery(exchange.request), ({ from, to }) => {
          if (from !== undefined && to !== undefined && from > to) return backwards
          const brandId = Context.get(given, CurrentKey).brandId
          return Effect.map(repo.counts(brandId, campaignId, from, to), (counts) => {
            const activations = counts.byDay.reduce((sum, day) => sum + day.activations, 0)
            return {
              status: 200,
              body: endpoint.encodeSuccess({
                ok: true,
                analytics: {
                  campaignId,
                  from: from ?? null,
                  to: to ?? null,
                  activations,
                  creators: counts.creators,
                  activationsByDay: counts.byDay,
                  plannedPostsByDay: counts.byPlannedDay,
                  unscheduled: counts.unscheduled
                }
              })
            }
          })
        }))
  }
  return handlers
})
