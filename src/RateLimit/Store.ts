import { RateLimiter } from "@effect/experimental"
import { Context, Effect, Layer, type Redacted } from "effect"
import type { BuiltStore, RateLimitStoreService } from "./StoreService.ts"

/**
 * Where the token buckets live, beside the library's `RateLimiterStore` that the RateLimiter
 * consumes from (StoreService.ts says what it answers).
 */
export class RateLimitStore extends Context.Tag("RateLimit/RateLimitStore")<RateLimitStore, RateLimitStoreService>() {
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
    return contextOf({
      library: store,
      service: {
        kind: "memory",
        connected: () => true,
        untilNextToken: (key, refillMillis, now) =>
          Effect.succeed(refillMillis - ((now - (firstSeen.get(key) ?? now)) % refillMillis))
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
