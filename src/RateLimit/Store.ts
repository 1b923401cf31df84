import { RateLimiter } from "@effect/experimental"
import { Context, Duration, Effect, Layer, type Redacted } from "effect"
import type { BuiltStore, InProcessBuckets, RateLimitStoreService } from "./StoreService.ts"

/**
 * Where the token buckets live, beside the library's `RateLimiterStore` that the RateLimiter
 * consumes from (StoreService.ts says what it answers).
 */
export class RateLimitStore extends Context.Tag("RateLimit/RateLimitStore")<RateLimitStore, RateLimitStoreService>() {
  /**
   * This process's memory: a token bucket per key, with the arithmetic of the library's in-process
   * store (`RateLimiter.layerStoreMemory`), kept here so that RateLimit charges it in one step
   * (`inProcess`) instead of through the RateLimiter's effects, which were 15 % of a whoami's time in
   * process and 2.8 KB of what it allocated (bench/BENCHMARKS.md, The heap's contents and a limiter of the service's own). The
   * RateLimiter is given the same buckets, and a test holds the charges to the library's own store.
   * Each bucket refills on a fixed schedule from the moment it was first seen, which says when its
   * next token comes.
   */
  static readonly memory = Layer.effectContext(Effect.gen(function*() {
    const library = yield* Effect.provide(RateLimiter.RateLimiterStore, RateLimiter.layerStoreMemory)
    const clock = yield* Effect.clock
    const buckets = new Map<string, { tokens: number; lastRefill: number; readonly firstSeen: number }>()
    const take: InProcessBuckets["take"] = (key, limit, refillMillis, now, tokens = 1, overflow) => {
      let bucket = buckets.get(key)
      if (bucket === undefined) {
        buckets.set(key, bucket = { tokens: limit, lastRefill: now, firstSeen: now })
      } else {
        const refilled = Math.floor((now - bucket.lastRefill) / refillMillis)
        if (refilled > 0) {
          bucket.tokens = Math.min(limit, bucket.tokens + refilled)
          bucket.lastRefill += refilled * refillMillis
        }
      }
      const left = bucket.tokens - tokens
      if (overflow === true || left >= 0) bucket.tokens = left
      return left
    }
    const untilNextToken: InProcessBuckets["untilNextToken"] = (key, refillMillis, now) =>
      refillMillis - ((now - (buckets.get(key)?.firstSeen ?? now)) % refillMillis)
    const store = RateLimiter.RateLimiterStore.of({
      ...library,
      tokenBucket: (options) =>
        Effect.sync(() =>
          take(
            options.key,
            options.limit,
            Duration.toMillis(options.refillRate),
            clock.unsafeCurrentTimeMillis(),
            options.tokens,
            options.allowOverflow
          )
        )
    })
    return contextOf({
      library: store,
      service: {
        kind: "memory",
        connected: () => true,
        inProcess: { take, untilNextToken },
        untilNextToken: (key, refillMillis, now) => Effect.sync(() => untilNextToken(key, refillMillis, now))
      }
    })
  }))

  /**
   * Redis at `url`, shared by every instance. Its client is loaded only when REDIS_URL is set:
   * the single instance does not pay for ioredis at start (docs/contributing.md, Layout).
   */
  static readonly redis = (url: Redacted.Redacted<string>) =>
    Layer.unwrapEffect(
      Effect.map(
        Effect.promise(() => import("./RedisStore.ts")),
        ({ makeRedis }) => Layer.scopedContext(Effect.map(makeRedis(url), contextOf))
      )
    )
}

/** Both stores under their tags, for the RateLimiter and for RateLimit. */
const contextOf = ({ library, service }: BuiltStore) =>
  Context.make(RateLimiter.RateLimiterStore, library).pipe(Context.add(RateLimitStore, service))
