/**
 * whoami end to end on Effect 4, served by Effect 4's own HttpApi server: `HttpApiBuilder.layer(Api)`
 * with the identity group's handler, the key's bearer middleware (the key, its rate limit, its
 * last use, the RateLimit headers and Api-Key-Expires) and the decode errors' middleware, behind
 * one global `HttpRouter.middleware` (one spelling per route, 404/405 with `Allow` as envelopes,
 * nosniff, X-Request-Id, Date on HEAD, the access log), run by `HttpRouter.toWebHandler` inside
 * `Bun.serve`. Per request it does the work the service's production path does for whoami
 * (README: For integrators, Rate limiting, Errors, Operating it: Logs); README.md beside this file
 * says what it leaves out.
 */
import { Cause, Context, Duration, Effect, Fiber, Layer, Redacted, type Types } from "effect"
import { HttpRouter, HttpServer, HttpServerError, HttpServerRequest, HttpServerResponse } from "effect/http"
import { HttpApiBuilder, HttpApiMiddleware } from "effect/http-api"
import { RateLimiter } from "effect/persistence"
import { writeSync } from "node:fs"
import { resolve } from "node:path"
import {
  Api,
  ApiKeyAuth,
  CurrentKey,
  DecodeErrors,
  Exchange,
  InternalError,
  type KeyNote,
  MethodNotAllowed,
  NotFound,
  RateLimited,
  ServiceUnavailable,
  Unauthorized,
  ValidationError
} from "./Api.ts"
import {
  ApiKeys,
  type Authenticated,
  DatabaseUnavailable,
  isRefusal,
  type KeyRefusal,
  KeyUsage,
  type RateLimitPolicy
} from "./Keys.ts"

// -- Configuration: the service's variables and defaults (README, Configuration) ----------------

const env = process.env
const port = Number(env["PORT"] ?? "3000")
const host = env["HOST"] ?? "0.0.0.0"
const databaseFile = resolve((env["DATABASE_URL"] ?? "data/campaign-api.sqlite").replace(/^sqlite:(\/\/)?/, ""))
const logLevel = (env["LOG_LEVEL"] ?? "info").toLowerCase()
/** Below info (warn, error, fatal, none) no access line is made at all, as the service decides once. */
const accessLogged = ["all", "trace", "debug", "info"].includes(logLevel)
const errorsLogged = logLevel !== "none"
const serverLimit: RateLimitPolicy = {
  max: Number(env["RATE_LIMIT_MAX"] ?? "120"),
  windowSeconds: Number(env["RATE_LIMIT_WINDOW_SECONDS"] ?? "60")
}

// -- Logging: JSON lines on stderr, written together once per turn of the event loop (src/Logging.ts)

const bufferedStderr = (() => {
  let pending: Array<string> = []
  const flush = () => {
    const text = Buffer.from(`${pending.join("\n")}\n`)
    pending = []
    let at = 0
    while (at < text.length) {
      try {
        at += writeSync(2, text, at)
      } catch {
        return
      }
    }
  }
  process.on("exit", () => {
    if (pending.length > 0) flush()
  })
  return (line: string) => {
    if (pending.push(line) === 1) setImmediate(flush)
  }
})()

const isoTimestamp = (() => {
  let millis = Number.NaN
  let iso = ""
  return (at: number) => {
    if (at !== millis) {
      millis = at
      iso = new Date(at).toISOString()
    }
    return iso
  }
})()

const logLine = (level: string, message: string, annotations: Record<string, unknown>, cause?: string) =>
  bufferedStderr(JSON.stringify({
    message,
    logLevel: level,
    timestamp: isoTimestamp(Date.now()),
    ...(cause === undefined ? {} : { cause }),
    annotations,
    spans: {},
    fiberId: `#${Fiber.getCurrent()?.id ?? 0}`
  }))

// -- One request as the edge keeps it ------------------------------------------------------------

const noKey: KeyNote = { keyId: null, brandId: null, reason: null }

/** Who is at the other end, as `Bun.serve` knows it, and whether Bun's table matched the path as sent. */
class Peer extends Context.Service<Peer, { readonly address: string; readonly asSpelled: boolean }>()("Edge/Peer") {}

// -- The rate limit: the library's token bucket in memory, per key (src/RateLimit.ts) -------------

interface RateLimitDecision {
  readonly allowed: boolean
  readonly remaining: number
  readonly retryAfterSeconds: number
}

/**
 * The library's in-process store, with the moment it first saw each bucket noted beside it: it
 * refills on a fixed schedule from then, which tells the seconds to the next token (README, Choices
 * where the specification is silent: `Retry-After` and `t`).
 */
const firstSeen = new Map<string, number>()
const StoreMemory = Layer.effect(
  RateLimiter.RateLimiterStore,
  Effect.map(Effect.provide(Effect.service(RateLimiter.RateLimiterStore), RateLimiter.layerStoreMemory), (library) =>
    RateLimiter.RateLimiterStore.of({
      ...library,
      tokenBucket: (options) =>
        Effect.suspend(() => {
          if (!firstSeen.has(options.key)) firstSeen.set(options.key, Date.now())
          return library.tokenBucket(options)
        })
    }))
)

class RateLimit extends Context.Service<RateLimit, {
  readonly consume: (keyId: string, own: RateLimitPolicy | null) => Effect.Effect<RateLimitDecision>
}>()("RateLimit") {
  static readonly layer = Layer.effect(
    RateLimit,
    Effect.gen(function*() {
      const limiter = yield* RateLimiter.RateLimiter
      const chargeUnder = (limit: RateLimitPolicy, bucketOf: (keyId: string) => string) => {
        const window = Duration.seconds(limit.windowSeconds)
        const refillMillis = Duration.toMillis(window) / limit.max
        const charge = { algorithm: "token-bucket", onExceeded: "fail", window, limit: limit.max } as const
        const unlimited: RateLimitDecision = { allowed: true, remaining: limit.max, retryAfterSeconds: 0 }
        const emptied = (bucket: string, allowed: boolean): RateLimitDecision => {
          const now = Date.now()
          const millis = refillMillis - ((now - (firstSeen.get(bucket) ?? now)) % refillMillis)
          return { allowed, remaining: 0, retryAfterSeconds: Math.max(1, Math.ceil(millis / 1000)) }
        }
        return (keyId: string) => {
          const bucket = bucketOf(keyId)
          return Effect.match(limiter.consume({ ...charge, key: bucket }), {
            onSuccess: (result) =>
              result.remaining > 0
                ? { allowed: true, remaining: result.remaining, retryAfterSeconds: 0 }
                : emptied(bucket, true),
            // Exceeded: refused. Otherwise the store did not answer: fail open (README, Rate limiting).
            onFailure: (error) => error.reason._tag === "RateLimitExceeded" ? emptied(bucket, false) : unlimited
          })
        }
      }
      const serverWide = chargeUnder(serverLimit, (keyId) => keyId)
      const own = new WeakMap<RateLimitPolicy, (keyId: string) => Effect.Effect<RateLimitDecision>>()
      return {
        consume: (keyId, limit) => {
          if (limit === null) return serverWide(keyId)
          let charge = own.get(limit)
          if (charge === undefined) {
            own.set(limit, charge = chargeUnder(limit, (id) => `${id}:${limit.max}/${limit.windowSeconds}`))
          }
          return charge(keyId)
        }
      }
    })
  ).pipe(Layer.provide(RateLimiter.layer), Layer.provide(StoreMemory))
}

// -- The key's middleware (src/ApiKeys/Http.ts) ---------------------------------------------------

/** The scheme in any case, exactly one token; anything else is no key (README, Errors: 401). */
const bearerToken = /^bearer +[^\s,]+ *$/i
const bearerCredentials = /^bearer\s+\S/i
const unauthorized = new Unauthorized({ message: "The API key is missing or invalid." })

const limitText = (limit: RateLimitPolicy, whose: string) => ({
  policy: `"default";q=${limit.max};w=${limit.windowSeconds}`,
  exceeded: `Rate limit exceeded: ${limit.max} requests per ${limit.windowSeconds} seconds ${whose}.`
})

const ApiKeyAuthLive = Layer.effect(
  ApiKeyAuth,
  Effect.gen(function*() {
    const keys = yield* ApiKeys
    const usage = yield* KeyUsage
    const rateLimit = yield* RateLimit
    const serverWide = limitText(serverLimit, "per API key")
    const ownText = new WeakMap<RateLimitPolicy, ReturnType<typeof limitText>>()
    const textOf = (limit: RateLimitPolicy) => {
      let text = ownText.get(limit)
      if (text === undefined) ownText.set(limit, text = limitText(limit, "for this API key"))
      return text
    }
    let lastEnd = { at: Number.NaN, header: "" }
    const endHeader = (at: number) => {
      if (lastEnd.at !== at) lastEnd = { at, header: new Date(at).toUTCString() }
      return lastEnd.header
    }
    const notes = new WeakMap<Authenticated["identity"], KeyNote>()
    const noteOf = (identity: Authenticated["identity"]) => {
      let note = notes.get(identity)
      if (note === undefined) {
        notes.set(identity, note = { keyId: identity.keyId, brandId: identity.brandId, reason: null })
      }
      return note
    }

    const refuse = (exchange: Exchange["Service"], refusal: KeyRefusal) => {
      exchange.note = refusal
      exchange.headers["www-authenticate"] = "Bearer"
      return Effect.fail(unauthorized)
    }

    return ApiKeyAuth.of({
      bearer: (
        httpEffect,
        { credential }
      ): Effect.Effect<
        HttpServerResponse.HttpServerResponse,
        Types.unhandled | Unauthorized | RateLimited,
        HttpServerRequest.HttpServerRequest
      > =>
        Effect.contextWith((
          context: Context.Context<HttpServerRequest.HttpServerRequest>
        ): Effect.Effect<HttpServerResponse.HttpServerResponse, Types.unhandled | Unauthorized | RateLimited> => {
          // The edge's global middleware provides the request's Exchange around every route. A
          // middleware's `requires` is a requirement of the layers in 4.1.0, not of the request, so
          // it is read from the request's context as the router left it.
          const exchange = Context.getUnsafe(context as unknown as Context.Context<Exchange>, Exchange)
          const header = Context.getUnsafe(context, HttpServerRequest.HttpServerRequest).headers["authorization"]
          if (header === undefined || !bearerToken.test(header)) {
            const reason = header !== undefined && bearerCredentials.test(header) ? "malformed" : "missing"
            return refuse(exchange, { reason, keyId: null, brandId: null })
          }
          // A database that cannot vouch for the key is a defect, answered 503 by the edge.
          const result = keys.authenticate(Redacted.value(credential).trim())
          if (isRefusal(result)) return refuse(exchange, result)
          const { endsAt, identity, rateLimit: own, secretSha256 } = result
          usage.record(identity.keyId, secretSha256)
          const limit = own === null ? serverWide : textOf(own)
          return Effect.flatMap(rateLimit.consume(identity.keyId, own), (
              decision
            ): Effect.Effect<HttpServerResponse.HttpServerResponse, Types.unhandled | RateLimited> => {
            const headers = exchange.headers
            headers["ratelimit-policy"] = limit.policy
            headers["ratelimit"] = `"default";r=${decision.remaining};t=${decision.retryAfterSeconds}`
            if (endsAt !== null) headers["api-key-expires"] = endHeader(endsAt)
            exchange.note = noteOf(identity)
            if (!decision.allowed) {
              headers["retry-after"] = String(decision.retryAfterSeconds)
              return Effect.fail(
                new RateLimited({ message: `${limit.exceeded} Retry after ${decision.retryAfterSeconds} seconds.` })
              )
            }
            return Effect.provideService(httpEffect, CurrentKey, identity)
          })
        })
    })
  })
)

// -- Decode errors: one sentence naming the query parameter (src/Edge/Endpoint.ts) ----------------

/** The first key of a schema issue's path, walked without formatting the value. */
const firstKey = (issue: unknown): PropertyKey | undefined => {
  let at = issue as { _tag?: string; path?: ReadonlyArray<PropertyKey>; issue?: unknown; issues?: unknown } | undefined
  while (at !== undefined) {
    if (at._tag === "Pointer" && at.path !== undefined && at.path.length > 0) return at.path[0]
    at = (at.issue ?? (Array.isArray(at.issues) ? at.issues[0] : undefined)) as typeof at
  }
  return undefined
}

const DecodeErrorsLive = HttpApiMiddleware.layerSchemaErrorTransform(DecodeErrors, (error) => {
  const name = firstKey((error.cause as { issue?: unknown }).issue)
  const message = error.kind !== "Query"
    ? "The request is invalid."
    : name === ""
    ? "A query parameter has no name (nothing before its `=`); leave it out."
    : `${String(name)} is not a query parameter of this operation.`
  return Effect.fail(new ValidationError({ message }))
})

// -- The handler (src/Identity/Http.ts) -----------------------------------------------------------

const IdentityLive = HttpApiBuilder.group(
  Api,
  "identity",
  (handlers) =>
    handlers.handle(
      "whoami",
      () => Effect.map(Effect.service(CurrentKey), ({ brandId, keyId, scopes }) => ({ ok: true as const, keyId, brandId, scopes }))
    )
)

// -- The edge: one spelling per route, 404/405, headers on every answer, the access log ----------

/** The methods Bun's router tells apart by name (Bun 1.4.4; src/Edge/Edge.ts). */
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

/** Every declared route's path with the methods it answers (a GET also HEAD), from the definition. */
const declared = new Map<string, Array<string>>()
for (const group of Object.values(Api.groups)) {
  for (const endpoint of Object.values(group.endpoints)) {
    const methods = declared.get(endpoint.path) ?? []
    methods.push(endpoint.method, ...(endpoint.method === "GET" ? ["HEAD"] : []))
    declared.set(endpoint.path, methods)
  }
}

const envelopeResponse = (error: { readonly code: string; readonly status: number; readonly message: string }) =>
  HttpServerResponse.text(JSON.stringify({ ok: false, code: error.code, message: error.message }), {
    status: error.status,
    contentType: "application/json"
  })

const unknownRoute = "(unknown)"

/**
 * The route of a request and its refusal, when it has one: a path with `%`, `;`, `//` or `\`, in
 * another letter case, or not as Bun's table matched it, is 404; a known path with another method
 * is 405 with `Allow` (README, For integrators). A trailing slash is the same route.
 */
const routeOf = (method: string, path: string, asSpelled: boolean) => {
  const trimmed = path.length > 1 && path.endsWith("/") ? path.slice(0, -1) : path
  const methods = /[%;\\]|\/\//.test(path) ? undefined : declared.get(trimmed)
  if (methods === undefined) {
    return {
      route: unknownRoute,
      refusal: envelopeResponse(new NotFound({ message: `No route for ${method} ${path}.` }))
    }
  }
  // Bun resolved a dot segment or `\` in the path before anyone saw it (src/Edge/Edge.ts).
  if (!asSpelled && routedByBun.has(method)) {
    return {
      route: unknownRoute,
      refusal: envelopeResponse(
        new NotFound({
          message:
            `No route for ${method} ${path} as it was sent: a path with a dot segment (\`.\`, \`..\`) or a \`\\\` is no route's spelling.`
        })
      )
    }
  }
  if (!methods.includes(method)) {
    const allow = methods.join(", ")
    return {
      route: trimmed,
      refusal: HttpServerResponse.setHeader(
        envelopeResponse(new MethodNotAllowed({ message: `${method} is not allowed on ${path}; use ${allow}.` })),
        "allow",
        allow
      )
    }
  }
  return { route: trimmed, refusal: undefined }
}

const httpDate = (() => {
  let second = Number.NaN
  let text = ""
  return () => {
    const now = Math.floor(Date.now() / 1000)
    if (now !== second) {
      second = now
      text = new Date(now * 1000).toUTCString()
    }
    return text
  }
})()

/** 401s by client address, the first of each a minute logged, the rest summed up (src/Edge/AccessLog.ts). */
const refusals = (() => {
  let counts = new Map<string, number>()
  const summary = setInterval(() => {
    const ended = counts
    counts = new Map()
    for (const [clientAddress, count] of ended) {
      if (count > 0 && accessLogged) {
        logLine("INFO", "repeated unauthorized requests", { clientAddress, count, status: 401 })
      }
    }
  }, 60_000)
  summary.unref()
  return {
    first: (address: string) => {
      const key = counts.has(address) || counts.size < 10_000 ? address : "(other addresses)"
      const seen = counts.get(key)
      counts.set(key, seen === undefined ? 0 : seen + 1)
      return seen === undefined && key === address
    }
  }
})()

const internal = new InternalError({ message: "An unexpected error occurred." })
const unavailable = new ServiceUnavailable({ message: "The service is temporarily unavailable; retry shortly." })

/** Any failure that reached the edge: no route (the router's own), the database away (503), or a 500 logged. */
const renderFailure = (cause: Cause.Cause<unknown>, method: string, path: string) => {
  const error = Cause.squash(cause)
  if (HttpServerError.isHttpServerError(error) && error.reason._tag === "RouteNotFound") {
    return envelopeResponse(new NotFound({ message: `No route for ${method} ${path}.` }))
  }
  if (error instanceof DatabaseUnavailable) {
    if (errorsLogged) logLine("ERROR", "database unavailable", {}, String(error.message))
    return envelopeResponse(unavailable)
  }
  if (errorsLogged) logLine("ERROR", "unexpected failure", {}, Cause.pretty(cause))
  return envelopeResponse(internal)
}

const pathOf = (url: string) => {
  const query = url.indexOf("?")
  return query === -1 ? url : url.slice(0, query)
}

const EdgeLive = HttpRouter.middleware<{ provides: Exchange }>()(
  (
    httpEffect
  ): Effect.Effect<HttpServerResponse.HttpServerResponse, Types.unhandled, Peer | HttpServerRequest.HttpServerRequest> =>
    Effect.contextWith((context: Context.Context<HttpServerRequest.HttpServerRequest | Peer>) => {
      const startedAt = performance.now()
      const request = Context.getUnsafe(context, HttpServerRequest.HttpServerRequest)
      const peer = Context.getUnsafe(context, Peer)
      const sent = request.headers["x-request-id"]
      const exchange: Exchange["Service"] = {
        requestId: crypto.randomUUID(),
        clientAddress: peer.address,
        clientRequestId: sent === undefined ? null : sent.slice(0, 128).replace(/[^\x20-\x7e]/g, "?"),
        headers: {},
        note: noKey
      }
      const method = request.method
      const path = pathOf(request.url)
      const { refusal, route } = routeOf(method, path, peer.asSpelled)
      const answered = refusal !== undefined ? Effect.succeed(refusal) : Effect.matchCause(
        Effect.provideService(httpEffect, Exchange, exchange),
        { onSuccess: (response) => response, onFailure: (cause) => renderFailure(cause, method, path) }
      )
      return Effect.map(answered, (response) => {
        const headers: Record<string, string> = {
          "x-content-type-options": "nosniff",
          "x-request-id": exchange.requestId,
          ...exchange.headers
        }
        // HEAD answers as GET would, headers included; Bun leaves its Date out there.
        if (method === "HEAD") headers["date"] = httpDate()
        if (accessLogged && (response.status !== 401 || refusals.first(exchange.clientAddress))) {
          logLine("INFO", "request", {
            requestId: exchange.requestId,
            clientAddress: exchange.clientAddress,
            clientRequestId: exchange.clientRequestId,
            method,
            route,
            status: response.status,
            durationMs: Math.round((performance.now() - startedAt) * 1000) / 1000,
            keyId: exchange.note.keyId,
            brandId: exchange.note.brandId,
            reason: exchange.note.reason
          })
        }
        return HttpServerResponse.setHeaders(response, headers)
      })
    }),
  { global: true }
)

// -- Wiring and the server ------------------------------------------------------------------------

const ApiLive = HttpApiBuilder.layer(Api).pipe(
  Layer.provide(IdentityLive),
  Layer.provide([ApiKeyAuthLive, DecodeErrorsLive]),
  Layer.provide([ApiKeys.layer(databaseFile), KeyUsage.layer(databaseFile), RateLimit.layer]),
  Layer.provide(HttpServer.layerServices)
)

const { dispose, handler } = HttpRouter.toWebHandler(Layer.mergeAll(ApiLive, EdgeLive), {
  disableLogger: true,
  // One spelling per route: letter case and `//` are not merged; a trailing slash is the same route.
  routerConfig: { caseSensitive: true, ignoreDuplicateSlashes: false, ignoreTrailingSlash: true }
})

/** A request as Bun hands it on: from its table (the path as sent), or its fallback. */
const serve = (asSpelled: boolean) => (request: Request, server: Bun.Server<unknown>) =>
  handler(request, Context.make(Peer, { address: server.requestIP(request)?.address ?? "(in process)", asSpelled }))

const direct = serve(true)
const routes: Record<string, typeof direct> = {}
for (const path of declared.keys()) {
  routes[path] = direct
  routes[`${path}/`] = direct
}

const server = Bun.serve({
  hostname: host,
  port,
  reusePort: false,
  development: false,
  idleTimeout: 30,
  routes,
  fetch: serve(false),
  error: (error) => {
    if (errorsLogged) logLine("ERROR", "unhandled error", {}, String(error))
    return new Response(JSON.stringify({ ok: false, code: internal.code, message: internal.message }), {
      status: 500,
      headers: { "content-type": "application/json", "x-content-type-options": "nosniff" }
    })
  }
})

bufferedStderr(JSON.stringify({
  message: `Listening on http://${server.hostname}:${server.port}`,
  logLevel: "INFO",
  timestamp: new Date().toISOString(),
  annotations: { database: databaseFile },
  spans: {},
  fiberId: "#0"
}))

const stop = async () => {
  await server.stop(false)
  // The layers' finalizers: the last uses noted are written, the database closed.
  await dispose()
  process.exit(0)
}
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
