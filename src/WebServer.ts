import { Etag, FileSystem, HttpApiBuilder, HttpApp, HttpPlatform, type HttpRouter, Path } from "@effect/platform"
import { BunHttpServer } from "@effect/platform-bun"
import { Context, Deferred, Duration, Effect, Layer, Runtime } from "effect"
import { ServerConfig } from "./Config.ts"
import { errorResponse, ServiceUnavailable } from "./Domain/Errors.ts"
import { emptyBody, maxBodyBytes, readBody, RequestBody } from "./RequestBody.ts"
import { isSaneRequestId } from "./RequestLog.ts"

/** How long in-flight requests may take to finish after SIGTERM before their connections are closed. */
export const drainTimeout = Duration.seconds(10)
/** A body that has not fully arrived by then is given up on, so slow senders cannot hold the server. */
export const bodyTimeoutMs = 10_000

const unavailable = HttpApp.toWebHandler(
  Effect.succeed(errorResponse(new ServiceUnavailable({ message: "The server is shutting down; retry on another instance." })))
)

/**
 * The API behind `Bun.serve`. @effect/platform-bun's server interrupts in-flight
 * requests on shutdown and answers new ones with a plain-text 404; this one stops
 * listening, answers late arrivals with a 503 envelope, waits for what is in flight,
 * and only then lets the database close. It also reads each body itself, bounded in
 * size and time, before the app sees the request.
 */
export const WebServerLive = Layer.scopedDiscard(
  Effect.gen(function*() {
    const { host, port } = yield* ServerConfig
    const app = yield* HttpApiBuilder.httpApp
    // Every request copies its runtime's context: keep only what the app asks for per request
    // (its handlers and middleware captured their services when they were built).
    const runtime = yield* Effect.runtime<HttpRouter.HttpRouter.DefaultServices>()
    const handle = HttpApp.toWebHandlerRuntime(Runtime.make({
      ...runtime,
      context: Context.pick(HttpPlatform.HttpPlatform, FileSystem.FileSystem, Path.Path, Etag.Generator)(runtime.context)
    }))(app)

    let draining = false
    let inFlight = 0
    const idle = yield* Deferred.make<void>()
    const settle = () => {
      inFlight--
      if (draining && inFlight === 0) Deferred.unsafeDone(idle, Effect.void)
    }

    const lateArrival = async (request: Request) => {
      const response = await unavailable(request)
      const requestId = request.headers.get("x-request-id")
      response.headers.set("x-request-id", isSaneRequestId(requestId) ? requestId : crypto.randomUUID())
      return response
    }

    const forward = async (request: Request) => {
      if (request.body === null) return await handle(request, Context.make(RequestBody, emptyBody))
      const body = await readBody(request, maxBodyBytes, bodyTimeoutMs)
      const init = { method: request.method, headers: request.headers, signal: request.signal }
      const forwarded = new Request(request.url, body._tag === "Read" ? { ...init, body: body.bytes } : init)
      const response = await handle(forwarded, Context.make(RequestBody, body))
      // The rest of an unread body is still on the connection: it cannot carry another request.
      if (body._tag !== "Read") response.headers.set("connection", "close")
      return response
    }

    const fetch = async (request: Request): Promise<Response> => {
      if (draining) {
        const response = await lateArrival(request)
        response.headers.set("connection", "close")
        return response
      }
      inFlight++
      try {
        const response = await forward(request)
        if (draining) response.headers.set("connection", "close")
        return response
      } finally {
        settle()
      }
    }

    const server = yield* Effect.acquireRelease(
      // Bun's own body limit would answer a large declared length with a bare 413; readBody
      // refuses those by their Content-Length and stops reading any body past 16 KiB.
      Effect.sync(() =>
        Bun.serve({ hostname: host, port, fetch, maxRequestBodySize: Number.MAX_SAFE_INTEGER, idleTimeout: 30 })
      ),
      (server) =>
        Effect.gen(function*() {
          draining = true
          yield* Effect.logInfo("draining", { inFlight })
          void server.stop(false)
          if (inFlight === 0) Deferred.unsafeDone(idle, Effect.void)
          yield* Deferred.await(idle).pipe(Effect.timeout(drainTimeout), Effect.ignore)
          yield* Effect.promise(() => server.stop(true))
          yield* Effect.logInfo("stopped", { unfinished: inFlight })
        })
    )
    yield* Effect.logInfo(`Listening on http://${server.hostname}:${server.port}`)
  })
).pipe(
  Layer.provide([HttpApiBuilder.Router.Live, HttpApiBuilder.Middleware.layer, BunHttpServer.layerContext])
)
