import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import { Effect } from "effect"
import { isIPv6 } from "node:net"
import { MethodNotAllowed, NotFound, ValidationError } from "../Domain/Errors.ts"
import type { Provided, Reply } from "./Endpoint.ts"
import { errorReply } from "./Render.ts"
import type { EdgeRequest } from "./ServerRequest.ts"

/** A route: what a request for it runs, an endpoint of the definition or one of the edge's own answers. */
export interface Route {
  readonly method: string
  /** The pattern as the definition spells it, `:name` for a parameter (also Bun's route syntax). */
  readonly path: string
  readonly run: (
    request: EdgeRequest,
    params: Readonly<Record<string, string>>,
    provided: Provided
  ) => Effect.Effect<Reply, unknown, HttpServerRequest.HttpServerRequest>
}

interface Pattern {
  readonly route: Route
  readonly names: ReadonlyArray<string>
  readonly regex: RegExp
}

/** The route of a path no route matches, as the access log and the metrics name it. */
export const unknownRoute = "(unknown)"

/** What the router says of a request that Bun's own router did not match. */
export type Unmatched =
  | { readonly _tag: "Dispatch"; readonly route: Route; readonly params: Record<string, string> }
  | { readonly _tag: "Refuse"; readonly route: string; readonly reply: Reply }

/**
 * The routes matched by a path: a route's own spelling or with a trailing slash, in its letter
 * case; `//`, `;params` or percent-encoding never match. A known path with another method is 405
 * with `Allow`, anything else is 404. A parameter matches one segment with no `%` or `;` in it, so
 * that a percent-encoded path is no route, as docs/http-reference.md says. On a server, Bun's table matches
 * every spelling first (`Edge.ts`), and this routes what it hands on; in process (tests, the
 * bench) every request comes here.
 */
const makeFallback = (routes: ReadonlyArray<Route>) => {
  const patterns: ReadonlyArray<Pattern> = routes.map((route) => ({
    route,
    names: [...route.path.matchAll(/:([^/]+)/g)].map((match) => match[1]!),
    regex: new RegExp(
      `^${
        route.path.split(/(:[^/]+)/).map((part) =>
          part.startsWith(":") ? "([^/%;]+)" : part.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")
        )
          .join("")
      }/?$`
    )
  }))

  return (method: string, path: string): Unmatched => {
    const matching = patterns.filter((pattern) => pattern.regex.test(path))
    if (matching.length === 0) {
      return {
        _tag: "Refuse",
        route: unknownRoute,
        reply: errorReply(new NotFound({ message: `No route for ${method} ${path}.` }))
      }
    }
    // Bun answers HEAD on every GET route (the GET without its body), so Allow says so.
    const allowed = matching.flatMap((pattern) =>
      pattern.route.method === "GET" ? ["GET", "HEAD"] : [pattern.route.method]
    )
    const same = matching.find((pattern) =>
      pattern.route.method === method || (method === "HEAD" && pattern.route.method === "GET")
    )
    if (same === undefined) {
      return {
        _tag: "Refuse",
        route: matching[0]!.route.path,
        reply: {
          ...errorReply(
            new MethodNotAllowed({ message: `${method} is not allowed on ${path}; use ${allowed.join(", ")}.` })
          ),
          headers: { allow: allowed.join(", ") }
        }
      }
    }
    const values = same.regex.exec(path)!.slice(1)
    return {
      _tag: "Dispatch",
      route: same.route,
      params: Object.fromEntries(same.names.map((name, i) => [name, values[i]!]))
    }
  }
}

/**
 * Where the path starts in a URL as Bun hands it: the path as sent, never normalised by a `URL`,
 * though Bun has resolved its dot segments and `\` already. `CONNECT host:port` is handed on as
 * that target alone.
 */
export const pathStart = (url: string): number => {
  const authority = url.indexOf("//")
  if (authority === -1) return 0
  const start = url.indexOf("/", authority + 2)
  return start === -1 ? url.length : start
}

/** The path of a URL as Bun hands it, as sent, without its query. */
export const rawPath = (url: string): string => {
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

/** One request of `route` (a route's own, or one of the router's refusals), with its path's parameters. */
export type Run = (
  route: Pick<Route, "path" | "run">,
  request: Request,
  path: string,
  params: Readonly<Record<string, string>>,
  peer: string
) => Response | Promise<Response>

const dotSegments = (method: string, path: string) =>
  errorReply(
    new NotFound({
      message:
        `No route for ${method} ${path} as it was sent: a path with a dot segment (\`.\`, \`..\`) or a \`\\\` is no route's spelling.`
    })
  )

/**
 * `Host` as RFC 9112 §3.2 has it, `uri-host [ ":" port ]` (RFC 3986): a name of registered-name
 * characters or percent-encodings (never empty: RFC 9110 §4.2.1), an IPv4 address, or an IPv6 or
 * future address in brackets; a port of digits within TCP's.
 */
const hostSyntax = /^(?:\[([^\]]*)\]|(?:[A-Za-z0-9\-._~!$&'()*+,;=]|%[0-9A-Fa-f]{2})+)(?::([0-9]*))?$/
const ipFuture = /^v[0-9A-Fa-f]+\.[A-Za-z0-9\-._~!$&'()*+,;=:]+$/

const isHost = (value: string): boolean => {
  const match = hostSyntax.exec(value)
  if (match === null) return false
  const [, literal, port] = match
  return (literal === undefined || isIPv6(literal) || ipFuture.test(literal)) &&
    (port === undefined || (port.length <= 5 && Number(port) <= 65535))
}

const hostRefusals = {
  missing: errorReply(new ValidationError({ message: "The request has no Host header; send Host: host[:port]." })),
  repeated: errorReply(new ValidationError({ message: "Host is given more than once; send it once, as host[:port]." })),
  invalid: errorReply(new ValidationError({ message: "Host is not a host[:port]; send it as host[:port]." }))
}

/**
 * What a request's `Host` is refused with, if it is (docs/integrators.md, Errors): a server MUST answer 400 to
 * a request with none, with more than one, or with one that is not a host (RFC 9112 §3.2). Bun
 * refuses an HTTP/1.1 request without one itself (a bare 400); it hands on an HTTP/1.0 one without
 * it, one given twice as the two values joined with ", " (a space no host holds), and any value
 * it was sent. A request made in process (tests, the bench) has no connection nor Host: its URL
 * names the host.
 */
const makeHostCheck = () => {
  // The last Host taken: a server's clients send the same one or few, and comparing one string is
  // cheaper than reading it anew. Nothing before the first (`get` never answers undefined).
  let taken: string | undefined
  return (request: Request, peer: string): Reply | undefined => {
    const host = request.headers.get("host")
    if (host === taken) return undefined
    if (host === null) return peer === inProcess ? undefined : hostRefusals.missing
    if (isHost(host)) {
      taken = host
      return undefined
    }
    return host.includes(", ") ? hostRefusals.repeated : hostRefusals.invalid
  }
}

/**
 * The routes as `Bun.serve` takes them: its router's table (every spelling of every route, its own
 * and with a trailing slash, with each method Bun routes by name) and a `fetch` for everything
 * else, each request handed to `run` with its route, or with the 404 or 405 it is answered.
 */
export const makeRouter = (routes: ReadonlyArray<Route>, serve: Run) => {
  const fallback = makeFallback(routes)
  const hostRefusal = makeHostCheck()

  /**
   * Each request, its `Host` first: a request without a valid one is refused before its path is
   * read (docs/integrators.md, Errors: the order of checks), as Bun's own refusals are.
   */
  const run: Run = (route, request, path, params, peer) => {
    const refusal = hostRefusal(request, peer)
    return refusal === undefined
      ? serve(route, request, path, params, peer)
      : serve({ path: route.path, run: () => Effect.succeed(refusal) }, request, path, {}, peer)
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
   * that comes here was sent in no route's spelling, whatever its path now reads (docs/http-reference.md, Route spellings: 404). Bun routes no other method by name, so those come here whatever their
   * spelling, and are routed by their path. Without a peer, in process (tests, the bench), any
   * request comes here, and is routed by its path.
   */
  const fetch = (request: Request, peer?: string): Response | Promise<Response> => {
    if (peer === undefined) return routed(request, inProcess)
    if (!routedByBun.has(request.method)) return routed(request, peer)
    const path = rawPath(request.url)
    const found = fallback(request.method, path)
    const refusal = found._tag === "Refuse" && found.route === unknownRoute
      ? found.reply
      : dotSegments(request.method, path)
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
  const table: Record<string, Record<string, Handle>> = {}
  for (const route of routes) {
    for (const spelling of route.path.endsWith("/") ? [route.path] : [route.path, `${route.path}/`]) {
      // The route's own method, HEAD on a GET; any other is routed by the path (405 with `Allow`).
      const methods = table[spelling] ??= Object.fromEntries([...routedByBun].map((method) => [method, routed]))
      methods[route.method] = direct(route)
      if (route.method === "GET") methods["HEAD"] = direct(route)
    }
  }
  return { routes: table, fetch }
}
