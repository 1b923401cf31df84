import { Context, Layer } from "effect"

/**
 * Whether the server has been told to stop (README, Operating it: Shutdown). The web server
 * starts it on SIGTERM; readiness answers 503 from then on, so a load balancer takes the instance
 * out of rotation while its requests are still served.
 */
export class Draining extends Context.Tag("Draining")<Draining, {
  readonly started: () => boolean
  readonly start: () => void
}>() {
  static readonly Live = Layer.sync(Draining, () => {
    let started = false
    return {
      started: () => started,
      start: () => {
        started = true
      }
    }
  })
}
