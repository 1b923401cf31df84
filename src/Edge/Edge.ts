import {
  type HttpApi,
  HttpApp,
  HttpServerError,
  HttpServerRequest,
  HttpServerResponse,
  OpenApi
} from "@effect/platform"
import {
  Cause,
  Context,
  Duration,
  Effect,
  Exit,
  type Fiber,
  FiberId,
  FiberRef,
  FiberRefs,
  HashMap,
  LogLevel,
  Option,
  Runtime,
  Tracer
} from "effect"
import { EdgeConfig, ServerConfig, TrustedProxiesConfig, TrustedProxyHeaderConfig } from "../Config.ts"
import { DatabaseOutage } from "../Database/Outage.ts"
import { declaredEndpoints } from "../Declaration.ts"
import { NotFound } from "../Domain/Errors.ts"
import type { Handlers } from "../Handlers.ts"
import { currentKeyNote, keyNoteSlot } from "../Logging.ts"
import { Metrics } from "../Metrics.ts"
import { collectResponseHeaders, isHeadersHandler, notModified } from "../Responses.ts"
import { tracing } from "../Spans.ts"
import { makeAccessLog, makeRefusalTally } from "./AccessLog.ts"
import { type Caller, makeCallers } from "./Caller.ts"
import { docsPage, documentRoutes, encodedFor, openApiDocument, type PreparedDocument } from "./Documents.ts"
import { compileEndpoint, type MiddlewareOf, type Provided, type Reply, replyOf } from "./Endpoint.ts"
import type { Exchange } from "./Exchange.ts"
import { errorReply, makeRenderer, toWebResponse } from "./Render.ts"
import { makeFallback, type Route, unknownRoute } from "./Router.ts"
import { EdgeRequest } from "./ServerRequest.ts"

/** A document from bytes prepared once: compressed as the client takes it, 304 when it has them. */
const serveDocument = (request: EdgeRequest, document: PreparedDocument): Reply => {
  const headers = {
    ...document.headers,
    "content-type": document.contentType,
    "cache-control": document.cacheControl,
    "etag": document.etag,
    "vary": "accept-encoding"
  }
  if (notModified(request.source.headers.get("if-none-match"), document.etag)) {
    return { status: 304, body: undefined, headers }
  }
  const encoded = encodedFor(document, request.source.headers.get("accept-encoding"))
  return {
    status: 200,
    body: encoded === undefined ? document.plain : encoded.bytes,
    headers: encoded === undefined ? headers : { ...headers, "content-encoding": encoded.coding }
  }
}

/**
 * `GET /`: what this service is and where its documents are, from the definition's title and
 * version. The documents' URLs are PUBLIC_URL's when it is set; without it the server does not
 * know the address its clients use, and names their paths alone (README, For integrators).
 */
const indexOf = (api: HttpApi.HttpApi.Any, docsEnabled: boolean, publicUrl: Option.Option<URL>): string => {
  const { annotations } = api as HttpApi.HttpApi.AnyWithProps
  const at = (path: string) =>
    Option.match(publicUrl, { onNone: () => path, onSome: (url) => `${url.href.replace(/\/+$/, "")}${path}` })
  return JSON.stringify({
    ok: true,
    name: Context.unsafeGet(annotations, OpenApi.Title),
    version: Context.unsafeGet(annotations, OpenApi.Version),
    docs: docsEnabled ? at(documentRoutes.docs) : null,
    openApi: at(documentRoutes.openApi)
  })
}

/** The peer's address when there is no connection: in process (tests, the bench). */
export const inProcess = "(in process)"

/**
 * What Bun's router and its fallback call. The peer's address is asked of Bun once per
 * request, by the guard, and handed on.
 */
export type Handle = (
  request: Request & { params: Record<string, string> },
  peer: string
) => Response | Promise<Response>

/** How often repeated 401s from one address are summed up in the log. */
const refusalSummaryInterval = Duration.minutes(1)

/** A count the log sums up every `interval`, and once more when the server stops. */
export interface Summary {
  readonly interval: Duration.Duration
  readonly write: (stopping: boolean) => Effect.Effect<void>
}

/**
 * Where the path starts in a URL as Bun hands it: the path as sent, never normalised by a `URL`,
 * though Bun has resolved its dot segments and `\` already. `CONNECT host:port` is handed on as
 * that target alone.
 */
const pathStart = (url: string): number => {
  const authority = url.indexOf("//")
  if (authority === -1) return 0
  const start = url.indexOf("/", authority + 2)
  return start === -1 ? url.length : start
}
const rawPath = (url: string): string => {
  const start = pathStart(url)
  const query = url.indexOf("?", start)
  return query === -1 ? url.slice(start) : url.slice(start, query)
}

/**
 * The methods Bun's router tells apart by name (Bun 1.4.4): a request of any other method goes to
 * the fallback whatever its path.
 */
const routedByBun: ReadonlySet<string> = new Set([
  "GET",
  "HEAD",
  "POST",
  "PUT",
  "DELETE",
  "PATCH",
  "OPTIONS",
  "TRACE",
  "CONNECT"
])

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
  /**
   * Names the port the server listens on: the documents name `PUBLIC_URL` or, by default, this
   * server at that port. Each document is made by the first request that asks for it and served
   * from its bytes from then on (the docs page, megabytes, is never held by a server nobody reads it from).
   */
  readonly listening: (port: number) => void
}

/**
 * What the composition root (`App.ts`) hands the edge: the definition, a handler for each of its
 * endpoints (the same functions its HttpApiBuilder groups are made of; one missing is a type
 * error), and whether a GET may be answered synchronously (SQLite and no REDIS_URL: nothing it
 * runs waits). The implementations of the middleware come from the layers' context.
 */
export interface EdgeOptions<Api extends HttpApi.HttpApi.Any> {
  readonly api: Api
  readonly handlers: Handlers<Api>
  readonly synchronousGets: boolean
}

/**
 * A reply with the headers of the library's pre-response handlers, as HttpApiBuilder's server adds
 * them: those that only set headers (`Responses.ts`) straight into it; any other runs on a response
 * of the library's (`general`).
 */
const withPreResponse = (
  handler: Option.Option<HttpApp.PreResponseHandler>,
  request: EdgeRequest,
  reply: Reply
): Reply | Effect.Effect<Reply, unknown> => {
  if (Option.isNone(handler)) return reply
  if (isHeadersHandler(handler.value)) return { ...reply, headers: { ...reply.headers, ...handler.value.headers } }
  const response = reply.body === undefined
    ? HttpServerResponse.empty({ status: reply.status, headers: reply.headers ?? {} })
    : HttpServerResponse.raw(reply.body, { status: reply.status, headers: reply.headers ?? {} })
  return Effect.map(handler.value(request, response), replyOf)
}

/**
 * The edge, built once from layers: every endpoint of the HttpApi definition compiled with its
 * handler and the implementations of its middleware (`Endpoint.ts`), the documents, and one
 * runtime to run each request's Effect program. Per request: the library's request object, the
 * endpoint's program, the renderer for any failure, the pre-response handlers, one access-log line
 * and the web response; with tracing on, a server span.
 */
export const makeEdge = <Api extends HttpApi.HttpApi.Any>({ api, handlers, synchronousGets }: EdgeOptions<Api>) =>
  Effect.gen(function*() {
    const { docsEnabled, publicUrl } = yield* EdgeConfig
    const { port } = yield* ServerConfig
    let listeningPort = port
    const serverUrl = () =>
      Option.match(publicUrl, { onNone: () => `http://localhost:${listeningPort}`, onSome: (url) => url.href })
    const openApi = yield* Effect.cached(Effect.suspend(() => openApiDocument(api, serverUrl())))
    const docs = yield* Effect.cached(Effect.suspend(() => docsPage(api, serverUrl())))
    const index: Reply = { status: 200, body: indexOf(api, docsEnabled, publicUrl) }
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
    const noSuchScript = (request: EdgeRequest) =>
      Effect.fail(new NotFound({ message: `No route for ${request.method} ${rawPath(request.source.url)}.` }))
    const routes: ReadonlyArray<Route> = [
      ...endpoints,
      { method: "GET", path: documentRoutes.index, run: () => Effect.succeed(index) },
      {
        method: "GET",
        path: documentRoutes.openApi,
        run: (request) => Effect.map(openApi, (document) => serveDocument(request, document))
      },
      ...(docsEnabled
        ? [
          {
            method: "GET",
            path: documentRoutes.docs,
            run: (request: EdgeRequest) => Effect.map(docs, ({ page }) => serveDocument(request, page))
          },
          {
            method: "GET",
            path: documentRoutes.docsScript,
            run: (request: EdgeRequest, params: Readonly<Record<string, string>>) =>
              Effect.flatMap(docs, ({ script }) =>
                Option.match(script(params.script ?? ""), {
                  onNone: () => noSuchScript(request),
                  onSome: Effect.map((document) => serveDocument(request, document))
                }))
          }
        ]
        : [])
    ]
    const fallback = makeFallback(routes)
    const traced = yield* tracing
    // Decided once: below LOG_LEVEL=info no access-log line is built at all.
    const accessLogged = traced ||
      LogLevel.lessThanEqual(yield* FiberRef.get(FiberRef.currentMinimumLogLevel), LogLevel.Info)
    const accessLog = yield* makeAccessLog(traced)
    // The layers' fiber refs (logger, tracer, clock), and a context of nothing but the request: the
    // handlers and the middleware took their services when they were built, and need nothing
    // else of the context than what the middleware provide.
    const built = yield* Effect.runtime<never>()
    /**
     * Per request, a runtime of its own: its context is the request's (`Provided`), and its log
     * annotations carry the request's id, so that every line the request's fiber logs does. A
     * fiber starts with its runtime's context and fiber refs whatever they are, where setting them
     * from within would write its state, and compare the old value with the new, each time.
     */
    const runtimeOf = (provided: Provided, requestId: string) =>
      Runtime.make({
        context: Context.unsafeMake(provided),
        fiberRefs: FiberRefs.updateManyAs(built.fiberRefs, {
          entries: [
            [FiberRef.currentLogAnnotations, [[FiberId.none, HashMap.set(baseAnnotations, "requestId", requestId)]]],
            // The request's own collector of the headers its middleware add, and slot for its key's
            // note: taken into in place, with no write of the fiber's state (`Responses.ts`, `Logging.ts`).
            [HttpApp.currentPreResponseHandlers, [[FiberId.none, Option.some(collectResponseHeaders())]]],
            [currentKeyNote, [[FiberId.none, keyNoteSlot()]]]
          ]
        }),
        runtimeFlags: built.runtimeFlags
      })
    const baseAnnotations = FiberRefs.getOrDefault(built.fiberRefs, FiberRef.currentLogAnnotations)

    /**
     * The requests whose fibers are waiting and not yet listened to, each until its fiber ends or
     * the turn of the event loop it waited in is over (`watch`): most have been answered by then (a
     * replay, once its body is read), and listening to a request's signal is one of the dearer steps
     * of an answer (bench/BENCHMARKS.md).
     */
    const unwatched = new Map<Fiber.RuntimeFiber<Reply>, Request>()
    let watchDue = false
    /**
     * Each request still waiting is interrupted once its client has gone (Bun aborts the request's
     * signal when its connection closes), as the library's own web handler interrupts it
     * (`HttpApp.toWebHandler`): what it was doing stops at its next wait (a read between its pages,
     * a turn in a line). A request answered synchronously never waits long enough to be left.
     */
    const watch = () => {
      watchDue = false
      for (const [fiber, request] of unwatched) {
        const signal = request.signal
        const left = () => fiber.unsafeInterruptAsFork(HttpServerError.clientAbortFiberId)
        if (signal.aborted) left()
        else signal.addEventListener("abort", left, { once: true })
      }
      unwatched.clear()
    }

    /**
     * A request's fiber once it waits, as a promise of its reply, watched for its client leaving
     * (`watch`). Its program's own matching of a failure does not run for an interruption, so
     * `failed` answers it (499, `Render.ts`) from where the fiber stopped, as the fiber itself
     * would have: its context, headers and key note are the fiber's. A program made uninterruptible
     * around its route would answer it in the fiber, at the cost of two changes of its flags for
     * every request, the synchronous ones included, which no client can leave.
     */
    const awaited = (
      fiber: Fiber.RuntimeFiber<Reply>,
      request: Request,
      failed: (cause: Cause.Cause<unknown>) => Effect.Effect<Reply>
    ): Promise<Reply> => {
      unwatched.set(fiber, request)
      if (!watchDue) {
        watchDue = true
        setImmediate(watch)
      }
      return new Promise((resolve, reject) =>
        fiber.addObserver((exit) => {
          unwatched.delete(fiber)
          if (Exit.isSuccess(exit)) return resolve(exit.value)
          if (!Cause.isInterruptedOnly(exit.cause)) return reject(Runtime.makeFiberFailure(exit.cause))
          const where = Runtime.make({
            context: fiber.currentContext,
            fiberRefs: fiber.getFiberRefs(),
            runtimeFlags: built.runtimeFlags
          })
          resolve(Runtime.runPromise(where, failed(exit.cause)))
        })
      )
    }

    /**
     * A GET reads no body: on SQLite with the rate limits in memory its program never waits, and
     * answering it synchronously, without a promise or a scheduler turn, saves much of its cost.
     * Should it wait after all, it goes on in its fiber, awaited; that costs more than a promise from
     * the start, which is why a POST (always a body to read), and every request when the rate limits
     * are on Redis (a round trip each) or the reads on PostgreSQL (its pool), starts with one.
     */
    const answer = (
      exchange: Exchange,
      provided: Provided,
      program: Effect.Effect<Reply>,
      failed: (cause: Cause.Cause<unknown>) => Effect.Effect<Reply>
    ): Reply | Promise<Reply> => {
      const runtime = runtimeOf(provided, exchange.requestId)
      const method = exchange.request.method
      if (!synchronousGets || (method !== "GET" && method !== "HEAD")) {
        return awaited(Runtime.runFork(runtime, program), exchange.request.source, failed)
      }
      const exit = Runtime.runSyncExit(runtime, program)
      if (Exit.isSuccess(exit)) return exit.value
      const defect = Cause.squash(exit.cause)
      return Runtime.isAsyncFiberException(defect)
        ? awaited(defect.fiber as Fiber.RuntimeFiber<Reply>, exchange.request.source, failed)
        : Promise.reject(defect)
    }

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

    // Decided once, as the access log is: with metrics off, an answer goes out as it always did.
    const metrics = yield* Metrics
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
    const renderer = makeRenderer((yield* DatabaseOutage).failed)
    const refusals = makeRefusalTally()
    const summaries: ReadonlyArray<Summary> = [{
      interval: refusalSummaryInterval,
      write: () =>
        Effect.suspend(() =>
          Effect.forEach(
            refusals.drain(),
            ([clientAddress, count]) =>
              Effect.logInfo("repeated unauthorized requests", { clientAddress, count, status: 401 }),
            { discard: true }
          )
        )
    }]

    const callerOf = makeCallers(yield* TrustedProxiesConfig, yield* TrustedProxyHeaderConfig)

    /** One request of `route`, with the parameters the router read from its path. */
    const run = (
      route: Pick<Route, "path" | "run">,
      source: Request,
      path: string,
      params: Readonly<Record<string, string>>,
      peer: string
    ) => {
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
        if (!accessLogged || (reply.status === 401 && !refusals.first(clientAddress))) return Effect.succeed(reply)
        const logging = accessLog(fiber, exchange, reply.status, startedAt)
        return logging === undefined ? Effect.succeed(reply) : Effect.as(logging, reply)
      }
      const failed = (cause: Cause.Cause<unknown>) => Effect.flatMap(renderer.renderFailure(cause), finish)
      const answered = Effect.matchCauseEffect(route.run(request, params, provided), {
        onFailure: failed,
        onSuccess: finish
      })
      const program = (traced ? withServerSpan(exchange, provided)(answered) : answered) as Effect.Effect<Reply>
      const reply = answer(exchange, provided, program, failed)
      return reply instanceof Promise ? settle(exchange, reply, startedAt) : respond(exchange, reply, startedAt)
    }

    /** A request routed here by its path as Bun hands it: a route's, 405 with `Allow`, or 404. */
    const routed = (request: Request, peer: string): Response | Promise<Response> => {
      const path = rawPath(request.url)
      const found = fallback(request.method, path)
      if (found._tag === "Dispatch") return run(found.route, request, path, found.params, peer)
      return run({ path: found.route, run: () => Effect.succeed(found.reply) }, request, path, {}, peer)
    }

    /**
     * Bun resolves dot segments (`/./`, `/../`, `%2e`) and `\` in a path before anyone sees it, so
     * `/v1/x/../whoami` arrives as `/v1/whoami`; but its table matches only a path sent as spelled.
     * Every spelling of every route is in it with each method Bun routes by name: such a request
     * that comes here was sent in no route's spelling, whatever its path now reads (README, For
     * integrators: 404). Bun routes no other method by name, so those come here whatever their
     * spelling, and are routed by their path.
     */
    const fetch = (request: Request, peer?: string): Response | Promise<Response> => {
      if (peer === undefined) return routed(request, inProcess)
      if (!routedByBun.has(request.method)) return routed(request, peer)
      const path = rawPath(request.url)
      const found = fallback(request.method, path)
      const refusal = found._tag === "Refuse" && found.route === unknownRoute
        ? found.reply
        : errorReply(
          new NotFound({
            message:
              `No route for ${request.method} ${path} as it was sent: a path with a dot segment (\`.\`, \`..\`) or a \`\\\` is no route's spelling.`
          })
        )
      return run({ path: unknownRoute, run: () => Effect.succeed(refusal) }, request, path, {}, peer)
    }

    /** A route as Bun's table hands it on, unless its router read the path otherwise than the route's spelling. */
    const direct = (route: Route): Handle => (request, peer) => {
      const path = rawPath(request.url)
      // Bun's router percent-decodes parameters and takes `;` in them: such a path is not this
      // route's spelling, and the router says so (404).
      return path.includes("%") || path.includes(";")
        ? routed(request, peer)
        : run(route, request, path, request.params, peer)
    }
    const table: Edge["routes"] = {}
    for (const route of routes) {
      for (const spelling of route.path.endsWith("/") ? [route.path] : [route.path, `${route.path}/`]) {
        // The route's own method, HEAD on a GET; any other is routed by the path (405 with `Allow`).
        const methods = table[spelling] ??= Object.fromEntries([...routedByBun].map((method) => [method, routed]))
        methods[route.method] = direct(route)
        if (route.method === "GET") methods["HEAD"] = direct(route)
      }
    }
    return {
      routes: table,
      fetch,
      callerOf,
      listening: (port: number) => {
        listeningPort = port
      },
      summaries
    } satisfies Edge
  })

const answering = (exchange: Exchange) => ({
  request: exchange.request.source,
  requestId: exchange.requestId,
  bodyRead: exchange.request.bodyRead
})

export { errorReply }
