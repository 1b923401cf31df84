import { Context, Effect, Layer, RcMap } from "effect"
import { ActivationsRepo } from "./Activations/ActivationsRepo.ts"
import type { CampaignAnalytics } from "./Domain/Activation.ts"
import { spans } from "./Spans.ts"

/**
 * A campaign's numbers (README, Analytics), from the counts kept as it is activated. A brand's calls
 * are answered one at a time: a second call while one runs waits its turn, so one brand's calls
 * never take more than one read's share of the database from the others.
 */
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
  static readonly Live = Layer.scoped(
    Analytics,
    Effect.gen(function*() {
      const span = yield* spans
      const repo = yield* ActivationsRepo
      // A turn per brand with calls waiting or running, let go a minute after its last.
      const turns = yield* RcMap.make({ lookup: () => Effect.makeSemaphore(1), idleTimeToLive: "1 minute" })
      const inTurn = (brandId: string) => <A, E, R>(read: Effect.Effect<A, E, R>) =>
        Effect.scoped(Effect.flatMap(RcMap.get(turns, brandId), (turn) => turn.withPermits(1)(read)))
      return {
        campaign: (brandId, campaignId, { from, to }) =>
          Effect.map(inTurn(brandId)(repo.counts(brandId, campaignId, from, to)), (counts): CampaignAnalytics => ({
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
