import { RateLimiter } from "@effect/experimental"
import { Context, Duration, Effect, Layer, Option } from "effect"
import { AppConfig, RedisConfig } from "./Config.ts"
import { spans } from "./Spans.ts"
import { RateLimitStore } from "./RateLimit/Store.ts"

/** What one request's charge left over, in the terms of the RateLimit headers. */
export interface RateLimitDecision {
  readonly allowed: boolean
  readonly remaining: number
  /** Whole seconds until a request is available again: 0 while tokens remain. */
  readonly retryAfterSeconds: number
}

/** How the limiter stands, for readiness: in this process, on Redis, or on Redis that does not answer. */
export type RateLimitStatus = "memory" | "redis" | "degraded"

/**
 * A token bucket per API key, on `@effect/experimental`'s RateLimiter, in process memory or in
 * Redis (REDIS_URL). When Redis does not answer, requests are served without a limit (fail open):
 * an outage of the limiter's store must not become an outage of the API.
 */
export class RateLimit extends Context.Tag("RateLimit")<RateLimit, {
  readonly policy: { readonly max: number; readonly windowSeconds: number }
  readonly consume: (keyId: string) => Effect.Effect<RateLimitDecision>
  readonly status: () => RateLimitStatus
}>() {
  static readonly layer = Layer.effect(
    RateLimit,
    Effect.gen(function*() {
      const span = yield* spans
      const limiter = yield* RateLimiter.RateLimiter
      const store = yield* RateLimitStore
      const { rateLimit } = yield* AppConfig
      const clock = yield* Effect.clock
      const refillMillis = Duration.toMillis(rateLimit.window) / rateLimit.max
      // The library's retryAfter is always a whole refill interval; the store knows when the
      // bucket's next token comes, and is asked only once the bucket is empty.
      // While the store does not answer: no limit, and the full budget in the headers.
      const unlimited: RateLimitDecision = { allowed: true, remaining: rateLimit.max, retryAfterSeconds: 0 }
      const emptied = (keyId: string, allowed: boolean) =>
        Effect.map(
          store.untilNextToken(keyId, refillMillis, clock.unsafeCurrentTimeMillis()),
          (millis): RateLimitDecision => ({ allowed, remaining: 0, retryAfterSeconds: Math.max(1, Math.ceil(millis / 1000)) })
        ).pipe(Effect.orElseSucceed(() => unlimited))
      const charge = {
        algorithm: "token-bucket",
        onExceeded: "fail",
        window: rateLimit.window,
        limit: rateLimit.max
      } as const
      return {
        policy: { max: rateLimit.max, windowSeconds: Math.round(Duration.toSeconds(rateLimit.window)) },
        status: () => store.kind === "memory" ? "memory" : store.connected() ? "redis" : "degraded",
        consume: (keyId) =>
          Effect.matchEffect(limiter.consume({ ...charge, key: keyId }), {
            onSuccess: (result) =>
              result.remaining > 0
                ? Effect.succeed<RateLimitDecision>({ allowed: true, remaining: result.remaining, retryAfterSeconds: 0 })
                : emptied(keyId, true),
            // Exceeded: refused. Otherwise the store does not answer (its outage is logged once,
            // by the store): fail open.
            onFailure: (error) => error.reason === "Exceeded" ? emptied(keyId, false) : Effect.succeed(unlimited)
          }).pipe(span("RateLimit.consume"))
      }
    })
  )

  /** The library's RateLimiter on the store REDIS_URL selects: Redis, or this process's memory. */
  static readonly Live = RateLimit.layer.pipe(
    Layer.provide(RateLimiter.layer),
    Layer.provide(Layer.unwrapEffect(Effect.map(RedisConfig, Option.match({
      onNone: () => RateLimitStore.memory,
      onSome: RateLimitStore.redis
    }))))
  )
}
