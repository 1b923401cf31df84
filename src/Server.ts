import { HttpApiBuilder, HttpServer } from "@effect/platform"
import { BunHttpServer } from "@effect/platform-bun"
import { Effect, Layer } from "effect"
import { Activations } from "./Activations.ts"
import { ActivationsRepo } from "./Activations/ActivationsRepo.ts"
import { ApiKeys } from "./ApiKeys.ts"
import { ApiKeysRepo } from "./ApiKeys/ApiKeysRepo.ts"
import { AppConfig, ServerConfig } from "./Config.ts"
import { SqlLive } from "./Database/Sql.ts"
import { ApiLive, ErrorEnvelopeLive } from "./Http.ts"
import { Idempotency } from "./Idempotency.ts"
import { IdempotencyRepo } from "./Idempotency/IdempotencyRepo.ts"
import { Ids } from "./Ids.ts"
import { maxBodyBytes } from "./Middleware/Http.ts"
import { RateLimit } from "./RateLimit.ts"

const ReposLive = Layer.mergeAll(ApiKeysRepo.Live, ActivationsRepo.Live, IdempotencyRepo.Live)

/** Every service the API calls, on the SQLite database. */
export const ServicesLive = Layer.mergeAll(ApiKeys.Live, Activations.Live, Idempotency.Live, RateLimit.Live).pipe(
  Layer.provideMerge(ReposLive),
  Layer.provideMerge(SqlLive),
  Layer.provideMerge(Layer.mergeAll(Ids.Live, AppConfig.Live))
)

const BunServerLive = Layer.unwrapEffect(
  Effect.map(ServerConfig, ({ host, port }) =>
    BunHttpServer.layer({
      hostname: host,
      port,
      // A hard ceiling far above the 16 KiB contract limit, so an endless body cannot fill memory.
      maxRequestBodySize: maxBodyBytes * 64
    }))
)

/** The HTTP server: the API on Bun's server, with the services it needs. */
export const HttpLive = HttpApiBuilder.serve().pipe(
  Layer.provide(ErrorEnvelopeLive),
  Layer.provide(ApiLive),
  HttpServer.withLogAddress,
  Layer.provide(ServicesLive),
  Layer.provide(BunServerLive)
)
