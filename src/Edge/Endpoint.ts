import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpApiMiddleware from "@effect/platform/HttpApiMiddleware"
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import type * as HttpApiSecurity from "@effect/platform/HttpApiSecurity"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as UrlParams from "@effect/platform/UrlParams"
import { Context, Effect, Either, Option, Redacted, Schema, SchemaAST as AST } from "effect"
import { ArrayFormatter, type ParseError } from "effect/ParseResult"
import { type Declared, middlewareOf } from "../Declaration.ts"
import { ValidationError } from "../Domain/Errors.ts"

import type { EdgeRequest } from "./ServerRequest.ts"

/** A response, before the edge adds its own headers: JSON text unless a header says otherwise. */
export interface Reply {
  readonly status: number
  readonly body: string | Uint8Array<ArrayBuffer> | undefined
  readonly headers?: Readonly<Record<string, string>>
}

/**
 * The query of a request as the library's schemas read it: each name with its value, a name sent
 * twice with its values in a list, any name an own field (`__proto__` too).
 */
export const queryOf = (url: string): Record<string, string | Array<string>> => {
  const at = url.indexOf("?")
  return at === -1 ? {} : UrlParams.toRecord(UrlParams.fromInput(new URLSearchParams(url.slice(at + 1))))
}

const notAQueryParameter = (name: string) =>
  new ValidationError({
    message: name === ""
      ? "A query parameter has no name (nothing before its `=`); leave it out."
      : `${name} is not a query parameter of this operation.`
  })

/**
 * The query's decoder: one sentence for a parameter the endpoint does not take, or one it takes
 * given more than once (docs/integrators.md, Errors). An endpoint that declares no query parameters refuses
 * any; the library's own server would ignore them, and a typo or a parameter meant for another
 * operation passes silently there.
 */
const queryDecoder = (schema: Option.Option<Schema.Schema<any, any, any>>) => {
  if (Option.isNone(schema)) {
    return (query: Record<string, unknown>): Either.Either<undefined, ValidationError> => {
      for (const name in query) return Either.left(notAQueryParameter(name))
      return Either.right(undefined)
    }
  }
  const decode = Schema.decodeUnknownEither(schema.value as Schema.Schema<unknown, unknown>)
  const taken = new Set(AST.getPropertySignatures(schema.value.ast).map((property) => property.name))
  return (query: Record<string, string | Array<string>>): Either.Either<unknown, ParseError | ValidationError> => {
    for (const name in query) {
      if (Array.isArray(query[name]) && taken.has(name)) {
        return Either.left(new ValidationError({ message: `${name} is given more than once; give it once.` }))
      }
    }
    return Either.mapLeft(decode(query), (error) => {
      const unknown = ArrayFormatter.formatErrorSync(error).find((issue) => issue._tag === "Unexpected")
      return unknown === undefined ? error : notAQueryParameter(String(unknown.path[0]))
    })
  }
}

/** A schema's decoder, to an Either: synchronous, as every schema of the definition is. */
const decoder = (schema: Option.Option<Schema.Schema<any, any, any>>) =>
  Option.map(schema, (schema) => Schema.decodeUnknownEither(schema as Schema.Schema<unknown, unknown>))

/** A response the handler made itself, as the edge answers it. */
export const replyOf = (response: HttpServerResponse.HttpServerResponse): Reply => {
  const { "content-length": _, ...headers } = response.headers
  const body = response.body
  switch (body._tag) {
    case "Empty":
      return { status: response.status, body: undefined, headers }
    case "Uint8Array":
      return { status: response.status, body: body.body as Uint8Array<ArrayBuffer>, headers }
    case "Raw":
      if (typeof body.body === "string" || body.body instanceof Uint8Array) {
        return { status: response.status, body: body.body as string | Uint8Array<ArrayBuffer>, headers }
      }
  }
  throw new Error(`The edge answers text and bytes, not a ${body._tag} body`)
}

/**
 * The success value's reply, as HttpApiBuilder encodes it: by the one of the endpoint's success
 * schemas that it is, with that schema's status, as JSON (or empty, for a void one).
 */
const successEncoder = (successSchema: Schema.Schema.Any): (value: unknown) => Reply => {
  const members = new Set<Schema.Schema.Any>()
  HttpApiSchema.deunionize(members, successSchema)
  const encoders = [...members].map((schema) => {
    const status = HttpApiSchema.getStatusSuccess(schema)
    if (HttpApiSchema.isVoid(schema.ast)) {
      return { is: Schema.is(Schema.Void), encode: (): Reply => ({ status, body: undefined }) }
    }
    const encode = Schema.encodeSync(schema as Schema.Schema<unknown, unknown>)
    return {
      is: Schema.is(Schema.typeSchema(schema as Schema.Schema<unknown, unknown>)),
      encode: (value: unknown): Reply => ({ status, body: JSON.stringify(encode(value)) })
    }
  })
  const only = encoders.length === 1 ? encoders[0]! : undefined
  const encodeValue = (value: unknown): Reply => {
    if (only !== undefined) return only.encode(value)
    const encoder = encoders.find(({ is }) => is(value))
    if (encoder === undefined) throw new Error("the handler's answer is none of its endpoint's success schemas")
    return encoder.encode(value)
  }
  /**
   * The reply of a value the handler froze, kept for as long as the value lives: a handler that
   * answers with the same frozen value again (whoami, one per key) has it encoded once. Encoding
   * whoami's identity with its schema on every request was 4.0 of its 19.4 KB of allocation
   * (bench/BENCHMARKS.md, As fast at the default log level). The reply is never changed after:
   * the edge adds headers to a copy (`Render.ts`).
   */
  const encodedOnce = new WeakMap<object, Reply>()
  return (value) => {
    if (HttpServerResponse.isServerResponse(value)) return replyOf(value)
    if (typeof value !== "object" || value === null || !Object.isFrozen(value)) return encodeValue(value)
    const kept = encodedOnce.get(value)
    if (kept !== undefined) return kept
    const reply = encodeValue(value)
    encodedOnce.set(value, reply)
    return reply
  }
}

/**
 * A security scheme's check of a request: its credential, read as HttpApiBuilder's
 * `securityDecode` reads it (a header's key straight from the request's own headers, its value as
 * sent or empty, without the library's record of them; any other scheme by the library itself),
 * handed to the middleware's implementation of the scheme.
 */
const schemeCheck = (
  security: HttpApiSecurity.HttpApiSecurity,
  run: (credential: unknown) => Effect.Effect<unknown, unknown, HttpServerRequest.HttpServerRequest>
) => {
  if (security._tag === "ApiKey" && security.in === "header") {
    const name = security.key.toLowerCase()
    return (request: EdgeRequest) => run(Redacted.make(request.source.headers.get(name) ?? ""))
  }
  return (request: EdgeRequest) =>
    Effect.flatMap(
      Effect.provideService(
        HttpApiBuilder.securityDecode(security),
        HttpServerRequest.ParsedSearchParams,
        queryOf(request.url)
      ),
      run
    )
}

type Program = Effect.Effect<Reply, unknown, HttpServerRequest.HttpServerRequest>

/**
 * The services of one request's context, by key, as the edge made it for that request alone: its
 * `HttpServerRequest`, and what its middleware provide, added as they do.
 */
export type Provided = Map<string, unknown>

/**
 * One middleware around what it guards, as HttpApiBuilder's `applyMiddleware` puts it: a security
 * middleware's schemes tried in turn, each with its credential; what it provides given to what it
 * guards; an optional one's failure ignored.
 */
const middlewareAround = (tag: HttpApiMiddleware.TagClassAny, service: unknown) => {
  const check: (request: EdgeRequest) => Effect.Effect<unknown, unknown, HttpServerRequest.HttpServerRequest> =
    HttpApiMiddleware.isSecurity(tag)
      ? Object.entries(tag.security).map(([scheme, security]) =>
        schemeCheck(
          security,
          (service as Record<string, (credential: unknown) => Effect.Effect<unknown, unknown>>)[scheme]!
        )
      ).reduce((first, next) => (request) => Effect.catchAll(first(request), () => next(request)))
      : () => service as Effect.Effect<unknown, unknown, HttpServerRequest.HttpServerRequest>
  const provides = tag.provides
  // What it provides goes into the context the edge made for this request alone (`Provided`), which
  // the rest of the request's fiber reads: the same as providing it there, without writing the
  // fiber's context (and comparing the old one with the new) twice.
  if (tag.optional) {
    return (request: EdgeRequest, provided: Provided, next: () => Program): Program =>
      Effect.matchEffect(check(request), {
        onFailure: next,
        onSuccess: (value) => {
          if (provides !== undefined) provided.set(provides.key, value)
          return next()
        }
      })
  }
  return provides === undefined
    ? (request: EdgeRequest, _: Provided, next: () => Program): Program => Effect.flatMap(check(request), next)
    : (request: EdgeRequest, provided: Provided, next: () => Program): Program =>
      Effect.flatMap(check(request), (value) => {
        provided.set(provides.key, value)
        return next()
      })
}

/**
 * An endpoint as the edge runs it, built once from its declaration, its handler and the
 * implementations of its middleware in `context`: the middleware in the order HttpApiBuilder runs
 * them (`middlewareOf`), then its input decoded with its schemas, compiled here (path, payload,
 * headers, query, in HttpApiBuilder's order), then the handler, then its success encoded. A
 * failure is left to the edge's one renderer.
 */
export const compileEndpoint = (
  declared: Declared,
  handler: (request: any) => Effect.Effect<unknown, unknown, unknown>,
  context: Context.Context<never>
): (request: EdgeRequest, params: Readonly<Record<string, string>>, provided: Provided) => Program => {
  const { endpoint } = declared
  const decodePath = decoder(endpoint.pathSchema)
  const decodePayload = decoder(endpoint.payloadSchema)
  const decodeHeaders = decoder(endpoint.headersSchema)
  const decodeQuery = queryDecoder(endpoint.urlParamsSchema)
  const encode = successEncoder(endpoint.successSchema)
  const around = middlewareOf(declared).map((tag) => middlewareAround(tag, Context.unsafeGet(context, tag as any)))

  const decodeAfterPayload = (request: EdgeRequest, input: Record<string, unknown>): Program => {
    if (Option.isSome(decodeHeaders)) {
      const headers = decodeHeaders.value(request.headers)
      if (Either.isLeft(headers)) return Effect.fail(headers.left)
      input.headers = headers.right
    }
    const query = decodeQuery(queryOf(request.url))
    if (Either.isLeft(query)) return Effect.fail(query.left)
    if (query.right !== undefined) input.urlParams = query.right
    return Effect.map(handler(input) as Effect.Effect<unknown, unknown>, encode)
  }

  /** The input decoded and the handler run: called once every middleware has passed. */
  const handle = (request: EdgeRequest, params: Readonly<Record<string, string>>): Program => {
    const input: Record<string, unknown> = { request }
    if (Option.isSome(decodePath)) {
      const path = decodePath.value(params)
      if (Either.isLeft(path)) return Effect.fail(path.left)
      input.path = path.right
    }
    if (Option.isNone(decodePayload)) return decodeAfterPayload(request, input)
    return Effect.flatMap(Effect.orDie(request.json), (json) => {
      const payload = decodePayload.value(json)
      if (Either.isLeft(payload)) return Effect.fail(payload.left)
      input.payload = payload.right
      return decodeAfterPayload(request, input)
    })
  }

  // Each middleware calls what it guards once it has passed: the first runs first.
  const chain = around.reduceRight<
    (request: EdgeRequest, params: Readonly<Record<string, string>>, provided: Provided) => Program
  >(
    (guarded, wrap) => (request, params, provided) => wrap(request, provided, () => guarded(request, params, provided)),
    (request, params) => handle(request, params)
  )
  return around.length === 0
    ? (request, params, provided) => Effect.suspend(() => chain(request, params, provided))
    : chain
}
