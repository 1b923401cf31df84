import type { HttpApi, HttpApiEndpoint, HttpApiGroup, HttpApiMiddleware } from "@effect/platform"
import type { Context, Effect } from "effect"
import type { ParseError } from "effect/ParseResult"
import type { ApiError, RefusalReason } from "../Domain/Errors.ts"

/**
 * What the access line says of a request's key: its id and brand when known, and why it was
 * refused (401s only; README, Operating it). Never the key.
 */
export interface KeyNote {
  readonly keyId: string | null
  readonly brandId: string | null
  readonly reason: RefusalReason | null
}

/**
 * One request as the edge hands it to the steps and the handler: the web request and what the
 * router found, plus the edge's own record of what the passed steps said (their headers, the
 * key for the access line) and of the connection. Steps and handlers read it and return what
 * they add; only the edge writes to it. A plain object made once per request: no per-request
 * scope or fiber-local is made for it.
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
  /** Who sent it (`Caller.ts`). */
  readonly clientAddress: string
  readonly clientRequestId: string | null
  /** Headers the passed steps added, for whatever response the request ends in (an error's too). */
  readonly headers: Record<string, string>
  /** What the steps said of the request's key, for the access line. */
  key: KeyNote | undefined
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
 * What a step adds to a request that passes it: services for the steps after it and for the
 * handler (what its middleware tag `provides`), headers that every answer from here on carries
 * (the RateLimit headers), and what the access line says of the key.
 */
export interface Passed {
  readonly provides?: Context.Context<any>
  readonly headers?: Readonly<Record<string, string>>
  readonly key?: KeyNote
}

/**
 * A refusal with headers of its own (`WWW-Authenticate`, `Retry-After`) or a note for the access
 * line: the error it is answered with, as the envelope. A step or handler that needs neither
 * fails with the error itself.
 */
export class Refused {
  readonly _tag = "Refused"
  constructor(
    readonly error: ApiError,
    readonly headers?: Readonly<Record<string, string>>,
    readonly key?: KeyNote
  ) {}
}

/** How a step or a handler may fail: an API error, a schema's decode error (VALIDATION_ERROR), or a refusal. */
export type Failure = ApiError | ParseError | Refused

/**
 * A step of an endpoint's chain: the implementation of one middleware tag of the definition,
 * made once per endpoint that declares it (`StepFor`), so whatever the endpoint's declaration says
 * (its schemas, its annotations) is read at start-up. Given what the steps before it provided.
 */
export type Step = (exchange: Exchange, given: Context.Context<never>) => Effect.Effect<Passed, Failure>

export type StepFor = (endpoint: HttpApiEndpoint.HttpApiEndpoint.AnyWithProps) => Step

/** The step of each middleware tag, by the tag's key: the edge builds every chain from these. */
export type Steps = Readonly<Record<string, StepFor>>

/**
 * What an endpoint's handler does with an exchange, once its chain has passed: `given` holds what
 * its declared middleware provide (the key, the Idempotency-Key, the JSON body), typed from the
 * definition. Its services were captured when it was built, so it needs nothing from the context.
 */
export type Handler<Provided = never> = (exchange: Exchange, given: Context.Context<Provided>) => Effect.Effect<Reply, Failure>

type GroupsOf<Api> = Api extends HttpApi.HttpApi<infer _Id, infer Groups, infer _E, infer _R> ? Groups : never

/** What an endpoint's declared middleware provide. */
export type ProvidedTo<Endpoint> = HttpApiMiddleware.HttpApiMiddleware.ExtractProvides<
  HttpApiEndpoint.HttpApiEndpoint.Context<Endpoint>
>

/**
 * A handler for every endpoint of an HttpApi definition, by group and endpoint name: an endpoint
 * added to the definition without a handler here is a type error.
 */
export type Handlers<Api> = {
  readonly [Group in GroupsOf<Api> as HttpApiGroup.HttpApiGroup.Name<Group>]: {
    readonly [Endpoint in HttpApiGroup.HttpApiGroup.Endpoints<Group> as HttpApiEndpoint.HttpApiEndpoint.Name<Endpoint>]:
      Handler<ProvidedTo<Endpoint>>
  }
}
