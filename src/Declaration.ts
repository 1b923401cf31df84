import type * as HttpApi from "@effect/platform/HttpApi"
import type * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import type * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import type * as HttpApiMiddleware from "@effect/platform/HttpApiMiddleware"
import { Context } from "effect"

/**
 * Reading the HttpApi definition as the one declaration of each endpoint: what the edge runs for
 * it, what the OpenAPI document says of it, and what the tests check, all read from here.
 */

/** An endpoint of the definition, in the group and the API that hold it. */
export interface Declared {
  readonly api: HttpApi.HttpApi.AnyWithProps
  readonly group: HttpApiGroup.HttpApiGroup.AnyWithProps
  readonly endpoint: HttpApiEndpoint.HttpApiEndpoint.AnyWithProps
}

/** Every endpoint of the definition, group by group, in the order the definition adds them. */
export const declaredEndpoints = (definition: HttpApi.HttpApi.Any): ReadonlyArray<Declared> => {
  const api = definition as HttpApi.HttpApi.AnyWithProps
  return Object.values(api.groups).flatMap((group) =>
    Object.values(group.endpoints).map((endpoint: HttpApiEndpoint.HttpApiEndpoint.AnyWithProps) => ({
      api,
      group,
      endpoint
    }))
  )
}

/**
 * The middleware that run for an endpoint, in the order HttpApiBuilder runs them: it wraps the
 * handler in each declared middleware in turn, so the last declared runs first; the API's wrap its
 * router, outside the rest (at @effect/platform 0.97.2, whose HttpApiBuilder is 0.94.5's: the
 * API's, then the endpoint's from the last declared to the first, then its group's). This is the
 * order of checks (docs/integrators.md, Errors).
 */
export const middlewareOf = ({ api, endpoint, group }: Declared): ReadonlyArray<HttpApiMiddleware.TagClassAny> => {
  // HttpApiBuilder's map of an endpoint's middleware: its group's first, each key once.
  const own = new Map<string, HttpApiMiddleware.TagClassAny>()
  for (const tag of [...group.middlewares, ...endpoint.middlewares]) {
    if (!own.has(tag.key)) own.set(tag.key, tag)
  }
  return [...[...api.middlewares].reverse(), ...[...own.values()].reverse()]
}

/** A header of an endpoint's 200 (and 304): what it means, and whether every such answer has it. */
export interface SuccessHeader {
  readonly description: string
  readonly always: boolean
}

/**
 * Headers an endpoint's 200 carries beyond the ones every operation's answers do (a read's `ETag`,
 * a page's `Link`), by name: an annotation, so that the OpenAPI document lists them (`ApiDocument.ts`).
 */
export class SuccessHeaders
  extends Context.Tag("SuccessHeaders")<SuccessHeaders, Readonly<Record<string, SuccessHeader>>>()
{}

/**
 * Request headers an endpoint reads when they are sent, beyond what its schemas decode (a read's
 * `If-None-Match`), by name with what they mean: an annotation, so that the OpenAPI document lists
 * them as optional parameters (`ApiDocument.ts`) without making the typed client ask for them.
 */
export class OptionalRequestHeaders
  extends Context.Tag("OptionalRequestHeaders")<OptionalRequestHeaders, Readonly<Record<string, string>>>()
{}

/**
 * When an endpoint answers an error status beyond what its schemas say (the analytics window's
 * `from` after `to`), by status, as sentences: an annotation, so that the OpenAPI document's
 * response says it (`ApiDocument.ts`).
 */
export class ErrorCases extends Context.Tag("ErrorCases")<ErrorCases, Readonly<Record<string, string>>>() {}
