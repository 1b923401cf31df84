import type * as HttpApi from "@effect/platform/HttpApi"
import { Context, Deferred, Duration, Effect, FiberRef, Layer, Logger, LogLevel, Schedule } from "effect"
import { ConnectionsConfig, ServerConfig, ShutdownConfig, StartupError, TrustedProxiesConfig } from "../Config.ts"
import { InternalError, ServiceUnavailable } from "../Domain/Errors.ts"
import { Draining } from "../Draining.ts"
import {
  type Connection,
  connectionsWithin,
  descriptorLimit,
  makeConnectionLimit,
  type Refusal
} from "./ConnectionLimit.ts"
import { ListeningPort } from "./Documents.ts"
import { type EdgeOptions, type Handle, inProcess, makeEdge } from "./Edge.ts"
import { clientGone, closesForUnreadBody, errorReply, toWebResponse } from "./Render.ts"

/** How long in-flight requests may take to finish once the listener closes, before their connections are closed. */
const drainTimeout = Duration.seconds(10)

/** How long a connection may stay open without a request before Bun closes it (and it stops counting). */
const idleTimeoutSeconds = 30

/** How often the connections refused and closed are summed up in the log. */
const connectionSummaryInterval = Duration.minutes(1)
/**
 * Why the server could not listen, as one sentence naming the variable to change. A port in use
 * is said to be taken on this machine: the other process may hold it on another address than
 * HOST (0.0.0.0 and 127.0.0.1 exclude each other), and which one is not known here.
 */
const cannotListen = (host: string, port: number, error: unknown) => {
  const code = (error as NodeJS.ErrnoException).code
  switch (code) {
    case "EADDRINUSE":
      return new StartupError({
        variable: "PORT",
        message:
          `PORT=${port}: another process on this machine is listening on port ${port}; stop it or choose another PORT.`
      })
    case "EACCES":
      return new StartupError({
        variable: "PORT",
        message: `PORT=${port}: this user may not listen on it; choose a PORT above 1023.`
      })
    default:
      return new StartupError({
        variable: "HOST",
        message: `HOST=${host}: not an address of this machine to listen on (${
          code ?? String(error)
        }); use 0.0.0.0, 127.0.0.1 or one of its addresses.`
      })
  }
}

const internalError = new InternalError({ message: "An unexpected error occurred." })

/** An error that escaped everything above: logged, and answered with the 500 envelope, never Bun's HTML page with a stack. */
const unhandled = (error: Error) => {
  console.error(
    JSON.stringify({
      message: "unhandled error",
      logLevel: "ERROR",
      timestamp: new Date().toISOString(),
      cause: String(error),
      annotations: {}
    })
  )
  return new Response(errorReply(internalError).body, {
    status: 500,
    headers: { "content-type": "application/json", "x-content-type-options": "nosniff" }
  })
}

const shuttingDown = errorReply(
  new ServiceUnavailable({ message: "The server is shutting down; retry on another instance." })
)

const refusals: Record<Refusal, ReturnType<typeof errorReply>> = {
  address: errorReply(
    new ServiceUnavailable({
      message: "Too many connections from this address; send requests on the connections already open."
    })
  ),
  total: errorReply(
    new ServiceUnavailable({ message: "The server holds as many connections as it can; retry in a moment." })
  )
}

type Fetch = (request: Request, server: Bun.Server<unknown>) => Response | Promise<Response>
type Routes = Record<
  string,
  Record<string, (request: Bun.BunRequest, server: Bun.Server<unknown>) => Response | Promise<Response>>
>

/**
 * The API's listener, bound before anything else of the server is built (docs/operators.md, Configuration):
 * a start refused for its address or port has opened no database. Requests that arrive before the
 * server hands it its routes (`serve`) wait for them.
 */
export class Listener extends Context.Tag("Edge/Listener")<Listener, {
  readonly server: Bun.Server<unknown>
  readonly serve: (handlers: { readonly routes: Routes; readonly fetch: Fetch }) => void
}>() {
  /** On HOST and PORT. */
  static readonly Live = Layer.scoped(
    Listener,
    Effect.flatMap(ServerConfig, ({ host, port }) =>
      // Said outright: with `development: false` alone Bun 1.4.4 binds a port already in use
      // (as SO_REUSEPORT would), and two servers would share one PORT without a word.
      listen({ hostname: host, port, reusePort: false }, (error) => cannotListen(host, port, error)))
  )

  /** On a Unix socket at `path`, which no proxy and no other user reaches (the warm-up's copy). */
  static readonly unixSocket = (path: string) =>
    Layer.scoped(Listener, Effect.orDie(listen({ unix: path }, (error) => error)))
}

const listen = <E>(
  where: { readonly hostname: string; readonly port: number; readonly reusePort: false } | { readonly unix: string },
  cannotListen: (error: unknown) => E
) =>
  Effect.acquireRelease(
    Effect.try({
      try: () => {
        const handed = Promise.withResolvers<Fetch>()
        const options = {
          fetch: (request: Request, server: Bun.Server<unknown>) =>
            handed.promise.then((fetch) => fetch(request, server)),
          // Bun's own body limit would answer a large declared length with a bare 413, and any limit
          // it holds does (Number.MAX_SAFE_INTEGER: a length from 2^53 up); the activation refuses
          // those by their Content-Length with the envelope, and stops reading any body past 16 KiB.
          maxRequestBodySize: Number.POSITIVE_INFINITY,
          development: false,
          error: unhandled
        } as const
        const server: Bun.Server<unknown> = "unix" in where
          ? Bun.serve({ ...options, unix: where.unix })
          : Bun.serve({ ...options, ...where, idleTimeout: idleTimeoutSeconds })
        return Listener.of({
          server,
          serve: ({ fetch, routes }) => {
            server.reload({ routes, fetch, development: false, error: unhandled })
            handed.resolve(fetch)
          }
        })
      },
      catch: cannotListen
    }),
    ({ server }) => Effect.promise(() => server.stop(true))
  )

/**
 * The API on the `Listener`: Bun's own router hands each API request to its handler. On SIGTERM
 * (docs/operators.md, Operating it: Shutdown) it first keeps serving for SHUTDOWN_DELAY_SECONDS with
 * `/readyz` at 503 and every answer closing its connection, so that a load balancer moves its
 * clients elsewhere before anything is refused (SIGINT skips the delay, or the rest of it: no
 * balancer waits on a terminal's Ctrl-C); then it stops listening, answers late arrivals on
 * open connections with a 503 envelope, waits for what is in flight, and only then lets the
 * layers (the database) close. The edge it serves is what the composition root (`App.ts`) hands it.
 * Each connection counts against its peer address's limit and the process's (docs/operators.md, Operating it:
 * Connections): a request over either is answered 503 and its connection closed.
 */
export const WebServerLive = <Api extends HttpApi.HttpApi.Any, E, R>(options: Effect.Effect<EdgeOptions<Api>, E, R>) =>
  Layer.scopedDiscard(Effect.gen(function*() {
    const { server, serve } = yield* Listener
    const delay = yield* ShutdownConfig
    const draining = yield* Draining
    // The port the documents name unless PUBLIC_URL is set; a Unix socket has none.
    const edge = yield* Effect.flatMap(options, makeEdge).pipe(
      Effect.provideService(ListeningPort, server.port ?? 0)
    )
    // Added before the server, so they run after the drain (finalizers run last-added first):
    // the 401s and the outage's failures counted until the very end are logged too.
    yield* Effect.addFinalizer(() =>
      Effect.forEach(edge.summaries, (summary) => summary.write(true), { discard: true })
    )

    // Told to stop (`draining`), every answer closes its connection. Stopped: no longer listening.
    let stopped = false
    let inFlight = 0
    const idle = yield* Deferred.make<void>()

    const { perAddress, perProxy } = yield* ConnectionsConfig
    const limits = { perAddress, perProxy, total: connectionsWithin(descriptorLimit()) }
    const connections = yield* makeConnectionLimit({
      limits,
      trustedProxies: yield* TrustedProxiesConfig,
      idleTimeoutSeconds,
      shorten: (request, seconds) => server.timeout(request, seconds)
    })

    /** An answer of the server's own, closing its connection. */
    const closing = (request: Request, peer: string, reply: ReturnType<typeof errorReply>) => {
      const { requestId } = edge.callerOf(request, peer)
      const response = toWebResponse({ request, requestId, bodyRead: false }, reply)
      response.headers.set("connection", "close")
      return response
    }

    const settle = (response: Response, connection: Connection | undefined, request: Request) => {
      inFlight--
      let close = false
      if (draining.started()) {
        close = true
        if (stopped && inFlight === 0) Deferred.unsafeDone(idle, Effect.void)
      }
      if (connection !== undefined) {
        if (connections.last(connection)) close = true
        // A connection ending with this answer, by the server's word (this one's, or the edge's for
        // a body left unread) or its client's, no longer counts; nor one whose client has gone,
        // which the edge answers 499 once its request stops.
        connections.answered(
          connection,
          close || response.status === clientGone || closesForUnreadBody(response) ||
            request.headers.get("connection")?.toLowerCase() === "close"
        )
      }
      if (close) response.headers.set("connection", "close")
      return response
    }
    const failed = (connection: Connection | undefined) => (error: unknown): never => {
      inFlight--
      if (connection !== undefined) connections.answered(connection, false)
      if (stopped && inFlight === 0) Deferred.unsafeDone(idle, Effect.void)
      throw error
    }

    const guard = (serve: Handle) => (request: Request, server?: Bun.Server<unknown>) => {
      // Asked once per request: an object each time.
      const peer = server?.requestIP(request)
      const address = peer?.address ?? inProcess
      if (stopped) return closing(request, address, shuttingDown)
      const connection = connections.admit(request, peer)
      if (typeof connection === "string") return closing(request, address, refusals[connection])
      inFlight++
      let response: Response | Promise<Response>
      try {
        // Bun's router hands its handlers the request with its `params`; the fallback needs none.
        response = serve(request as Parameters<Handle>[0], address)
      } catch (error) {
        return failed(connection)(error)
      }
      return response instanceof Promise
        ? response.then((response) => settle(response, connection, request), failed(connection))
        : settle(response, connection, request)
    }

    const routes = Object.fromEntries(
      Object.entries(edge.routes).map(([path, methods]) => [
        path,
        Object.fromEntries(Object.entries(methods).map(([method, serve]) => [method, guard(serve)]))
      ])
    )
    serve({ routes, fetch: guard(edge.fetch) })
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        draining.start()
        const atOnce = yield* draining.atOnce
        yield* Effect.logInfo("draining", { inFlight, delaySeconds: atOnce ? 0 : Duration.toSeconds(delay) })
        yield* atOnce
          // No delay, but a turn of the event loop: a request that has already arrived is then
          // answered, where closing its connection now would reset it.
          ? Effect.sleep(Duration.zero)
          // Each side interruptible: in a finalizer they would not be, and the race would wait for its loser.
          : Effect.raceFirst(
            Effect.interruptible(Effect.sleep(delay)),
            Effect.zipRight(
              Effect.interruptible(draining.whenAtOnce),
              Effect.logInfo("SIGINT: the rest of the shutdown delay skipped")
            )
          )
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
    const writeConnectionSummary = Effect.suspend(() => {
      const { firstAddressRefused, overAddressLimit, overTotal, shortened } = connections.takeCounts()
      return overAddressLimit + overTotal + shortened === 0 ? Effect.void : Effect.logWarning(
        "connections refused or closed",
        { overAddressLimit, overTotal, shortened, firstAddressRefused: firstAddressRefused ?? null }
      )
    })
    yield* writeConnectionSummary.pipe(Effect.repeat(Schedule.spaced(connectionSummaryInterval)), Effect.forkScoped)
    // Whatever LOG_LEVEL says (short of none): with PORT=0 it is the only way to learn the port.
    const level = yield* FiberRef.get(FiberRef.currentMinimumLogLevel)
    yield* Effect.logInfo(
      server.port === undefined
        ? `Listening on ${server.url.href}`
        : `Listening on http://${server.hostname}:${server.port}`
    ).pipe(
      // What the connections are limited to (docs/operators.md, Operating it: Connections); null: no limit known.
      Effect.annotateLogs({
        connectionsPerAddress: perAddress,
        connectionsPerProxy: perProxy,
        connections: Number.isFinite(limits.total) ? limits.total : null
      }),
      Logger.withMinimumLogLevel(level._tag === "None" ? level : LogLevel.Info)
    )
  }))
