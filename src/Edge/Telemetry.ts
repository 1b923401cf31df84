import { Effect, Tracer } from "effect"
import { Metrics } from "../Metrics.ts"
import { tracing } from "../Spans.ts"
import type { Provided, Reply } from "./Endpoint.ts"
import type { Exchange } from "./Exchange.ts"
import { toWebResponse } from "./Render.ts"

/**
 * What the edge tells of each answer beyond its access line: the request's server span (with
 * tracing on) and its series (with metrics on), both decided once when the edge is built, so that
 * with neither an answer goes out as it always did.
 */
export const makeTelemetry = Effect.gen(function*() {
  const traced = yield* tracing
  const metrics = yield* Metrics

  /**
   * The request's server span, its parent for every span of the request: put into the request's
   * own context (`Provided`) rather than provided around the program, which would copy that
   * context before the middleware add to it.
   */
  const withServerSpan = (exchange: Exchange, provided: Provided) => <R>(self: Effect.Effect<Reply, never, R>) =>
    Effect.useSpan(`http.server ${exchange.request.method}`, {
      kind: "server",
      captureStackTrace: false,
      attributes: {
        "http.request.method": exchange.request.method,
        "http.route": exchange.route,
        "url.path": exchange.path
      }
    }, (span) => {
      provided.set(Tracer.ParentSpan.key, span)
      return Effect.tap(self, (reply) =>
        Effect.sync(() => {
          span.attribute("http.response.status_code", reply.status)
          span.attribute("http.response.header.x-request-id", exchange.requestId)
        }))
    })

  const respond: (exchange: Exchange, reply: Reply, startedAt: number) => Response = metrics.on
    ? (exchange, reply, startedAt) => {
      metrics.answered(exchange.request.method, exchange.route, reply.status, (performance.now() - startedAt) / 1000)
      return toWebResponse(answering(exchange), reply)
    }
    : (exchange, reply) => toWebResponse(answering(exchange), reply)

  // A program that failed past the renderer becomes the web server's 500 (WebServer.ts): counted
  // as that 500, since it is what an error-rate alert is for.
  const settle: (exchange: Exchange, reply: Promise<Reply>, startedAt: number) => Promise<Response> = metrics.on
    ? (exchange, reply, startedAt) =>
      reply.then((reply) => respond(exchange, reply, startedAt), (error: unknown) => {
        metrics.answered(exchange.request.method, exchange.route, 500, (performance.now() - startedAt) / 1000)
        throw error
      })
    : (exchange, reply, startedAt) => reply.then((reply) => respond(exchange, reply, startedAt))

  return {
    traced,
    /** The program with its server span, with tracing on; as it is, without. */
    spanned: (exchange: Exchange, provided: Provided, program: Effect.Effect<Reply>): Effect.Effect<Reply> =>
      traced ? withServerSpan(exchange, provided)(program) as Effect.Effect<Reply> : program,
    /** The web response of a reply, counted. */
    respond,
    /** The web response of a reply to come, counted (a failure as the 500 it becomes). */
    settle
  }
})

const answering = (exchange: Exchange) => ({
  request: exchange.request.source,
  requestId: exchange.requestId,
  bodyRead: exchange.request.bodyRead
})
