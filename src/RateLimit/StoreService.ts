import type { RateLimiter } from "@effect/experimental"
import type { Context, Effect } from "effect"

/**
 * What the RateLimit headers need of the store that the library's result does not carry, and
 * whether the store answers: the service of `RateLimitStore` (Store.ts), apart from its tag so
 * that the Redis store, loaded only when configured, builds one without importing the tag's file.
 */
export interface RateLimitStoreService {
  readonly kind: "memory" | "redis"
  /** Whether the store answers now (the memory store always does). */
  readonly connected: () => boolean
  /** The memory store's buckets, charged without an effect; undefined on Redis, asked through the library. */
  readonly inProcess?: InProcessBuckets
  /** Milliseconds until the key's bucket gains its next token, as the store has it. */
  readonly untilNextToken: (
    key: string,
    refillMillis: number,
    now: number
  ) => Effect.Effect<number, RateLimiter.RateLimitStoreError>
}

/** A store as it is built: the library's store the RateLimiter consumes from, and this service beside it. */
export interface BuiltStore {
  readonly library: Context.Tag.Service<RateLimiter.RateLimiterStore>
  readonly service: RateLimitStoreService
}

/** Token buckets in this process, with the arithmetic of the library's in-process store. */
export interface InProcessBuckets {
  /**
   * `tokens` (1) taken from the key's bucket of `limit`, which gains one every `refillMillis`,
   * unless too few are left (with `overflow`, taken all the same); what is left after the charge,
   * below 0 when refused: the library's `tokenBucket` answer.
   */
  readonly take: (
    key: string,
    limit: number,
    refillMillis: number,
    now: number,
    tokens?: number,
    overflow?: boolean
  ) => number
  /** Milliseconds until the key's bucket gains its next token. */
  readonly untilNextToken: (key: string, refillMillis: number, now: number) => number
}
