import { RateLimiter } from "@effect/experimental"
import { Clock, Context, Duration, Effect, Layer } from "effect"
import { AppConfig } from "./Config.ts"
import { span } from "./Edge/Span.ts"

/** What one request's charge left over, in the terms of the RateLimit headers. */
export interface RateLimitDecision {
  readonly allowed: boolean
  readonly remaining: number
  /** Whole seconds until a request is available again: 0 while tokens remain. */
  readonly retryAfterSeconds: number
}

/** A token bucket per API key, on `@effect/experimental`'s RateLimiter. */
export class RateLimit extends Context.Tag("RateLimit")<RateLimit, {
  readonly policy: { readonly max: number; readonly windowSeconds: number }
  readonly consume: (keyId: string) => Effect.Effect<RateLimitDecision>
}>() {
  static readonly layer = Layer.effect(
    RateLimit,
    Effect.gen(function*() {
      const limiter = yield* RateLimiter.RateLimiter
      const { rateLimit } = yield* AppConfig
      const refillMillis = Duration.toMillis(rateLimit.window) / rateLimit.max
      // The library's retryAfter is always one whole refill interval. Its memory store refills
      // on a schedule that starts when it first sees a key, so the wait to the next token is
      // computed from that moment instead: exact, where the library's is only never too short.
      const firstSeen = new Map<string, number>()
      const secondsToNextToken = (keyId: string, now: number) => {
        const sinceRefill = (now - firstSeen.get(keyId)!) % refillMillis
        return Math.max(1, Math.ceil((refillMillis - sinceRefill) / 1000))
      }
      return {
        policy: { max: rateLimit.max, windowSeconds: Math.round(Duration.toSeconds(rateLimit.window)) },
        consume: (keyId) =>
          Effect.flatMap(Clock.currentTimeMillis, (now) => {
            if (!firstSeen.has(keyId)) firstSeen.set(keyId, now)
            return limiter.consume({
              algorithm: "token-bucket",
              onExceeded: "fail",
              window: rateLimit.window,
              limit: rateLimit.max,
              key: keyId
            }).pipe(
              Effect.map((result): RateLimitDecision => ({
                allowed: true,
                remaining: result.remaining,
                retryAfterSeconds: result.remaining > 0 ? 0 : secondsToNextToken(keyId, now)
              })),
              Effect.catchTag("RateLimiterError", (error) =>
                // Both RateLimiter errors share the tag: only "Exceeded" is a refusal, a store failure is a defect.
                error.reason === "Exceeded"
                  ? Effect.succeed<RateLimitDecision>({
                    allowed: false,
                    remaining: 0,
                    retryAfterSeconds: secondsToNextToken(keyId, now)
                  })
                  : Effect.die(error))
            )
          }).pipe(span("RateLimit.consume"))
      }
    })
  )

  /** The in-process store: limits hold per instance until a shared store is configured. */
  static readonly Live = RateLimit.layer.pipe(
    Layer.provide(RateLimiter.layer),
    Layer.provide(RateLimiter.layerStoreMemory)
  )
}
