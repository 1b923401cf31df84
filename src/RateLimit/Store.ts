import { RateLimiter } from "@effect/experimental"
import { Context, Effect, Layer, type Redacted } from "effect"

/**
 * Where the token buckets live, beside the library's `RateLimiterStore` that the RateLimiter
 * consumes from: what the RateLimit headers need that the library's result does not carry,
 * and whether the store answers.
 */
export class RateLimitStore extends Context.Tag("RateLimit/RateLimitStore")<RateLimitStore, {
  readonly kind: "memory" | "redis"
  /** Whether the store answers now (the memory store always does). */
  readonly connected: () => boolean
  /** Milliseconds until the key's bucket gains its next token, as the store has it. */
  readonly untilNextToken: (
    key: string,
    refillMillis: number,
    now: number
  ) => Effect.Effect<number, RateLimiter.RateLimitStoreError>
}>() {
  /**
   * The library's in-process store. It keeps each bucket's refill clock to itself, so the
   * moment it first saw a key (from which it refills on a fixed schedule) is noted beside it.
   */
  static readonly memory = Layer.effectContext(Effect.gen(function*() {
    const library = yield* Effect.provide(RateLimiter.RateLimiterStore, RateLimiter.layerStoreMemory)
    const firstSeen = new Map<string, number>()
    const clock = yield* Effect.clock
    const store = RateLimiter.RateLimiterStore.of({
      ...library,
      tokenBucket: (options) =>
        Effect.suspend(() => {
          if (!firstSeen.has(options.key)) firstSeen.set(options.key, clock.unsafeCurrentTimeMillis())
          return library.tokenBucket(options)
        })
    })
    return Context.make(RateLimiter.RateLimiterStore, store).pipe(
      Context.add(RateLimitStore, {
        kind: "memory",
        connected: () => true,
        untilNextToken: (key, refillMillis, now) =>
          Effect.succeed(refillMillis - ((now - (firstSeen.get(key) ?? now)) % refillMillis))
      })
    )
  }))

  /**
   * Redis at `url`, shared by every instance. Its client is loaded only when REDIS_URL is set:
   * the single instance does not pay for ioredis at start (README, Layout).
   */
  static readonly redis = (url: Redacted.Redacted<string>) =>
    Layer.unwrapEffect(Effect.map(Effect.promise(() => import("./RedisStore.ts")), ({ makeRedis }) => Layer.scopedContext(makeRedis(url))))
}
