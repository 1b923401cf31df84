import { Context, Deferred, Duration, Effect, Exit, FiberId, Layer } from "effect"
import { ActivationsRepo } from "./Activations/ActivationsRepo.ts"
import { analyticsLine, type CampaignAnalytics } from "./Domain/Activation.ts"
import { ConcurrencyLimited } from "./Domain/Errors.ts"
import { spans } from "./Spans.ts"

/**
 * A brand's calls in line behind the one being answered: their turns, first come first. A turn is
 * handed from the call that ends to the next, never left free between them; the last to end takes
 * the line away.
 */
interface Line {
  readonly brandId: string
  readonly waiting: Array<Deferred.Deferred<void>>
}

const lineFull = new ConcurrencyLimited({
  message:
    `${analyticsLine.waiting} of this brand's analytics calls are already waiting their turn behind the one being answered; retry once one has been answered.`
})
const waitedTooLong = () =>
  new ConcurrencyLimited({
    message:
      `This call waited ${analyticsLine.longestWaitSeconds} seconds for the brand's earlier analytics calls to be answered; retry once they have been.`
  })
const longestWait = Duration.seconds(analyticsLine.longestWaitSeconds)

/**
 * The brands' lines, each there while one of the brand's calls is being answered: a plain map,
 * looked up and written in one step. At effect 3.19 to 3.22 `RcMap.get` (`internal/rcMap.ts`) looks its
 * key up before it waits for its lock and makes the entry after it, so that calls of one brand
 * arriving in the same turn each had an entry of their own, and were answered side by side.
 */
const makeLines = () => {
  const lines = new Map<string, Line>()

  /** The call that had the turn is done: the next in line has it, or the line is gone. */
  const handOn = (line: Line) =>
    Effect.sync(() => {
      const next = line.waiting.shift()
      if (next === undefined) lines.delete(line.brandId)
      else Deferred.unsafeDone(next, Exit.void)
    })

  /**
   * A call that stops waiting (its wait too long, its client gone) leaves the line; handed its
   * turn as it stopped, it hands it on.
   */
  const leave = (line: Line, turn: Deferred.Deferred<void>) =>
    Effect.suspend(() => {
      const at = line.waiting.indexOf(turn)
      if (at === -1) return handOn(line)
      line.waiting.splice(at, 1)
      return Effect.void
    })

  /**
   * `read` in its turn in the brand's line. Not Effect's semaphore under a timeout: a permit taken
   * just as the timeout wins the race would go with the losing fiber, and the brand's turn with it.
   */
  return <A, E, R>(brandId: string, read: Effect.Effect<A, E, R>): Effect.Effect<A, E | ConcurrencyLimited, R> =>
    Effect.uninterruptibleMask((restore) =>
      Effect.suspend(() => {
        const line = lines.get(brandId)
        if (line === undefined) {
          const opened: Line = { brandId, waiting: [] }
          lines.set(brandId, opened)
          return Effect.ensuring(restore(read), handOn(opened))
        }
        if (line.waiting.length >= analyticsLine.waiting) return Effect.fail(lineFull)
        const turn = Deferred.unsafeMake<void>(FiberId.none)
        line.waiting.push(turn)
        return Effect.matchCauseEffect(
          restore(Effect.timeoutFail(Deferred.await(turn), { duration: longestWait, onTimeout: waitedTooLong })),
          {
            onFailure: (cause) => Effect.zipRight(leave(line, turn), Effect.failCause(cause)),
            onSuccess: () => Effect.ensuring(restore(read), handOn(line))
          }
        )
      })
    )
}

/**
 * A campaign's numbers (docs/integrators.md, Analytics), from the counts kept as it is activated. A brand's calls
 * are answered one at a time, so one brand's calls never take more than one read's share of the
 * database from the others; and they wait in a bounded line (`analyticsLine`), so that calls no one
 * will read do not pile up behind it: a call past its bounds is refused with `ConcurrencyLimited`.
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
  ) => Effect.Effect<CampaignAnalytics, ConcurrencyLimited>
}>() {
  static readonly Live = Layer.effect(
    Analytics,
    Effect.gen(function*() {
      const span = yield* spans
      const repo = yield* ActivationsRepo
      const inTurn = makeLines()
      return {
        campaign: (brandId, campaignId, { from, to }) =>
          inTurn(brandId, repo.counts(brandId, campaignId, from, to)).pipe(
            Effect.map((counts): CampaignAnalytics => ({
              campaignId,
              from: from ?? null,
              to: to ?? null,
              activations: counts.byDay.reduce((sum, day) => sum + day.activations, 0),
              creators: counts.creators,
              activationsByDay: counts.byDay,
              plannedPostsByDay: counts.byPlannedDay,
              unscheduled: counts.unscheduled
            })),
            span("Analytics.campaign")
          )
      }
    })
  )
}
