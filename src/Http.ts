import { HttpApiBuilder, HttpApiError, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import type { HttpApiEndpoint } from "@effect/platform"
import { SqlError } from "@effect/sql/SqlError"
import { Cause, Effect, Layer, Option } from "effect"
import { HttpActivationsLive } from "./Activations/Http.ts"
import { CampaignApi } from "./Api.ts"
import {
  errorResponse,
  InternalError,
  MethodNotAllowed,
  NotFound,
  ServiceUnavailable,
  ValidationError,
  wireCodes
} from "./Domain/Errors.ts"
import { HttpIdentityLive } from "./Identity/Http.ts"
import { MiddlewareLive } from "./Middleware/Http.ts"

/** Every route of the API as a pattern, so an unknown method on a known path is 405, not 404. */
const routes = Object.values(CampaignApi.groups).flatMap((group) =>
  Object.values(group.endpoints).map((endpoint: HttpApiEndpoint.HttpApiEndpoint.AnyWithProps) => ({
    method: endpoint.method,
    pattern: new RegExp(`^${endpoint.path.replace(/:[^/]+/g, "[^/]+")}$`)
  }))
)

export const allowedMethods = (path: string): ReadonlyArray<string> =>
  routes.filter((route) => route.pattern.test(path)).map((route) => route.method)

const routeNotFound = Effect.gen(function*() {
  const request = yield* HttpServerRequest.HttpServerRequest
  const path = request.url.split("?")[0]!
  const allowed = allowedMethods(path)
  if (allowed.length === 0) {
    return errorResponse(new NotFound({ message: `No route for ${request.method} ${path}.` }))
  }
  return HttpServerResponse.setHeader(
    errorResponse(new MethodNotAllowed({ message: `${request.method} is not allowed on ${path}; use ${allowed.join(", ")}.` })),
    "allow",
    allowed.join(", ")
  )
})

type Issue = HttpApiError.HttpApiDecodeError["issues"][number]

/** One sentence naming the field, from the first schema issue. */
export const describeIssue = (issue: Issue | undefined): string => {
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

const isApiError = (u: unknown): boolean =>
  typeof u === "object" && u !== null && "_tag" in u && (u._tag as string) in wireCodes

const databaseBusyCodes = /^SQLITE_(BUSY|LOCKED|CANTOPEN|IOERR|FULL|READONLY|PROTOCOL|NOTADB|CORRUPT)/

/** The database is there but cannot be used right now: the caller may retry. */
export const isDatabaseUnavailable = (defect: unknown): boolean =>
  defect instanceof SqlError &&
  typeof defect.cause === "object" && defect.cause !== null &&
  "code" in defect.cause && databaseBusyCodes.test(String(defect.cause.code))

/**
 * What the endpoints' schemas cannot see (decode failures, unknown routes, defects)
 * becomes the same envelope here; declared errors pass on to their schemas.
 */
export const ErrorEnvelopeLive = HttpApiBuilder.middleware((app) =>
  Effect.catchAllCause(app, (cause) => {
    const failure = Cause.failureOption(cause)
    if (Option.isSome(failure)) {
      const error: unknown = failure.value
      if (error instanceof HttpApiError.HttpApiDecodeError) {
        return Effect.succeed(errorResponse(new ValidationError({ message: describeIssue(error.issues[0]) })))
      }
      if (typeof error === "object" && error !== null && "_tag" in error && error._tag === "RouteNotFound") {
        return routeNotFound
      }
      if (isApiError(error)) return Effect.failCause(cause)
    }
    if (Cause.isInterruptedOnly(cause)) return Effect.failCause(cause)
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
  })
)

/** The API with its handlers and middleware; needs the services it calls. */
export const ApiLive = HttpApiBuilder.api(CampaignApi).pipe(
  Layer.provide([HttpActivationsLive, HttpIdentityLive]),
  Layer.provide(MiddlewareLive)
)
