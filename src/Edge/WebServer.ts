import { Cause, Deferred, Duration, Effect, Exit, Fiber, FiberRef, HashMap, Layer, Logger, LogLevel, Option, Runtime, Schedule } from "effect"
import { ActivationsHandlers } from "../Activations/Http.ts"
import { CampaignApi } from "../Api.ts"
import { EdgeConfig, ServerConfig, ShutdownConfig, StartupError } from "../Config.ts"
import { InternalError, type NotFound, ServiceUnavailable } from "../Domain/Errors.ts"
import { Draining } from "../Draining.ts"
import { HealthHandlers } from "../Health/Http.ts"
import { IdentityHandlers } from "../Identity/Http.ts"
import { makeAccessLog, makeRefusalTally, requestIdOf } from "./AccessLog.ts"
import { docsPage, documentRoutes, encodedFor, openApiDocument, type PreparedDocument } from "./Documents.ts"
import type { Exchange, Handler, Handlers, Reply } from "./Exchange.ts"
import { errorReply, makeRenderer, toWebResponse } from "./Render.ts"
import { tracing } from "../Spans.ts"
import { makeFallback, type Route, routesOf } from "./Router.ts"

/** How long in-flight requests may take to finish after SIGTERM before their connections are closed. */
const drainTimeout = Duration.seconds(10)

/** A document from bytes prepared once: compressed as the client takes it, 304 when it has them. */
const serveDocument = (prepared: (exchange: Exchange) => Effect.Effect<PreparedDocument, NotFound>): Handler => (exchange) =>
  Effect.map(prepared(exchange), (document) => {
    const headers = {
      "content-type": document.contentType,
      "cache-control": document.cacheControl,
      "etag": document.etag,
      "vary": "accept-encoding"
    }
    if (exchange.request.headers.get("if-none-match") === document.etag) {
      return { status: 304, body: new Uint8Array(0), headers }
    }
    const encoded = encodedFor(document, exchange.request.headers.get("accept-encoding"))
    return {
      status: 200,
      body: encoded === undefined ? document.plain : encoded.bytes,
      headers: encoded === undefined ? headers : { ...headers, "content-encoding": encoded.coding }
    }
  })

/** The client's address when there is no connection: in process (tests, the bench). */
const inProcess = "(in process)"

/** At most this many requests on one connection per window, then it is closed after its answer. */
const requestsPerConnection = 1_000
const requestsPerConnectionWindowMs = 10_000

/**
 * What Bun's router and its fallback call. The client's address is asked of Bun once per
 * request, by the guard, and handed on.
 */
type Handle = (request: Request & { params: Record<string, string> }, clientAddress: string) => Response | Promise<Response>

/** How often repeated 401s from one address are summed up in the log. */
const refusalSummaryInterval = Duration.minutes(1)

/** A count the log sums up every `interval`, and once more when the server stops. */
interface Summary {
  readonly interval: Duration.Duration
  readonly write: (stopping: boolean) => Effect.Effect<void>
}

/** The path as sent, without the query string: Bun's `URL` would normalise it. */
const rawPath = (url: string): string => {
  const start = url.indexOf("/", url.indexOf("//") + 2)
  const query = url.indexOf("?", start)
  return query === -1 ? url.slice(start) : url.slice(start, query)
}

/** What `Bun.serve` is given: its router's table for the API and a `fetch` for everything else. */
export interface Edge {
  readonly routes: Record<
    string,
    Record<string, Handle>
  >
  /** Answers any request, routing it itself: Bun's fallback, and the entry for tests and the bench. */
  readonly fetch: (request: Request, clientAddress?: string) => Response | Promise<Response>
  /**
   * What is counted rather than logged line by line (401s per client address, the requests a
   * database outage failed), each with how often the server writes its summary; `stopping`: the
   * last one, whatever is counted.
   */
  readonly summaries: ReadonlyArray<Summary>
  /**
   * Names the port the server listens on: the documents name `PUBLIC_URL` or, by default, this
   * server at that port. Each document is made by the first request that asks for it and served
   * from its bytes from then on (the docs page, 3 MB, is never held by a server nobody reads it from).
   */
  readonly listening: (port: number) => void
}

/**
 * The edge, built once from layers: every endpoint of the HttpApi definition with its handler
 * (a handler missing is a type error in `handlers`), the documents, and one runtime to run each
 * request's Effect program. Per request: an exchange object, the handler's steps, the renderer
 * for any failure, one access-log line, and the web response; with tracing on, a server span.
 */
export const makeEdge = Effect.gen(function*() {
  const handlers: Handlers<typeof CampaignApi> = {
    activations: yield* ActivationsHandlers,
    identity: yield* IdentityHandlers,
    health: yield* HealthHandlers
  }
  const { docsEnabled, publicUrl } = yield* EdgeConfig
  const { port } = yield* ServerConfig
  let listeningPort = port
  const serverUrl = () =>
    Option.match(publicUrl, { onNone: () => `http://localhost:${listeningPort}`, onSome: (url) => url.href })
  const openApi = yield* Effect.cached(Effect.suspend(() => openApiDocument(CampaignApi, serverUrl())))
  const docs = yield* Effect.cached(Effect.suspend(() => docsPage(CampaignApi, serverUrl())))
  const routes: ReadonlyArray<Route> = [
    ...routesOf(CampaignApi, handlers),
    { method: "GET", path: documentRoutes.openApi, handler: serveDocument(() => openApi) },
    ...(docsEnabled
      ? [
        { method: "GET", path: documentRoutes.docs, handler: serveDocument(() => Effect.map(docs, ({ page }) => page)) },
        {
          method: "GET",
          path: documentRoutes.docsScript,
          handler: serveDocument((exchange) => Effect.flatMap(docs, ({ script }) => script(exchange)))
        }
      ]
      : [])
  ]
  const fallback = makeFallback(routes)
  const traced = yield* tracing
  // Decided once: below LOG_LEVEL=info no access-log line is built at all.
  const accessLogged = traced || LogLevel.lessThanEqual(yield* FiberRef.get(FiberRef.currentMinimumLogLevel), LogLevel.Info)
  const withAccessLog = yield* makeAccessLog(traced)
  const runtime = yield* Effect.runtime<never>()
  const runSyncExit = Runtime.runSyncExit(runtime)
  const runPromise = Runtime.runPromise(runtime)

  /**
   * A GET reads no body: its program (a whoami: keys and rate limit in memory) usually never
   * waits, and answering it synchronously, without a promise or a scheduler turn, is a sixth of
   * its cost. Should it wait after all, it goes on in its fiber, joined; that costs more than a
   * promise from the start, which is why a POST (always a body to read) starts with one.
   */
  const answer = (method: string, program: Effect.Effect<Reply>): Reply | Promise<Reply> => {
    if (method !== "GET" && method !== "HEAD") return runPromise(program)
    const exit = runSyncExit(program)
    if (Exit.isSuccess(exit)) return exit.value
    const defect = Cause.squash(exit.cause)
    return Runtime.isAsyncFiberException(defect)
      ? runPromise(Fiber.join(defect.fiber as Fiber.RuntimeFiber<Reply>))
      : Promise.reject(defect)
  }

  const withServerSpan = (exchange: Exchange) => (self: Effect.Effect<Reply>) =>
    self.pipe(
      Effect.tap((reply) =>
        Effect.annotateCurrentSpan({
          "http.response.status_code": reply.status,
          "http.response.header.x-request-id": exchange.requestId
        })
      ),
      Effect.withSpan(`http.server ${exchange.request.method}`, {
        kind: "server",
        captureStackTrace: false,
        attributes: { "http.request.method": exchange.request.method, "http.route": exchange.route, "url.path": exchange.path }
      })
    )

  const renderer = makeRenderer()
  const refusals = makeRefusalTally()
  const summaries: ReadonlyArray<Summary> = [
    {
      interval: refusalSummaryInterval,
      write: () =>
        Effect.suspend(() =>
          Effect.forEach(refusals.drain(), ([clientAddress, count]) =>
            Effect.logInfo("repeated unauthorized requests", { clientAddress, count, status: 401 }), { discard: true })
        )
    },
    { interval: renderer.interval, write: renderer.summarize }
  ]

  const run = (
    handler: Handler,
    route: string,
    request: Request,
    path: string,
    params: Record<string, string>,
    clientAddress: string
  ) => {
    const startedAt = performance.now()
    const exchange: Exchange = {
      request,
      path,
      route,
      params,
      requestId: requestIdOf(request),
      headers: {},
      identity: undefined,
      refusal: undefined,
      bodyRead: false
    }
    const rendered = Effect.catchAllCause(handler(exchange), renderer.renderFailure)
    // A 401 is logged only as the first from its address in an interval; the rest are counted.
    const answered = accessLogged
      ? Effect.withFiberRuntime<Reply>((fiber) =>
        withAccessLog(rendered, fiber, exchange, startedAt, (status) => status !== 401 || refusals.first(clientAddress))
      )
      : rendered
    // Every line this request's fiber logs carries its id. The fiber is the request's own and ends
    // with it, so the annotation is set on it, not scoped (`Effect.annotateLogs` costs a sixth
    // of a whoami, restoring a value nobody reads afterwards).
    const program = Effect.zipRight(
      FiberRef.update(FiberRef.currentLogAnnotations, HashMap.set<string, unknown>("requestId", exchange.requestId)),
      traced ? withServerSpan(exchange)(answered) : answered
    )
    const reply = answer(request.method, program)
    return reply instanceof Promise
      ? reply.then((reply) => toWebResponse(exchange, reply))
      : toWebResponse(exchange, reply)
  }

  const fetch = (request: Request, client = inProcess): Response | Promise<Response> => {
    const path = rawPath(request.url)
    const found = fallback(request.method, path)
    if (found._tag === "Dispatch") return run(found.route.handler, found.route.path, request, path, found.params, client)
    return run(() => Effect.succeed(found.reply), found.route, request, path, {}, client)
  }

  const table: Edge["routes"] = {}
  for (const route of routes) {
    table[route.path] ??= {}
    table[route.path]![route.method] = (request, client) => {
      const path = rawPath(request.url)
      // Bun's router percent-decodes parameters and takes `;` in them: such a path is not this
      // route's spelling, and the fallback says so (404).
      return path.includes("%") || path.includes(";")
        ? fetch(request, client)
        : run(route.handler, route.path, request, path, request.params, client)
    }
  }
  const listening = (port: number) => {
    listeningPort = port
  }
  return {
    routes: table,
    fetch,
    listening,
    summaries
  } satisfies Edge
})

/** Why the server could not listen, as one sentence naming the variable to change. */
const cannotListen = (host: string, port: number, error: unknown) => {
  const code = (error as NodeJS.ErrnoException).code
  switch (code) {
    case "EADDRINUSE":
      return new StartupError({
        variable: "PORT",
        message: `PORT=${port}: another process is listening on ${host}:${port}; stop it or choose another PORT.`
      })
    case "EACCES":
      return new StartupError({
        variable: "PORT",
        message: `PORT=${port}: this user may not listen on it; choose a PORT above 1023.`
      })
    default:
      return new StartupError({
        variable: "HOST",
        message: `HOST=${host}: not an address of this machine to listen on (${code ?? String(error)}); use 0.0.0.0, 127.0.0.1 or one of its addresses.`
      })
  }
}

const internalError = new InternalError({ message: "An unexpected error occurred." })

const shuttingDown = errorReply(new ServiceUnavailable({ message: "The server is shutting down; retry on another instance." }))

/**
 * The API on `Bun.serve`: Bun's own router hands each API request to its handler. On SIGTERM
 * (README, Operating it: Shutdown) it first keeps serving for SHUTDOWN_DELAY_SECONDS with
 * `/readyz` at 503 and every answer closing its connection, so that a load balancer moves its
 * clients elsewhere before anything is refused; then it stops listening, answers late arrivals on
 * open connections with a 503 envelope, waits for what is in flight, and only then lets the
 * layers (the database) close.
 */
export const WebServerLive = Layer.scopedDiscard(
  Effect.gen(function*() {
    const { host, port } = yield* ServerConfig
    const delay = yield* ShutdownConfig
    const draining = yield* Draining
    const edge = yield* makeEdge
    // Added before the server, so they run after the drain (finalizers run last-added first):
    // the 401s and the outage's failures counted until the very end are logged too.
    yield* Effect.addFinalizer(() => Effect.forEach(edge.summaries, (summary) => summary.write(true), { discard: true }))

    // Closing: told to stop, every answer closes its connection. Stopped: no longer listening.
    let closing = false
    let stopped = false
    let inFlight = 0
    const idle = yield* Deferred.make<void>()

    const lateArrival = (request: Request) => {
      const response = toWebResponse({ request, requestId: requestIdOf(request), headers: {}, bodyRead: false }, shuttingDown)
      response.headers.set("connection", "close")
      return response
    }

    const settle = (response: Response) => {
      inFlight--
      if (closing) {
        response.headers.set("connection", "close")
        if (stopped && inFlight === 0) Deferred.unsafeDone(idle, Effect.void)
      }
      return response
    }
    const failed = (error: unknown): never => {
      inFlight--
      if (stopped && inFlight === 0) Deferred.unsafeDone(idle, Effect.void)
      throw error
    }

    // Requests per connection (client address and port) in the current window. Bun answers the
    // requests pipelined on one connection one after the other without serving anyone else: past
    // the limit the connection is closed after its answer, as nginx's keepalive_requests does, so
    // one client cannot hold the event loop for long.
    const perConnection = new Map<string, { served: number; since: number }>()
    // Forgets connections whose window ended: the map holds at most the connections of a window.
    const sweep = setInterval(() => {
      const now = performance.now()
      for (const [connection, { since }] of perConnection) {
        if (now - since > requestsPerConnectionWindowMs) perConnection.delete(connection)
      }
    }, requestsPerConnectionWindowMs)
    sweep.unref()
    yield* Effect.addFinalizer(() => Effect.sync(() => clearInterval(sweep)))
    const overLimit = (peer: { readonly address: string; readonly port: number } | null | undefined) => {
      if (peer === undefined || peer === null) return false
      const connection = `${peer.address}:${peer.port}`
      const now = performance.now()
      const window = perConnection.get(connection)
      if (window === undefined || now - window.since > requestsPerConnectionWindowMs) {
        perConnection.set(connection, { served: 1, since: now })
        return requestsPerConnection <= 1
      }
      window.served++
      return window.served >= requestsPerConnection
    }

    const guard = (serve: Handle) => (request: Request & { params: Record<string, string> }, server?: Bun.Server<unknown>) => {
      if (stopped) return lateArrival(request)
      // Asked once per request: an object each time.
      const peer = server?.requestIP(request)
      const closing = overLimit(peer)
      inFlight++
      let response: Response | Promise<Response>
      try {
        response = serve(request, peer?.address ?? inProcess)
      } catch (error) {
        return failed(error)
      }
      if (!closing) return response instanceof Promise ? response.then(settle, failed) : settle(response)
      const close = (response: Response) => {
        response.headers.set("connection", "close")
        return settle(response)
      }
      return response instanceof Promise ? response.then(close, failed) : close(response)
    }

    const routes = Object.fromEntries(
      Object.entries(edge.routes).map(([path, methods]) => [
        path,
        Object.fromEntries(Object.entries(methods).map(([method, serve]) => [method, guard(serve)]))
      ])
    )

    const server = yield* Effect.acquireRelease(
      // Bun's own body limit would answer a large declared length with a bare 413; the activation
      // refuses those by their Content-Length and stops reading any body past 16 KiB.
      Effect.try({
        try: () => {
          const server = Bun.serve({
            hostname: host,
            port,
            routes,
            fetch: guard(edge.fetch),
            maxRequestBodySize: Number.MAX_SAFE_INTEGER,
            idleTimeout: 30,
            // Never Bun's HTML error page with a stack: an error that escaped everything above is a 500 envelope.
            development: false,
            // Said outright: with `development: false` alone Bun 1.4.4 binds a port already in use
            // (as SO_REUSEPORT would), and two servers would share one PORT without a word.
            reusePort: false,
            error: (error) => {
              console.error(JSON.stringify({ message: "unhandled error", logLevel: "ERROR", timestamp: new Date().toISOString(), cause: String(error), annotations: {} }))
              return new Response(errorReply(internalError).body, { status: 500, headers: { "content-type": "application/json" } })
            }
          })
          // At once, before any request can make a document with the configured port (0, say).
          edge.listening(server.port!)
          return server
        },
        catch: (error) => cannotListen(host, port, error)
      }),
      (server) =>
        Effect.gen(function*() {
          closing = true
          draining.start()
          yield* Effect.logInfo("draining", { inFlight, delaySeconds: Duration.toSeconds(delay) })
          yield* Effect.sleep(delay)
          stopped = true
          yield* Effect.logInfo("closing the listener", { inFlight })
          void server.stop(false)
          if (inFlight === 0) Deferred.unsafeDone(idle, Effect.void)
          yield* Deferred.await(idle).pipe(Effect.timeout(drainTimeout), Effect.ignore)
          yield* Effect.promise(() => server.stop(true))
          yield* Effect.logInfo("stopped", { unfinished: inFlight })
        })
    )
    for (const summary of edge.summaries) {
      yield* summary.write(false).pipe(Effect.repeat(Schedule.spaced(summary.interval)), Effect.forkScoped)
    }
    // Whatever LOG_LEVEL says (short of none): with PORT=0 it is the only way to learn the port.
    const level = yield* FiberRef.get(FiberRef.currentMinimumLogLevel)
    yield* Effect.logInfo(`Listening on http://${server.hostname}:${server.port}`).pipe(
      Logger.withMinimumLogLevel(level._tag === "None" ? level : LogLevel.Info)
    )
  })
)
