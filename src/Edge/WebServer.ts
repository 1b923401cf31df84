import type { HttpApi } from "@effect/platform"
import { Deferred, Duration, Effect, FiberRef, Layer, Logger, LogLevel, Schedule } from "effect"
import { ServerConfig, ShutdownConfig, StartupError } from "../Config.ts"
import { InternalError, ServiceUnavailable } from "../Domain/Errors.ts"
import { Draining } from "../Draining.ts"
import { makeConnectionLimit } from "./ConnectionLimit.ts"
import { type EdgeOptions, type Handle, inProcess, makeEdge } from "./Edge.ts"
import { errorReply, toWebResponse } from "./Render.ts"

/** How long in-flight requests may take to finish after SIGTERM before their connections are closed. */
const drainTimeout = Duration.seconds(10)

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

const shuttingDown = errorReply(
  new ServiceUnavailable({ message: "The server is shutting down; retry on another instance." })
)

/**
 * The API on `Bun.serve`: Bun's own router hands each API request to its handler. On SIGTERM
 * (README, Operating it: Shutdown) it first keeps serving for SHUTDOWN_DELAY_SECONDS with
 * `/readyz` at 503 and every answer closing its connection, so that a load balancer moves its
 * clients elsewhere before anything is refused; then it stops listening, answers late arrivals on
 * open connections with a 503 envelope, waits for what is in flight, and only then lets the
 * layers (the database) close. The edge it serves is what the composition root (`App.ts`) hands it.
 */
export const WebServerLive = <Api extends HttpApi.HttpApi.Any, E, R>(options: Effect.Effect<EdgeOptions<Api>, E, R>) =>
  Layer.scopedDiscard(Effect.gen(function*() {
    const { host, port } = yield* ServerConfig
    const delay = yield* ShutdownConfig
    const draining = yield* Draining
    const edge = yield* makeEdge(yield* options)
    // Added before the server, so they run after the drain (finalizers run last-added first):
    // the 401s and the outage's failures counted until the very end are logged too.
    yield* Effect.addFinalizer(() =>
      Effect.forEach(edge.summaries, (summary) => summary.write(true), { discard: true })
    )

    // Told to stop (`draining`), every answer closes its connection. Stopped: no longer listening.
    let stopped = false
    let inFlight = 0
    const idle = yield* Deferred.make<void>()

    const lateArrival = (request: Request, peer: string) => {
      const { requestId } = edge.callerOf(request, peer)
      const response = toWebResponse({ request, requestId, bodyRead: false }, shuttingDown)
      response.headers.set("connection", "close")
      return response
    }

    const settle = (response: Response) => {
      inFlight--
      if (draining.started()) {
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

    const connections = yield* makeConnectionLimit

    const guard =
      (serve: Handle) => (request: Request & { params: Record<string, string> }, server?: Bun.Server<unknown>) => {
        // Asked once per request: an object each time.
        const peer = server?.requestIP(request)
        if (stopped) return lateArrival(request, peer?.address ?? inProcess)
        const lastOnConnection = connections.overLimit(peer)
        inFlight++
        let response: Response | Promise<Response>
        try {
          response = serve(request, peer?.address ?? inProcess)
        } catch (error) {
          return failed(error)
        }
        if (!lastOnConnection) return response instanceof Promise ? response.then(settle, failed) : settle(response)
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
          })
          // At once, before any request can make a document with the configured port (0, say).
          edge.listening(server.port!)
          return server
        },
        catch: (error) => cannotListen(host, port, error)
      }),
      (server) =>
        Effect.gen(function*() {
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
  }))
