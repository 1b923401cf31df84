import type * as HttpApi from "@effect/platform/HttpApi"
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import type * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import type * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import type * as HttpApiMiddleware from "@effect/platform/HttpApiMiddleware"
import type * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Effect, Layer } from "effect"
import type * as Types from "effect/Types"

/**
 * Each endpoint's handler, written once beside its feature (`XHandlers` in each `Http.ts`), is
 * wired once: the composition root (`App.ts`) lists each group's handlers in one record, from
 * which both the edge and the library's own groups (`groupsLive`) are made. Neither names an
 * endpoint: a new one added to its group's record is served by both.
 */

/** What an endpoint's declared middleware provide its handler. */
export type ProvidedTo<Endpoint> = HttpApiMiddleware.HttpApiMiddleware.ExtractProvides<
  HttpApiEndpoint.HttpApiEndpoint.Context<Endpoint>
>

/**
 * An endpoint's handler as `HttpApiBuilder.handler` makes it: its decoded input in, its success
 * value (or a response of its own) out, needing nothing but what the endpoint's middleware provide.
 */
export type HandlerOf<Endpoint extends HttpApiEndpoint.HttpApiEndpoint.Any> = (
  request: Types.Simplify<HttpApiEndpoint.HttpApiEndpoint.Request<Endpoint>>
) => Effect.Effect<
  HttpApiEndpoint.HttpApiEndpoint.Success<Endpoint> | HttpServerResponse.HttpServerResponse,
  unknown,
  ProvidedTo<Endpoint>
>

export type GroupsOf<Api> = Api extends HttpApi.HttpApi<infer _Id, infer Groups, infer _E, infer _R> ? Groups
  : never

/**
 * The implementations every endpoint's middleware need, as HttpApiBuilder needs them: the edge
 * takes them from its layers' context, so a missing one is a type error of the layer that builds it.
 */
export type MiddlewareOf<Api> = HttpApiMiddleware.HttpApiMiddleware.Only<
  | (Api extends HttpApi.HttpApi<infer _Id, infer _Groups, infer _E, infer R> ? R : never)
  | {
    [Group in GroupsOf<Api> as HttpApiGroup.HttpApiGroup.Name<Group>]:
      | HttpApiGroup.HttpApiGroup.Middleware<Group>
      | HttpApiEndpoint.HttpApiEndpoint.Context<HttpApiGroup.HttpApiGroup.Endpoints<Group>>
  }[HttpApiGroup.HttpApiGroup.Name<GroupsOf<Api>>]
>

/** The names of an HttpApi definition's groups. */
export type GroupNameOf<Api> = HttpApiGroup.HttpApiGroup.Name<GroupsOf<Api>>

/**
 * A handler for every endpoint of an HttpApi definition, by group and endpoint name: an endpoint
 * added to the definition without one here is a type error, as it is for `HttpApiBuilder.group`.
 */
export type Handlers<Api> = {
  readonly [Group in GroupsOf<Api> as HttpApiGroup.HttpApiGroup.Name<Group>]: {
    readonly [Endpoint in HttpApiGroup.HttpApiGroup.Endpoints<Group> as HttpApiEndpoint.HttpApiEndpoint.Name<Endpoint>]:
      HandlerOf<Endpoint>
  }
}

/** Each group's handlers as its feature makes them: from the services they call, once. */
export type HandlersOf<Api> = {
  readonly [Group in keyof Handlers<Api>]: Effect.Effect<Handlers<Api>[Group], any, any>
}

type ApiIdOf<Api> = Api extends HttpApi.HttpApi<infer Id, infer _Groups, infer _E, infer _R> ? Id : never
type ErrorOf<H> = { [K in keyof H]: H[K] extends Effect.Effect<infer _A, infer E, infer _R> ? E : never }[keyof H]
type ContextOf<H> = { [K in keyof H]: H[K] extends Effect.Effect<infer _A, infer _E, infer R> ? R : never }[keyof H]

/** Every group's handlers, made from their services. */
export const allHandlers = <Api extends HttpApi.HttpApi.Any, H extends HandlersOf<Api>>(
  _api: Api,
  handlers: H
): Effect.Effect<Handlers<Api>, ErrorOf<H>, ContextOf<H>> =>
  Effect.all(handlers as unknown as Record<string, Effect.Effect<unknown>>) as Effect.Effect<any, any, any>

/**
 * The definition's groups as HttpApiBuilder serves them, each endpoint given its handler from the
 * same record the edge is made of.
 */
export const groupsLive = <Api extends HttpApi.HttpApi.Any, H extends HandlersOf<Api>>(
  api: Api,
  handlers: H
): Layer.Layer<HttpApiGroup.ApiGroup<ApiIdOf<Api>, GroupNameOf<Api>>, ErrorOf<H>, ContextOf<H>> => {
  const groups = Object.entries(handlers as unknown as Record<string, Effect.Effect<Record<string, unknown>>>).map((
    [group, made]
  ) =>
    // The builder's type walks the endpoints one `handle` at a time; a record of them is checked
    // against the definition by `Handlers` instead.
    (HttpApiBuilder.group as any)(api, group, (builder: any) =>
      Effect.map(made, (endpoints) =>
        Object.entries(endpoints).reduce((built, [endpoint, handler]) =>
          built.handle(endpoint, handler), builder)))
  )
  return Layer.mergeAll(...(groups as [Layer.Layer<any, any, any>]))
}
