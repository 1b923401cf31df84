import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect, Layer, Option } from "effect"
import { Activations } from "./Activations.ts"
import { ActivationsRepo } from "./Activations/ActivationsRepo.ts"
import { ActivationsHandlers } from "./Activations/Http.ts"
import { JsonBodyLive } from "./Activations/JsonBody.ts"
import { Analytics } from "./Analytics.ts"
import { AnalyticsHandlers } from "./Analytics/Http.ts"
import { CampaignApi } from "./Api.ts"
import { ApiKeys } from "./ApiKeys.ts"
import { ApiKeysRepo } from "./ApiKeys/ApiKeysRepo.ts"
import { keysMiddlewareOf } from "./ApiKeys/Http.ts"
import { KeyUsage } from "./ApiKeys/KeyUsage.ts"
import { AppConfig, checkedFirst, DatabaseConfig, RedisConfig, ServeConfig } from "./Config.ts"
import { GroupCommit } from "./Database/GroupCommit.ts"
import { DatabaseOutage } from "./Database/Outage.ts"
import { DatabaseInUse, SqlServerLive } from "./Database/Sql.ts"
import { Draining } from "./Draining.ts"
import { documentHandlers } from "./Edge/Documents.ts"
import type { EdgeOptions } from "./Edge/Edge.ts"
import { Listener, WebServerLive } from "./Edge/WebServer.ts"
import { allHandlers, groupsLive, type HandlersOf } from "./Handlers.ts"
import { HealthRepo } from "./Health/HealthRepo.ts"
import { HealthHandlers } from "./Health/Http.ts"
import { Idempotency } from "./Idempotency.ts"
import { RequireIdempotencyKeyLive } from "./Idempotency/Http.ts"
import { IdempotencyRepo } from "./Idempotency/IdempotencyRepo.ts"
import { IdentityHandlers } from "./Identity/Http.ts"
import { Ids } from "./Ids.ts"
import { logAtStart } from "./Logging.ts"
import { MetricsLive } from "./Metrics.ts"
import { RateLimit } from "./RateLimit.ts"
import { TracingLive } from "./Tracing.ts"
import { type Copy, Warming, WarmUpBegins, WarmUpRuns } from "./WarmUp.ts"

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
    // Before the database: a start refused for a REDIS_URL that does not answer opens none (docs/operators.md, Configuration).
    Layer.provideMerge(RateLimit.Live),
    Layer.provideMerge(Layer.mergeAll(ids, AppConfig.Live, Draining.Live, Warming.Live, DatabaseOutage.Live))
  )

export const ServicesLive = servicesWith(Ids.Live)

/**
 * The start-up log names the database in use, and what this start created of it (docs/operators.md,
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
export const MiddlewareLive = Layer.mergeAll(keysMiddlewareOf(CampaignApi), RequireIdempotencyKeyLive, JsonBodyLive)

/** Each group's handlers, written beside its feature: the one record both servers are made of. */
const handlers = {
  activations: ActivationsHandlers,
  analytics: AnalyticsHandlers,
  identity: IdentityHandlers,
  health: HealthHandlers,
  documents: documentHandlers(CampaignApi)
} satisfies HandlersOf<typeof CampaignApi>

/**
 * The API as HttpApiBuilder serves it, from the same handlers and middleware as the edge: what
 * the differential test serves through the library's own web handler (docs/contributing.md, Tests).
 */
export const ApiLive = HttpApiBuilder.api(CampaignApi).pipe(
  Layer.provide(groupsLive(CampaignApi, handlers)),
  Layer.provide(MiddlewareLive)
)

/**
 * What the edge serves: the definition and the handler of each endpoint, the same record the
 * groups of `ApiLive` are made of (docs/contributing.md, Layout: the request path).
 */
export const EdgeLive = Effect.gen(function*() {
  const options: EdgeOptions<typeof CampaignApi> = {
    api: CampaignApi,
    handlers: yield* allHandlers(CampaignApi, handlers),
    // With the rate limits on Redis every request waits on it, and on PostgreSQL every read waits on
    // the pool: then none is answered synchronously. On SQLite with the limits in memory, no GET waits.
    synchronousGets: Option.isNone(yield* RedisConfig) && (yield* DatabaseConfig)._tag === "sqlite"
  }
  return options
})

/** The server's own layers again, on the Unix socket given: the warm-up's private copy (`WarmUp.ts`). */
const copy: Copy = (socket) =>
  WebServerLive(EdgeLive).pipe(
    Layer.provide(Listener.unixSocket(socket)),
    Layer.provide(MiddlewareLive),
    Layer.provideMerge(ServicesLive)
  )

/** The HTTP server: the API on Bun, with the services it needs. */
export const ServerLive = Layer.merge(DatabaseAnnounced, WarmUpRuns(copy)).pipe(
  Layer.provideMerge(WebServerLive(EdgeLive)),
  Layer.provideMerge(WarmUpBegins),
  Layer.provide(MiddlewareLive),
  Layer.provide(ServicesLive),
  // Bound before the services open the database: a start refused for HOST or PORT opens none
  // (docs/operators.md, Configuration).
  Layer.provide(Listener.Live),
  // Built before the services and the server, which ask for it once each; its listener outlives
  // the server's drain.
  Layer.provide(MetricsLive),
  Layer.provide(TracingLive),
  checkedFirst(ServeConfig)
)
