import { RateLimiter } from "@effect/experimental"
import { Context, Duration, Effect, Layer, Option } from "effect"
import { AppConfig, RedisConfig } from "./Config.ts"
import type { RateLimitPolicy } from "./Domain/ApiKey.ts"
import { RateLimitStore } from "./RateLimit/Store.ts"
import { spans } from "./Spans.ts"

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
 * Redis (REDIS_URL); the memory store's buckets are charged directly, with the library's arithmetic
 * (`RateLimit/Store.ts`). When Redis does not answer, requests are served without a limit (fail open):
 * an outage of the limiter's store must not become an outage of the API.
 */
export class RateLimit extends Context.Tag("RateLimit")<RateLimit, {
  /** The server's limit (RATE_LIMIT_MAX per RATE_LIMIT_WINDOW_SECONDS): every key's without one of its own. */
  readonly policy: RateLimitPolicy
  /** Charges one request to the key's bucket, under its own limit when it has one. */
  readonly consume: (keyId: string, own?: RateLimitPolicy | null) => Effect.Effect<RateLimitDecision>
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
      const policy: RateLimitPolicy = {
        max: rateLimit.max,
        windowSeconds: Math.round(Duration.toSeconds(rateLimit.window))
      }

      /**
       * How one limit charges: the library's token bucket under its numbers. A key's own limit has
       * a bucket of its own, named with its numbers, so a changed limit starts full at its new
       * size rather than carrying tokens counted under the old one.
       */
      const chargeUnder = (limit: RateLimitPolicy, bucketOf: (keyId: string) => string) => {
        const window = Duration.seconds(limit.windowSeconds)
        const refillMillis = Duration.toMillis(window) / limit.max
        const charge = { algorithm: "token-bucket", onExceeded: "fail", window, limit: limit.max } as const
        // While the store does not answer: no limit, and the full budget in the headers.
        const unlimited: RateLimitDecision = { allowed: true, remaining: limit.max, retryAfterSeconds: 0 }
        // The library's retryAfter is always a whole refill interval; the store knows when the
        // bucket's next token comes, and is asked only once the bucket is empty.
        const emptied = (bucket: string, allowed: boolean) =>
          Effect.map(
            store.untilNextToken(bucket, refillMillis, clock.unsafeCurrentTimeMillis()),
            (millis): RateLimitDecision => ({
              allowed,
              remaining: 0,
              retryAfterSeconds: Math.max(1, Math.ceil(millis / 1000))
            })
          ).pipe(Effect.orElseSucceed(() => unlimited))
        const buckets = store.inProcess
        if (buckets !== undefined) {
          // The memory store, charged in one step: the library's own arithmetic for its refill
          // interval, and its answer read as it reads it (`remaining` below 0 is exceeded). That
          // interval is a Duration's, and differs from `refillMillis` in its last digits where the
          // window does not divide by the limit: each is kept where the library path used it.
          const refillRateMillis = Duration.toMillis(Duration.unsafeDivide(window, limit.max))
          return (keyId: string) =>
            Effect.sync((): RateLimitDecision => {
              const bucket = bucketOf(keyId)
              const now = clock.unsafeCurrentTimeMillis()
              const remaining = buckets.take(bucket, limit.max, refillRateMillis, now)
              if (remaining > 0) return { allowed: true, remaining, retryAfterSeconds: 0 }
              const millis = buckets.untilNextToken(bucket, refillMillis, now)
              return {
                allowed: remaining === 0,
                remaining: 0,
                retryAfterSeconds: Math.max(1, Math.ceil(millis / 1000))
              }
            })
        }
        return (keyId: string) => {
          const bucket = bucketOf(keyId)
          return Effect.matchEffect(limiter.consume({ ...charge, key: bucket }), {
            onSuccess: (result) =>
              result.remaining > 0
                ? Effect.succeed<RateLimitDecision>({
                  allowed: true,
                  remaining: result.remaining,
                  retryAfterSeconds: 0
                })
                : emptied(bucket, true),
            // Exceeded: refused. Otherwise the store does not answer (its outage is logged once,
            // by the store): fail open.
            onFailure: (error) => error.reason === "Exceeded" ? emptied(bucket, false) : Effect.succeed(unlimited)
          })
        }
      }
      const serverWide = chargeUnder(policy, (keyId) => keyId)
      // A key's own limit: its charge made once and found from the limit's object (ApiKeys keeps
      // one per distinct limit). Equal numbers name the same bucket whichever object carries them.
      const ownCharges = new WeakMap<RateLimitPolicy, (keyId: string) => Effect.Effect<RateLimitDecision>>()
      const chargeOwn = (own: RateLimitPolicy) => {
        let charge = ownCharges.get(own)
        if (charge === undefined) {
          const name = `${own.max}/${own.windowSeconds}`
          ownCharges.set(own, charge = chargeUnder(own, (keyId) => `${keyId}:${name}`))
        }
        return charge
      }
      const consumeSpan = span("RateLimit.consume")
      return {
        policy,
        status: () => store.kind === "memory" ? "memory" : store.connected() ? "redis" : "degraded",
        consume: (keyId, own) => consumeSpan(own == null ? serverWide(keyId) : chargeOwn(own)(keyId))
      }
    })
  )

  /** The library's RateLimiter on the store REDIS_URL selects: Redis, or this process's memory. */
  static readonly Live = RateLimit.layer.pipe(
    Layer.provide(RateLimiter.layer),
    Layer.provide(Layer.unwrapEffect(Effect.map(
      RedisConfig,
      Option.match({
        onNone: () => RateLimitStore.memory,
        onSome: RateLimitStore.redis
      })
    )))
  )
}
