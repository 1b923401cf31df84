import type * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerError from "@effect/platform/HttpServerError"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Cause, Effect, HashSet, Option } from "effect"
import { ArrayFormatter, isParseError } from "effect/ParseResult"
import type * as ParseResult from "effect/ParseResult"
import { isDatabaseUnavailable } from "../Database/SqlErrors.ts"
import {
  type ApiError,
  envelopeJson,
  InternalError,
  isApiError,
  ServiceUnavailable,
  statusOf,
  ValidationError
} from "../Domain/Errors.ts"
import { isHeadersHandler } from "../Responses.ts"
import { type Reply, replyOf } from "./Endpoint.ts"
import { hasBody } from "./RequestBody.ts"
import type { EdgeRequest } from "./ServerRequest.ts"

/** An error as the envelope `{ ok: false, code, message }` with its status. */
export const errorReply = (error: ApiError): Reply => ({ status: statusOf(error), body: envelopeJson(error) })

type Issue = ParseResult.ArrayFormatterIssue

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

/**
 * The path to the first leaf of a schema issue, walked without recursion and without reading the
 * value that failed.
 */
const pathOf = (issue: ParseResult.ParseIssue): ReadonlyArray<PropertyKey> => {
  const path: Array<PropertyKey> = []
  let at: ParseResult.ParseIssue | undefined = issue
  while (at !== undefined) {
    switch (at._tag) {
      case "Pointer":
        path.push(...(Array.isArray(at.path) ? at.path : [at.path]))
        at = at.issue
        break
      case "Composite":
        at = Array.isArray(at.issues) ? at.issues[0] : at.issues
        break
      case "Refinement":
      case "Transformation":
        at = at.issue
        break
      default:
        at = undefined
    }
  }
  return path
}

/**
 * The sentence of a schema failure. Effect's formatter describes the value that failed, recursively:
 * a value nested thousands deep (a hostile body) overflows the stack there, and is then named by
 * its field alone rather than becoming a 500.
 */
const validationMessage = (error: ParseResult.ParseError): string => {
  try {
    return describeIssue(ArrayFormatter.formatErrorSync(error)[0])
  } catch (defect) {
    if (!(defect instanceof RangeError)) throw defect
    const field = pathOf(error.issue).map(String).join(".")
    return field === "" ? "The request body must be a JSON object." : `${field} is not valid.`
  }
}

const unavailable = new ServiceUnavailable({ message: "The service is temporarily unavailable; retry shortly." })
const internal = new InternalError({ message: "An unexpected error occurred." })

/** The status of an answer to a client that has gone: nginx's "client closed request", and the library's. */
export const clientGone = 499
const clientClosed: Reply = { status: clientGone, body: undefined }

/**
 * The one renderer: every way a request can end badly leaves as the envelope. A tagged failure is
 * its own envelope (its headers, `WWW-Authenticate` or `Retry-After`, are the pre-response
 * handlers' it added), a schema's decode failure is VALIDATION_ERROR naming the field, the
 * database being unusable is 503 (told to `outage`, which counts and logs it), and anything else
 * is a generic 500 with the cause in the log. The one exception: a request whose client has gone
 * (interrupted, `Edge.ts`) is 499 without a body, which nobody reads; only its access line does.
 */
export const makeRenderer = (outage: (cause: Cause.Cause<unknown>) => Effect.Effect<void>) => {
  const renderFailure = (cause: Cause.Cause<unknown>): Effect.Effect<Reply> => {
    const failure = Cause.failureOption(cause)
    if (Option.isSome(failure)) {
      const error = failure.value
      if (isApiError(error)) return Effect.succeed(errorReply(error))
      if (isParseError(error)) {
        return Effect.succeed(errorReply(new ValidationError({ message: validationMessage(error) })))
      }
    }
    // Interrupted and nothing more: its client gone, 499 (nginx's "client closed request"); by
    // anything else, 503. Both as the library's own server answers them (`HttpServerError.causeResponse`).
    if (Cause.isInterruptedOnly(cause)) {
      return Effect.succeed(
        HashSet.has(Cause.interruptors(cause), HttpServerError.clientAbortFiberId)
          ? clientClosed
          : errorReply(unavailable)
      )
    }
    if (isDatabaseUnavailable(Cause.squash(cause))) return Effect.as(outage(cause), errorReply(unavailable))
    return Effect.as(Effect.logError("unexpected failure", cause), errorReply(internal))
  }

  return { renderFailure }
}

/**
 * The `Date` of an answer to HEAD, which Bun 1.4.4 leaves out there while it sends one with every
 * other answer: an IMF-fixdate (RFC 9110), made once per second.
 */
const httpDate = (() => {
  let second = Number.NaN
  let text = ""
  return (): string => {
    const now = Math.floor(Date.now() / 1000)
    if (now !== second) {
      second = now
      text = new Date(now * 1000).toUTCString()
    }
    return text
  }
})()

/** What the web response says of the request it answers. */
export interface Answering {
  readonly request: Request
  readonly requestId: string
  /** Whether its body is off the connection (read whole, or none). */
  readonly bodyRead: boolean
}

/**
 * The web response: the reply, the request id, and what every answer carries (docs/integrators.md: `X-Content-Type-Options: nosniff`, so that no browser reads a JSON answer as
 * anything else).
 */
export const toWebResponse = ({ bodyRead, request, requestId }: Answering, reply: Reply): Response => {
  const headers: Record<string, string> = {
    "content-type": "application/json",
    "x-content-type-options": "nosniff",
    "x-request-id": requestId,
    ...reply.headers
  }
  // HEAD answers as GET would, headers included (docs/http-reference.md, HEAD).
  if (request.method === "HEAD") headers["date"] = httpDate()
  // The rest of an unread body is still on the connection: it cannot carry another request.
  const closing = !bodyRead && hasBody(request)
  if (closing) headers["connection"] = "close"
  // The one answer without a body (docs/integrators.md, Reads): nothing to give a type to.
  if (reply.status === 304) delete headers["content-type"]
  const response = new Response(reply.body, { status: reply.status, headers })
  if (closing) closingResponses.add(response)
  return response
}

/**
 * The answers that close their connection because of their request's unread body: asked of each
 * answer by the web server, which stops counting the connection. Reading the response's headers
 * for it cost whoami and fresh activations 2 to 3 % (bench/BENCHMARKS.md, The second guard).
 */
const closingResponses = new WeakSet<Response>()

/** Whether `response` closes its connection for its request's unread body. */
export const closesForUnreadBody = (response: Response): boolean => closingResponses.has(response)

/**
 * A reply with the headers of the library's pre-response handlers, as HttpApiBuilder's server adds
 * them: those that only set headers (`Responses.ts`) straight into it; any other runs on a response
 * of the library's.
 */
export const withPreResponse = (
  handler: Option.Option<HttpApp.PreResponseHandler>,
  request: EdgeRequest,
  reply: Reply
): Reply | Effect.Effect<Reply, unknown> => {
  if (Option.isNone(handler)) return reply
  if (isHeadersHandler(handler.value)) {
    // The request's own collector (`Responses.ts`), taken as it is when the reply has no headers of its own.
    const added = handler.value.headers
    return {
      status: reply.status,
      body: reply.body,
      headers: reply.headers === undefined ? added : { ...reply.headers, ...added }
    }
  }
  const response = reply.body === undefined
    ? HttpServerResponse.empty({ status: reply.status, headers: reply.headers ?? {} })
    : HttpServerResponse.raw(reply.body, { status: reply.status, headers: reply.headers ?? {} })
  return Effect.map(handler.value(request, response), replyOf)
}
