import { Effect, Layer } from "effect"
import { Activations } from "./Activations.ts"
import { ActivationsRepo } from "./Activations/ActivationsRepo.ts"
import { ApiKeys } from "./ApiKeys.ts"
import { ApiKeysRepo } from "./ApiKeys/ApiKeysRepo.ts"
import { Authentication } from "./ApiKeys/Authentication.ts"
import { AppConfig, checkedFirst, KeysConfig, ServeConfig } from "./Config.ts"
import { GroupCommit } from "./Database/GroupCommit.ts"
import { DatabaseInUse, SqlLive, SqlServerLive } from "./Database/Sql.ts"
import { Draining } from "./Draining.ts"
import { logAtStart } from "./Logging.ts"
import { WebServerLive } from "./Edge/WebServer.ts"
import { Idempotency } from "./Idempotency.ts"
import { IdempotencyRepo } from "./Idempotency/IdempotencyRepo.ts"
import { Ids } from "./Ids.ts"
import { RateLimit } from "./RateLimit.ts"
import { TracingLive } from "./Tracing.ts"

/**
 * The wiring, in one place: which live layer stands behind each service. Tests build the same
 * services from test layers instead.
 */

const ReposLive = Layer.mergeAll(ApiKeysRepo.Live, ActivationsRepo.Live, IdempotencyRepo.Live)

/** Every service the API calls, on the database DATABASE_URL names. */
export const ServicesLive = Layer.mergeAll(Authentication.Live, Activations.Live, Idempotency.Live).pipe(
  Layer.provideMerge(Layer.mergeAll(ApiKeys.Live, RateLimit.Live)),
  Layer.provideMerge(Layer.merge(ReposLive, GroupCommit.Live)),
  Layer.provideMerge(SqlServerLive),
  Layer.provideMerge(Layer.mergeAll(Ids.Live, AppConfig.Live, Draining.Live))
)

/**
 * The start-up log names the database in use, and what this start created of it (README,
 * Configuration); once the server listens, so that a start refused for its address or port says
 * that one sentence and nothing else.
 */
const DatabaseAnnounced = Layer.effectDiscard(Effect.flatMap(DatabaseInUse, ({ created, createdDirectory, name }) =>
  logAtStart(created ? "created a new database" : "database", {
    database: name,
    ...(createdDirectory === undefined ? {} : { createdDirectory })
  })))

/** The HTTP server: the API on Bun, with the services it needs. */
export const ServerLive = DatabaseAnnounced.pipe(
  Layer.provideMerge(WebServerLive),
  Layer.provide(ServicesLive),
  Layer.provide(TracingLive),
  checkedFirst(ServeConfig)
)

/** The key store alone, for the key commands (and the tests) that share the server's database. */
export const KeysLive = ApiKeys.Live.pipe(
  Layer.provide(ApiKeysRepo.Live),
  Layer.provide(SqlLive),
  Layer.provide(Ids.Live),
  checkedFirst(KeysConfig)
)
