import { HttpApiBuilder, HttpApiError, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import type { HttpApiEndpoint } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Cause, Context, Effect, Layer, Option } from "effect"
import { Activations } from "./Activations.ts"
import { HttpActivationsLive } from "./Activations/Http.ts"
import { DatabaseFile } from "./Database/Sql.ts"
import { isDatabaseUnavailable } from "./Database/SqlErrors.ts"
import { CampaignApi } from "./Api.ts"
import {
  type ApiError,
  errorResponse,
  InternalError,
  MethodNotAllowed,
  NotFound,
  ServiceUnavailable,
  ValidationError,
  wireCodes
} from "./Domain/Errors.ts"
import { HttpHealthLive } from "./Health/Http.ts"
import { HttpIdentityLive } from "./Identity/Http.ts"
import { Idempotency } from "./Idempotency.ts"
import { Ids } from "./Ids.ts"
import { Authentication, JsonBody, RequireCampaignsWrite, RequireIdempotencyKey } from "./Middleware/Api.ts"
import { MiddlewareLive } from "./Middleware/Http.ts"
import { withRequestLog } from "./RequestLog.ts"

/** The OpenAPI document and its docs UI, served beside the API. */
export const documentRoutes = { openApi: "/openapi.json", docs: "/docs" } as const

/** Every route as a pattern, so an unknown method on a known path is 405, not 404. */
const routes = [
  ...Object.values(CampaignApi.groups).flatMap((group) =>
    Object.values(group.endpoints).map((endpoint: HttpApiEndpoint.HttpApiEndpoint.AnyWithProps) => ({
      method: endpoint.method,
      path: endpoint.path
    }))
  ),
  ...Object.values(documentRoutes).map((path) => ({ method: "GET", path }))
].map((route) => ({ ...route, pattern: new RegExp(`^${route.path.replace(/:[^/]+/g, "[^/]+")}/?$`) }))

const allowedMethods = (path: string): ReadonlyArray<string> =>
  routes.filter((route) => route.pattern.test(path)).map((route) => route.method)

const routeOf = (path: string): string => routes.find((route) => route.pattern.test(path))?.path ?? "(unknown)"

const routeNotFound = Effect.gen(function*() {
  const request = yield* HttpServerRequest.HttpServerRequest
  const path = request.url.split("?")[0]!
  const allowed = allowedMethods(path)
  if (allowed.length === 0) {
    return errorResponse(new NotFound({ message: `No route for ${request.method} ${path}.` }))
  }
  // The pattern matches but the router could not decode the path (a stray `%`, say): no route,
  // answered before authentication as the order of checks wants, and never a 405 naming this method.
  if (allowed.includes(request.method)) {
    return errorResponse(new NotFound({ message: `No route for ${request.method} ${path}: it is not validly percent-encoded.` }))
  }
  return HttpServerResponse.setHeader(
    errorResponse(new MethodNotAllowed({ message: `${request.method} is not allowed on ${path}; use ${allowed.join(", ")}.` })),
    "allow",
    allowed.join(", ")
  )
})

type Issue = HttpApiError.HttpApiDecodeError["issues"][number]

/** One sentence naming the field, from the first schema issue. */
const describeIssue = (issue: Issue | undefined): string => {
  if (issue === undefined) return "The request is invalid."
  const field = issue.path.map(String).join(".")
  if (field === "") return "The request body must be a JSON object."
  switch (issue._tag) {
    case "Missing":
      return `${field} is required.`
    case "Unexpected":
      return `${field} is not a known field.`
    default:
      return issue.message.startsWith(field) ? issue.message : `${field}: ${issue.message}`
  }
}

const isApiError = (u: unknown): u is ApiError =>
  typeof u === "object" && u !== null && "_tag" in u && (u._tag as string) in wireCodes

const renderFailure = (cause: Cause.Cause<unknown>) => {
  const failure = Cause.failureOption(cause)
  if (Option.isSome(failure)) {
    const error = failure.value
    if (isApiError(error)) return Effect.succeed(errorResponse(error))
    if (error instanceof HttpApiError.HttpApiDecodeError) {
      return Effect.succeed(errorResponse(new ValidationError({ message: describeIssue(error.issues[0]) })))
    }
    if (typeof error === "object" && error !== null && "_tag" in error && error._tag === "RouteNotFound") {
      return routeNotFound
    }
  }
  // A client that went away: nothing to answer, and an interruption carries no failure.
  if (Cause.isInterruptedOnly(cause)) return Effect.failCause(cause as Cause.Cause<never>)
  const defect = Cause.squash(cause)
  if (isDatabaseUnavailable(defect)) {
    return Effect.as(
      Effect.logWarning("database unavailable", cause),
      errorResponse(new ServiceUnavailable({ message: "The service is temporarily unavailable; retry shortly." }))
    )
  }
  return Effect.as(
    Effect.logError("unexpected failure", cause),
    errorResponse(new InternalError({ message: "An unexpected error occurred." }))
  )
}

/**
 * Every failure, declared or not (decode failures, unknown routes, defects), leaves as
 * the envelope here, so the access log sees the final status of every request.
 * Declared errors render to the same bytes as their endpoint's error schema.
 */
export const ApiMiddlewareLive = HttpApiBuilder.middleware(
  Effect.map(Ids, (ids) => (app) =>
    withRequestLog(Effect.catchAllCause(app, renderFailure), routeOf, ids.uuid))
)

/**
 * Builds `layer` seeing only `tags`. HttpApiBuilder.group merges the context its layer was
 * built in into every request of the group: built from everything the server provides, that
 * per-request copy was a sixth of a whoami's CPU time. The layer's requirements must be among
 * `tags`, so a missing one is a type error, not a request failing at run time.
 */
const builtWith = <const Tags extends ReadonlyArray<Context.Tag<any, any>>>(...tags: Tags) =>
<A, E>(
  layer: Layer.Layer<A, E, Context.Tag.Identifier<Tags[number]>>
): Layer.Layer<A, E, Context.Tag.Identifier<Tags[number]>> =>
  Layer.scopedContext(
    Effect.gen(function*() {
      const only = Context.pick(...tags)(yield* Effect.context<Context.Tag.Identifier<Tags[number]>>())
      // The memo map is shared, so layers built inside (the router) are the server's own.
      const memoMap = yield* Layer.CurrentMemoMap
      return yield* Effect.provide(Layer.buildWithMemoMap(layer, memoMap, yield* Effect.scope), only)
    })
  )

const GroupsLive = Layer.mergeAll(
  HttpActivationsLive.pipe(
    builtWith(
      Activations,
      Idempotency,
      Authentication,
      RequireCampaignsWrite,
      RequireIdempotencyKey,
      JsonBody
    )
  ),
  HttpIdentityLive.pipe(builtWith(Authentication)),
  HttpHealthLive.pipe(builtWith(SqlClient.SqlClient, DatabaseFile))
)

/** The API with its handlers and middleware; needs the services it calls. */
export const ApiLive = HttpApiBuilder.api(CampaignApi).pipe(
  Layer.provide(GroupsLive),
  Layer.provide(MiddlewareLive)
)
