import { Context, Effect, Layer } from "effect"
import { ActivationsRepo } from "./Activations/ActivationsRepo.ts"
import type { CampaignAnalytics } from "./Domain/Activation.ts"
import { spans } from "./Spans.ts"

/** A campaign's numbers (README, Analytics), from the counts kept as it is activated. */
export class Analytics extends Context.Tag("Analytics")<Analytics, {
  /**
   * The brand's activations of the campaign whose `activatedAt` falls on a UTC day from `from` to
   * `to`, both inclusive when given.
   */
  readonly campaign: (
    brandId: string,
    campaignId: string,
    range: { readonly from: string | undefined; readonly to: string | undefined }
  ) => Effect.Effect<CampaignAnalytics>
}>() {
  static readonly Live = Layer.effect(
    Analytics,
    Effect.gen(function*() {
      const span = yield* spans
      const repo = yield* ActivationsRepo
      return {
        campaign: (brandId, campaignId, { from, to }) =>
          Effect.map(repo.counts(brandId, campaignId, from, to), (counts): CampaignAnalytics => ({
            campaignId,
            from: from ?? null,
            to: to ?? null,
            activations: counts.byDay.reduce((sum, day) => sum + day.activations, 0),
            creators: counts.creators,
            activationsByDay: counts.byDay,
            plannedPostsByDay: counts.byPlannedDay,
            unscheduled: counts.unscheduled
          })).pipe(span("Analytics.campaign"))
      }
    })
  )
}
