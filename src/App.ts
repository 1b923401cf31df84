import { HttpApiBuilder } from "@effect/platform"
import { ConfigProvider, Duration, Effect, FiberRef, HashSet, Layer, Option } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Activations } from "./Activations.ts"
import { ActivationsRepo } from "./Activations/ActivationsRepo.ts"
import { ActivationsHandlers, ActivationsLive } from "./Activations/Http.ts"
import { JsonBodyLive } from "./Activations/JsonBody.ts"
import { Analytics } from "./Analytics.ts"
import { AnalyticsHandlers, AnalyticsLive } from "./Analytics/Http.ts"
import { CampaignApi } from "./Api.ts"
import { ApiKeys } from "./ApiKeys.ts"
import { ApiKeysRepo } from "./ApiKeys/ApiKeysRepo.ts"
import { ApiKeysMiddlewareLive } from "./ApiKeys/Http.ts"
import { KeyUsage } from "./ApiKeys/KeyUsage.ts"
import {
  AppConfig,
  checkedFirst,
  DatabaseConfig,
  KeysConfig,
  RedisConfig,
  ServeConfig,
  WarmUpConfig
} from "./Config.ts"
import { GroupCommit } from "./Database/GroupCommit.ts"
import { DatabaseOutage } from "./Database/Outage.ts"
import { DatabaseInUse, SqlExistingLive, SqlLive, SqlServerLive } from "./Database/Sql.ts"
import type { BrandId } from "./Domain/ApiKey.ts"
import { Draining } from "./Draining.ts"
import type { EdgeOptions } from "./Edge/Edge.ts"
import { Listener, WebServerLive } from "./Edge/WebServer.ts"
import { HealthRepo } from "./Health/HealthRepo.ts"
import { HealthHandlers, HealthLive } from "./Health/Http.ts"
import { Idempotency } from "./Idempotency.ts"
import { RequireIdempotencyKeyLive } from "./Idempotency/Http.ts"
import { IdempotencyRepo } from "./Idempotency/IdempotencyRepo.ts"
import { IdentityHandlers, IdentityLive } from "./Identity/Http.ts"
import { Ids } from "./Ids.ts"
import { logAtStart, UnwrittenAccessLines } from "./Logging.ts"
import { MetricsLive, MetricsOff } from "./Metrics.ts"
import { RateLimit } from "./RateLimit.ts"
import { TracingLive } from "./Tracing.ts"
import { removeStaleWarmUps, Warming, warmUpBrand, warmUpDirectoryPrefix, warmUpRequests } from "./WarmUp.ts"

/**
 * The wiring, in one place: which live layer stands behind each service. Tests build the same
 * services from test layers instead.
 */

const ReposLive = Layer.mergeAll(ApiKeysRepo.Live, ActivationsRepo.Live, IdempotencyRepo.Live, HealthRepo.Live)

/**
 * Every service the API calls, on the database DATABASE_URL names, with its ids and secrets from
 * `ids` (the differential test's are predictable).
 */
export const servicesWith = <E>(ids: Layer.Layer<Ids, E>) =>
  Layer.mergeAll(Activations.Live, Analytics.Live, Idempotency.Live).pipe(
    Layer.provideMerge(Layer.mergeAll(ApiKeys.Live, KeyUsage.Live)),
    Layer.provideMerge(Layer.merge(ReposLive, GroupCommit.Live)),
    Layer.provideMerge(SqlServerLive),
    // Before the database: a start refused for a REDIS_URL that does not answer opens none (README, Configuration).
    Layer.provideMerge(RateLimit.Live),
    Layer.provideMerge(Layer.mergeAll(ids, AppConfig.Live, Draining.Live, Warming.Live, DatabaseOutage.Live))
  )

export const ServicesLive = servicesWith(Ids.Live)

/**
 * The start-up log names the database in use, and what this start created of it (README,
 * Configuration); once the server listens, so that a start refused for its address or port says
 * that one sentence and nothing else.
 */
const DatabaseAnnounced = Layer.effectDiscard(
  Effect.flatMap(
    DatabaseInUse,
    ({ created, createdDirectory, name }) =>
      logAtStart(created ? "created a new database" : "database", {
        database: name,
        ...(createdDirectory === undefined ? {} : { createdDirectory })
      })
  )
)

/** The implementation of every middleware the definition declares, on the services. */
export const MiddlewareLive = Layer.mergeAll(ApiKeysMiddlewareLive, RequireIdempotencyKeyLive, JsonBodyLive)

/**
 * The API as HttpApiBuilder serves it, from the same handlers and middleware as the edge: what
 * the differential test serves through the library's own web handler (README, Tests).
 */
export const ApiLive = HttpApiBuilder.api(CampaignApi).pipe(
  Layer.provide([ActivationsLive, AnalyticsLive, IdentityLive, HealthLive]),
  Layer.provide(MiddlewareLive)
)

/**
 * What the edge serves: the definition and the handler of each endpoint, the same functions the
 * groups of `ApiLive` are made of (README, Layout: the request path).
 */
export const EdgeLive = Effect.gen(function*() {
  const options: EdgeOptions<typeof CampaignApi> = {
    api: CampaignApi,
    handlers: {
      activations: yield* ActivationsHandlers,
      analytics: yield* AnalyticsHandlers,
      identity: yield* IdentityHandlers,
      health: yield* HealthHandlers
    },
    // With the rate limits on Redis every request waits on it, and on PostgreSQL every read waits on
    // the pool: then none is answered synchronously. On SQLite with the limits in memory, no GET waits.
    synchronousGets: Option.isNone(yield* RedisConfig) && (yield* DatabaseConfig)._tag === "sqlite"
  }
  return options
})

/**
 * The warm-up's private listener: a Unix socket in a directory of its own that only this user may
 * enter (mkdtemp makes it 0700), removed with everything in it when the warm-up is done, and by the
 * next start should the server be killed before that (`removeStaleWarmUps`). No other
 * user's process can reach the copy, and a fetch over a Unix socket never goes through the proxy
 * HTTP_PROXY names (Bun's fetch proxies loopback addresses too).
 */
const privateSocket = Effect.acquireRelease(
  Effect.sync(() => {
    removeStaleWarmUps(tmpdir())
    return mkdtempSync(warmUpDirectoryPrefix(tmpdir()))
  }),
  (directory) => Effect.sync(() => rmSync(directory, { recursive: true, force: true }))
).pipe(Effect.map((directory) => join(directory, "copy.sock")))

/**
 * The warm-up (README, Operating it: Start-up): the request path run on a private copy of the
 * service, the same layers on an in-memory database of their own (a fresh build: `Effect.provide`
 * memoizes nothing of the server's) behind a `Bun.serve` of their own on a private Unix socket, so
 * that its requests take the server's own path (Bun's router, the edge's handlers for each route)
 * with the requests Bun makes; with a key of its own, metrics off, access lines made and dropped,
 * every other log line dropped and no span. Nothing of it reaches the server's database, log,
 * metrics, traces or the network; the copy, its listener and its socket are gone when it is done.
 */
const warmUp = Effect.gen(function*() {
  const socket = yield* privateSocket
  const keys = yield* ApiKeys
  const { apiKey } = yield* keys.create({
    brandId: warmUpBrand as BrandId,
    scopes: ["campaigns:read", "campaigns:write", "analytics:read"],
    name: Option.none(),
    expiresIn: Option.none()
  })
  yield* Layer.build(WebServerLive(EdgeLive).pipe(Layer.provide(Listener.unixSocket(socket))))
  return yield* warmUpRequests(socket, apiKey)
}).pipe(
  Effect.scoped,
  Effect.provide(MiddlewareLive),
  Effect.provide(ServicesLive),
  Effect.provide(Layer.merge(MetricsOff, UnwrittenAccessLines)),
  Effect.withConfigProvider(ConfigProvider.fromMap(
    new Map([
      ["DATABASE_URL", ":memory:"],
      ["RATE_LIMIT_MAX", "1000000000"],
      ["SHUTDOWN_DELAY_SECONDS", "0"]
    ])
  )),
  Effect.locally(FiberRef.currentLoggers, HashSet.empty()),
  Effect.withTracerEnabled(false)
)

const warmUpAfter = Duration.millis(50)

/** With WARM_UP on, readiness waits for the warm-up from before the server listens. */
const WarmUpBegins = Layer.effectDiscard(Effect.gen(function*() {
  if (yield* WarmUpConfig) (yield* Warming).begin()
}))

/**
 * The warm-up, from `warmUpAfter` after the server listens: a first request, often the very moment
 * the port opens, is answered before the copy is built (tens of milliseconds on the event loop), and
 * clients are answered between its rounds; readiness after.
 */
const WarmUpRuns = Layer.scopedDiscard(Effect.gen(function*() {
  const warming = yield* Warming
  if (!warming.pending()) return
  yield* Effect.delay(warmUp, warmUpAfter).pipe(
    // The copy, closed, is garbage: collected now, while no client is owed an answer, rather than in
    // a pause of the first seconds of traffic.
    Effect.zipLeft(Effect.sync(() => Bun.gc(true))),
    Effect.timed,
    Effect.flatMap(([took, rounds]) =>
      Effect.logInfo("warmed up", { rounds, milliseconds: Math.round(Duration.toMillis(took)) })
    ),
    // Whatever went wrong in the copy, the server itself is as it was: it is ready without the warm-up.
    Effect.catchAllCause((cause) => Effect.logWarning("the warm-up failed; ready without it", cause)),
    Effect.ensuring(Effect.sync(warming.end)),
    Effect.forkScoped
  )
}))

/** The HTTP server: the API on Bun, with the services it needs. */
export const ServerLive = Layer.merge(DatabaseAnnounced, WarmUpRuns).pipe(
  Layer.provideMerge(WebServerLive(EdgeLive)),
  Layer.provideMerge(WarmUpBegins),
  Layer.provide(MiddlewareLive),
  Layer.provide(ServicesLive),
  // Bound before the services open the database: a start refused for HOST or PORT opens none
  // (README, Configuration).
  Layer.provide(Listener.Live),
  // Built before the services and the server, which ask for it once each; its listener outlives
  // the server's drain.
  Layer.provide(MetricsLive),
  Layer.provide(TracingLive),
  checkedFirst(ServeConfig)
)

const keysOn = <E, R>(sql: Layer.Layer<Layer.Layer.Success<typeof SqlLive>, E, R>) =>
  ApiKeys.Live.pipe(
    Layer.provide(ApiKeysRepo.Live),
    Layer.provide(sql),
    Layer.provide(Ids.Live),
    checkedFirst(KeysConfig)
  )

/**
 * The key store alone, on the server's database: for `keys create` (and the tests), which makes a
 * new SQLite database where there is none.
 */
export const KeysLive = keysOn(SqlLive)

/** The same for the other key commands, which refuse a database that is not there (README, The key command line). */
export const KeysOfExistingLive = keysOn(SqlExistingLive)
