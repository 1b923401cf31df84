import type { HttpApi, HttpApiEndpoint, HttpApiGroup, HttpApiMiddleware } from "@effect/platform"
import { Context } from "effect"

/**
 * Reading the HttpApi definition as the one declaration of each endpoint: what the edge runs for
 * it, what the OpenAPI document says of it, and what the tests check, all read from here.
 */

/** An endpoint of the definition, in the group that holds it. */
export interface Declared {
  readonly group: HttpApiGroup.HttpApiGroup.AnyWithProps
  readonly endpoint: HttpApiEndpoint.HttpApiEndpoint.AnyWithProps
}

/** Every endpoint of the definition, group by group, in the order the definition adds them. */
export const declaredEndpoints = (api: HttpApi.HttpApi.Any): ReadonlyArray<Declared> =>
  Object.values((api as unknown as HttpApi.HttpApi<string, HttpApiGroup.HttpApiGroup.AnyWithProps>).groups).flatMap(
    (group) => Object.values(group.endpoints).map((endpoint: HttpApiEndpoint.HttpApiEndpoint.AnyWithProps) => ({ group, endpoint }))
  )

/**
 * The middleware an endpoint declares, in the order they run: the group's, then the endpoint's own,
 * each in the order the definition adds them. This is the order of checks.
 */
export const middlewareOf = ({ endpoint, group }: Declared): ReadonlyArray<HttpApiMiddleware.TagClassAny> => [
  ...group.middlewares,
  ...endpoint.middlewares
]


/** A header of an endpoint's 200 (and 304): what it means, and whether every such answer has it. */
export interface SuccessHeader {
  readonly description: string
  readonly always: boolean
}

/**
 * Headers an endpoint's 200 carries beyond the ones every operation's answers do (a read's `ETag`,
 * a page's `Link`), by name: an annotation, so that the OpenAPI document lists them (`ApiDocument.ts`).
 */
export class SuccessHeaders extends Context.Tag("SuccessHeaders")<SuccessHeaders, Readonly<Record<string, SuccessHeader>>>() {}

/**
 * Request headers an endpoint reads when they are sent, beyond what its schemas decode (a read's
 * `If-None-Match`), by name with what they mean: an annotation, so that the OpenAPI document lists
 * them as optional parameters (`ApiDocument.ts`) without making the typed client ask for them.
 */
export class OptionalRequestHeaders
  extends Context.Tag("OptionalRequestHeaders")<OptionalRequestHeaders, Readonly<Record<string, string>>>()
{}
