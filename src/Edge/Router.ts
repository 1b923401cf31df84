import type { HttpServerRequest } from "@effect/platform"
import type { Effect } from "effect"
import { MethodNotAllowed, NotFound } from "../Domain/Errors.ts"
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
 * that a percent-encoded path is no route, as the README says. On a server, Bun's table matches
 * every spelling first (`Edge.ts`), and this routes what it hands on; in process (tests, the
 * bench) every request comes here.
 */
export const makeFallback = (routes: ReadonlyArray<Route>) => {
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
