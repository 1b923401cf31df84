import { HttpApiBuilder, HttpApiScalar } from "@effect/platform"
import { Layer } from "effect"
import { Activations } from "./Activations.ts"
import { ActivationsRepo } from "./Activations/ActivationsRepo.ts"
import { ApiKeys } from "./ApiKeys.ts"
import { ApiKeysRepo } from "./ApiKeys/ApiKeysRepo.ts"
import { AppConfig } from "./Config.ts"
import { GroupCommit } from "./Database/GroupCommit.ts"
import { SqlServerLive } from "./Database/Sql.ts"
import { ApiLive, ApiMiddlewareLive, documentRoutes } from "./Http.ts"
import { Idempotency } from "./Idempotency.ts"
import { IdempotencyRepo } from "./Idempotency/IdempotencyRepo.ts"
import { Ids } from "./Ids.ts"
import { RateLimit } from "./RateLimit.ts"
import { TracingLive } from "./Tracing.ts"
import { WebServerLive } from "./WebServer.ts"

const ReposLive = Layer.mergeAll(ApiKeysRepo.Live, ActivationsRepo.Live, IdempotencyRepo.Live)

/** Every service the API calls, on the SQLite database. */
export const ServicesLive = Layer.mergeAll(ApiKeys.Live, Activations.Live, Idempotency.Live, RateLimit.Live).pipe(
  Layer.provideMerge(Layer.merge(ReposLive, GroupCommit.Live)),
  Layer.provideMerge(SqlServerLive),
  Layer.provideMerge(Layer.mergeAll(Ids.Live, AppConfig.Live))
)

/** The HTTP server: the API on Bun, with the services it needs. */
export const HttpLive = WebServerLive.pipe(
  Layer.provide([
    ApiMiddlewareLive,
    HttpApiBuilder.middlewareOpenApi({ path: documentRoutes.openApi }),
    HttpApiScalar.layer({ path: documentRoutes.docs, scalar: { withDefaultFonts: false } })
  ]),
  Layer.provide(ApiLive),
  Layer.provide(ServicesLive),
  Layer.provide(TracingLive)
)
