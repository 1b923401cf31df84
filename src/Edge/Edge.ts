import type * as HttpApi from "@effect/platform/HttpApi"
import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import { type Cause, type Context, Effect, type Fiber, FiberRef, LogLevel } from "effect"
import { TrustedProxiesConfig, TrustedProxyHeaderConfig } from "../Config.ts"
import { DatabaseOutage } from "../Database/Outage.ts"
import { declaredEndpoints } from "../Declaration.ts"
import type { Handlers, MiddlewareOf } from "../Handlers.ts"
import { makeAccessLog, makeDroppedLinesSummary, makeRefusalSummary, type Summary } from "./AccessLog.ts"
import { type Caller, makeCallers } from "./Caller.ts"
import { makeDocumentRoutes } from "./Documents.ts"
import { compileEndpoint, type Provided, type Reply } from "./Endpoint.ts"
import type { Exchange } from "./Exchange.ts"
import { errorReply, makeRenderer, withPreResponse } from "./Render.ts"
import { type Handle, inProcess, makeRouter, pathStart, type Route, type Run } from "./Router.ts"
import { makeRunner } from "./Run.ts"
import { EdgeRequest } from "./ServerRequest.ts"
import { makeTelemetry } from "./Telemetry.ts"

export { type Handle, inProcess, type Summary }

/** What `Bun.serve` is given: its router's table for the API and a `fetch` for everything else. */
export interface Edge {
  /** Every spelling of every route (its own, and with a trailing slash), with each method Bun routes by name. */
  readonly routes: Record<string, Record<string, Handle>>
  /**
   * Given the peer, Bun's fallback: what its table did not match. Without one, in process (tests,
   * the bench): any request, routed here.
   */
  readonly fetch: (request: Request, peer?: string) => Response | Promise<Response>
  /** Who sent a request that came from `peer` (the web server's own answers name it too). */
  readonly callerOf: (request: Request, peer: string) => Caller
  /**
   * What is counted rather than logged line by line (401s per client address), with how often the
   * server writes its summary; `stopping`: the last one, whatever is counted.
   */
  readonly summaries: ReadonlyArray<Summary>
}

/**
 * What the composition root (`App.ts`) hands the edge: the definition, a handler for each of its
 * endpoints (the record its HttpApiBuilder groups are made of too; one missing is a type error),
 * and whether a GET may be answered synchronously (SQLite and no REDIS_URL: nothing it runs
 * waits). The implementations of the middleware come from the layers' context.
 */
export interface EdgeOptions<Api extends HttpApi.HttpApi.Any> {
  readonly api: Api
  readonly handlers: Handlers<Api>
  readonly synchronousGets: boolean
}

/**
 * The edge, built once from layers: every endpoint of the HttpApi definition compiled with its
 * handler and the implementations of its middleware (`Endpoint.ts`), the documents' routes
 * (`Documents.ts`), the router (`Router.ts`) and the runner of each request's Effect program
 * (`Run.ts`). Per request: the library's request object, the endpoint's program, the renderer for
 * any failure, the pre-response handlers, one access-log line (`AccessLog.ts`) and the web
 * response, with its span and series when they are on (`Telemetry.ts`).
 */
export const makeEdge = <Api extends HttpApi.HttpApi.Any>({ api, handlers, synchronousGets }: EdgeOptions<Api>) =>
  Effect.gen(function*() {
    const middleware = yield* Effect.context<MiddlewareOf<Api>>()
    const endpoints: ReadonlyArray<Route> = declaredEndpoints(api).map((declared) => {
      const handler =
        (handlers as Record<string, Record<string, (request: any) => Effect.Effect<unknown, unknown, unknown>>>)[
          declared.group.identifier
        ]![declared.endpoint.name]!
      return {
        method: declared.endpoint.method,
        path: declared.endpoint.path,
        run: compileEndpoint(declared, handler, middleware as Context.Context<never>)
      }
    })
    const documents = yield* makeDocumentRoutes(api)
    const telemetry = yield* makeTelemetry
    // Decided once: below LOG_LEVEL=info no access-log line is built at all.
    const accessLogged = telemetry.traced ||
      LogLevel.lessThanEqual(yield* FiberRef.get(FiberRef.currentMinimumLogLevel), LogLevel.Info)
    const accessLog = yield* makeAccessLog(telemetry.traced)
    const answer = yield* makeRunner({ synchronousGets })
    const renderer = makeRenderer((yield* DatabaseOutage).failed)
    const refusals = makeRefusalSummary()
    const callerOf = makeCallers(yield* TrustedProxiesConfig, yield* TrustedProxyHeaderConfig)

    const run: Run = (route, source, path, params, peer) => {
      const startedAt = performance.now()
      const { clientAddress, clientRequestId, requestId } = callerOf(source, peer)
      const request = new EdgeRequest(source, source.url.slice(pathStart(source.url)))
      const exchange: Exchange = { request, path, route: route.path, requestId, clientAddress, clientRequestId }
      const provided: Provided = new Map([[HttpServerRequest.HttpServerRequest.key, request]])
      /**
       * The reply as it leaves: its pre-response headers, and its access-log line (a 401 only as the
       * first from its client's address in an interval; the rest are counted), in one step of the
       * request's fiber.
       */
      const finish = (reply: Reply): Effect.Effect<Reply> =>
        Effect.withFiberRuntime((fiber) => {
          const final = withPreResponse(fiber.getFiberRef(HttpApp.currentPreResponseHandlers), request, reply)
          if (Effect.isEffect(final)) {
            return Effect.flatMap(Effect.catchAllCause(final, renderer.renderFailure), (rendered) =>
              logged(fiber, rendered))
          }
          return logged(fiber, final)
        })
      const logged = (fiber: Fiber.RuntimeFiber<unknown, unknown>, reply: Reply): Effect.Effect<Reply> => {
        if (!accessLogged || (reply.status === 401 && !refusals.tally.first(clientAddress))) {
          return Effect.succeed(reply)
        }
        const logging = accessLog(fiber, exchange, reply.status, startedAt)
        return logging === undefined ? Effect.succeed(reply) : Effect.as(logging, reply)
      }
      const failed = (cause: Cause.Cause<unknown>) => Effect.flatMap(renderer.renderFailure(cause), finish)
      // Its HttpServerRequest is in the request's own context (`provided`), which its runtime starts with.
      const answered = Effect.matchCauseEffect(route.run(request, params, provided), {
        onFailure: failed,
        onSuccess: finish
      }) as Effect.Effect<Reply>
      const reply = answer(exchange, provided, telemetry.spanned(exchange, provided, answered), failed)
      return reply instanceof Promise
        ? telemetry.settle(exchange, reply, startedAt)
        : telemetry.respond(exchange, reply, startedAt)
    }

    const router = makeRouter([...endpoints, ...documents], run)
    return {
      routes: router.routes,
      fetch: router.fetch,
      callerOf,
      summaries: [refusals.summary, makeDroppedLinesSummary()]
    } satisfies Edge
  })

export { errorReply }
