import { RateLimiter } from "@effect/experimental"
import { Duration, Effect, Redacted, Runtime } from "effect"
import { Redis } from "ioredis"
import { StartupError, withoutPassword } from "../Config.ts"
import type { BuiltStore } from "./StoreService.ts"

const prefix = "campaign-api:ratelimit:"
// Both keys of a bucket named in KEYS, in one hash slot (`{…}`), as Redis Cluster requires.
const bucketKey = (key: string) => `${prefix}{${key}}`
const refillKey = (key: string) => `${prefix}{${key}}:refill`

/**
 * The token bucket of `@effect/experimental`'s Redis store (same arithmetic), with three changes:
 * the refill key is passed in KEYS (in the bucket's hash slot); both keys expire once the bucket
 * would be full again (in whole milliseconds: `PX` refuses a fraction), so idle keys leave Redis
 * instead of staying forever; and the answer is the same count with the bucket's last refill
 * beside it (as text, all its digits: Redis would cut a number's fraction), for the wait until its next token.
 */
const tokenBucketScript = `
local key = KEYS[1]
local last_refill_key = KEYS[2]
local tokens = tonumber(ARGV[1])
local refill_ms = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local now = tonumber(ARGV[4])
local overflow = ARGV[5] == "1"
local current = tonumber(redis.call("GET", key))
local last_refill = tonumber(redis.call("GET", last_refill_key))

if not current then
  current = limit
  last_refill = now
end

local elapsed = now - last_refill
local refill_amount = math.floor(elapsed / refill_ms)
if refill_amount > 0 then
  current = math.min(current + refill_amount, limit)
  last_refill = last_refill + (refill_amount * refill_ms)
end

local next = current - tokens
local kept = next
if next < 0 and not overflow then
  kept = current
end
local ttl = math.ceil(refill_ms * limit)
redis.call("SET", key, kept, "PX", ttl)
redis.call("SET", last_refill_key, last_refill, "PX", ttl)
return { next, string.format("%.17g", last_refill) }
`

interface RedisWithTokenBucket extends Redis {
  tokenBucket(
    key: string,
    refillKey: string,
    tokens: number,
    refillMillis: number,
    limit: number,
    now: number,
    overflow: 0 | 1
  ): Promise<[next: number, lastRefill: string]>
}

/** Buckets emptied lately, by key: beyond this many, the longest unchanged are dropped. */
const maxEmptied = 10_000

const storeError = (message: string) => (cause: unknown) => new RateLimiter.RateLimitStoreError({ message, cause })

/** How long a start waits for Redis to answer before it is refused. */
const startTimeout = Duration.seconds(5)

/**
 * The library's Redis store creates its ioredis client inside, where no `error` listener can be
 * attached: ioredis then prints a stack to stderr on every reconnect attempt while Redis is down.
 * This store owns its client, so an outage is one warning in the service's log and its end one
 * more, and a command fails at once while disconnected (no offline queue) rather than waiting:
 * the rate limit then fails open (see RateLimit). At start, though, a Redis that does not answer
 * refuses the start with one sentence, as an unreachable PostgreSQL does (docs/integrators.md, Rate limiting):
 * a mistyped REDIS_URL would otherwise be a server with no rate limit at all.
 */
export const makeRedis = (url: Redacted.Redacted<string>) =>
  Effect.gen(function*() {
    const runtime = yield* Effect.runtime<never>()
    const log = (effect: Effect.Effect<void>) => Runtime.runFork(runtime)(effect)
    const redis = yield* Effect.acquireRelease(
      Effect.sync(() =>
        new Redis(Redacted.value(url), {
          enableOfflineQueue: false,
          maxRetriesPerRequest: 0,
          commandTimeout: 500,
          connectTimeout: 1000,
          // Try again soon and often: limits resume within a second of Redis coming back.
          retryStrategy: (attempt) => Math.min(attempt * 100, 1000)
        }) as RedisWithTokenBucket
      ),
      (redis) => Effect.promise(() => redis.quit().catch(() => redis.disconnect()))
    )
    redis.defineCommand("tokenBucket", { lua: tokenBucketScript, numberOfKeys: 2 })
    // An outage begins with an error (no connection could be made, or a command failed) or a lost
    // connection, and ends when a command succeeds again; closing the client at shutdown is neither,
    // and before Redis first answered there is no outage: the start is refused instead.
    let started = false
    let down = false
    let closing = false
    const lost = (why: string) => {
      if (!started || down || closing) return
      down = true
      log(
        Effect.logWarning(
          "the rate limiter's Redis does not answer: requests are served without limits until it does",
          {
            error: why
          }
        )
      )
    }
    const answered = () => {
      if (!down) return
      down = false
      log(Effect.logInfo("the rate limiter's Redis answers again: limits apply"))
    }
    redis.on("error", (error: Error) => lost(error.message))
    redis.on("close", () => lost("connection closed"))
    redis.on("ready", answered)
    yield* Effect.addFinalizer(() => Effect.sync(() => (closing = true)))
    const unreachable = (why: string) =>
      new StartupError({
        variable: "REDIS_URL",
        message: `REDIS_URL=${
          withoutPassword(Redacted.value(url))
        } cannot be reached (${why}): start Redis or correct the URL.`
      })
    // The server listens once Redis answers; its first error, or no answer at all, refuses the start.
    yield* Effect.async<void, StartupError>((resume) => {
      if (redis.status === "ready") return resume(Effect.void)
      const ready = () => resume(Effect.void)
      const failed = (error: Error) => resume(Effect.fail(unreachable(error.message)))
      redis.once("ready", ready)
      redis.once("error", failed)
      return Effect.sync(() => {
        redis.off("ready", ready)
        redis.off("error", failed)
      })
    }).pipe(
      Effect.timeoutFail({
        duration: startTimeout,
        onTimeout: () => unreachable(`no answer within ${Duration.format(startTimeout)}`)
      })
    )
    started = true
    // The last refill of each bucket that a call just emptied (its answer carries it), so that the
    // wait until its next token (RateLimit asks for it only then) costs no second round trip.
    const emptiedAt = new Map<string, number>()
    const store = RateLimiter.RateLimiterStore.of({
      fixedWindow: () =>
        Effect.fail(new RateLimiter.RateLimitStoreError({ message: "this service keeps token buckets only" })),
      tokenBucket: (options) =>
        Effect.clockWith((clock) =>
          Effect.tryPromise({
            try: async () => {
              const [next, lastRefill] = await redis.tokenBucket(
                bucketKey(options.key),
                refillKey(options.key),
                options.tokens,
                Duration.toMillis(options.refillRate),
                options.limit,
                clock.unsafeCurrentTimeMillis(),
                options.allowOverflow ? 1 : 0
              )
              if (next <= 0) {
                emptiedAt.delete(options.key)
                emptiedAt.set(options.key, Number(lastRefill))
                if (emptiedAt.size > maxEmptied) emptiedAt.delete(emptiedAt.keys().next().value!)
              }
              return next
            },
            catch: storeError("the token bucket command failed")
          }).pipe(
            Effect.tapBoth({
              onFailure: (error) =>
                Effect.sync(() => lost(String((error.cause as Error | undefined)?.message ?? error.message))),
              onSuccess: () => Effect.sync(answered)
            })
          )
        )
    })
    return {
      library: store,
      service: {
        kind: "redis",
        connected: () => redis.status === "ready" && !down,
        untilNextToken: (key, refillMillis, now) =>
          Effect.suspend(() => {
            // Kept after it is read: concurrent requests of one key each read it after their call.
            const lastRefill = emptiedAt.get(key)
            if (lastRefill !== undefined) return Effect.succeed(lastRefill + refillMillis - now)
            // Dropped from the map (or never there): asked of Redis.
            return Effect.tryPromise({
              try: () => redis.get(refillKey(key)),
              catch: storeError("reading the bucket's last refill failed")
            }).pipe(Effect.map((read) => read === null ? 0 : Number(read) + refillMillis - now))
          })
      }
    } satisfies BuiltStore
  })
