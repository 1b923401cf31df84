import type { HttpApi, HttpApiEndpoint, HttpApiGroup } from "@effect/platform"
import type { Effect } from "effect"
import type { ParseError } from "effect/ParseResult"
import type { ApiKeyIdentity } from "../Domain/ApiKey.ts"
import type { ApiError, KeyRefused } from "../Domain/Errors.ts"

/**
 * One request as the edge hands it to a handler: the web request, what the router found, and
 * what the steps note for the response. A plain object made once per request, passed to each
 * step: no per-request context, scope or fiber-local is made for it.
 */
export interface Exchange {
  readonly request: Request
  /** The path as sent, without the query string. */
  readonly path: string
  /** The route pattern from the HttpApi definition, e.g. `/v1/whoami`. */
  readonly route: string
  /** Path parameters as sent (the router never percent-decodes: see `Router.ts`). */
  readonly params: Readonly<Record<string, string>>
  readonly requestId: string
  /** Headers for whatever response the request ends in, an error envelope included. */
  readonly headers: Record<string, string>
  /** The key the request authenticated with, for the access log. */
  identity: ApiKeyIdentity | undefined
  /** Why the request's key was refused, for the access log alone: its answer is the same 401 whatever the reason. */
  refusal: KeyRefused | undefined
  /** Whether the body was read; a body left on the connection means it cannot carry another request. */
  bodyRead: boolean
}

/** A response, before the edge adds its own headers. */
export interface Reply {
  readonly status: number
  /** JSON text, unless a header says otherwise (the docs page). */
  readonly body: string | Uint8Array<ArrayBuffer>
  readonly headers?: Readonly<Record<string, string>>
}

/**
 * What an endpoint's handler does with an exchange. Its services were captured when it was
 * built, so it needs nothing from the context; it fails only with the API's tagged errors, or a
 * schema's decode error (rendered as VALIDATION_ERROR).
 */
export type Handler = (exchange: Exchange) => Effect.Effect<Reply, ApiError | ParseError>

type GroupsOf<Api> = Api extends HttpApi.HttpApi<infer _Id, infer Groups, infer _E, infer _R> ? Groups : never

/**
 * A handler for every endpoint of an HttpApi definition, by group and endpoint name: an endpoint
 * added to the definition without a handler here is a type error.
 */
export type Handlers<Api> = {
  readonly [Group in GroupsOf<Api> as HttpApiGroup.HttpApiGroup.Name<Group>]: {
    readonly [Endpoint in HttpApiGroup.HttpApiGroup.Endpoints<Group> as HttpApiEndpoint.HttpApiEndpoint.Name<Endpoint>]:
      Handler
  }
}
