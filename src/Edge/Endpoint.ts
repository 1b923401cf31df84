import { UrlParams } from "@effect/platform"
import { Either, Option, Schema, SchemaAST as AST } from "effect"
import { ArrayFormatter, type ParseError } from "effect/ParseResult"
import { ValidationError } from "../Domain/Errors.ts"

/**
 * An endpoint's schemas from the HttpApi definition, compiled once when the handler is built:
 * the path parameters', query parameters', headers' and payload's decoders, and the success body's encoder to
 * JSON text. The same schemas make the OpenAPI document and the typed client.
 */
export const compile = <
  Path,
  UrlParams,
  Headers,
  Payload,
  Success
>(endpoint: {
  readonly pathSchema: Option.Option<Schema.Schema<Path, any, any>>
  readonly urlParamsSchema: Option.Option<Schema.Schema<UrlParams, any, any>>
  readonly headersSchema: Option.Option<Schema.Schema<Headers, any, any>>
  readonly payloadSchema: Option.Option<Schema.Schema<Payload, any, any>>
  readonly successSchema: Schema.Schema<Success, any, any>
}) => {
  // HttpApi lists an endpoint's middleware among its schemas' requirements; the schemas
  // themselves need no service. Decoded synchronously, to an Either (an Effect a handler can
  // flatMap): the Effect form builds more per field. So an endpoint's schemas must stay synchronous
  // and free of services: one that is not would fail every request as a 400 VALIDATION_ERROR
  // ("cannot be resolved synchronously").
  const decoder = <A>(schema: Option.Option<Schema.Schema<A, any, any>>): (input: unknown) => Either.Either<A, ParseError> =>
    Option.match(schema, {
      onNone: () => () => {
        throw new Error("the endpoint declares no such schema")
      },
      onSome: (schema) => Schema.decodeUnknownEither(schema as Schema.Schema<A, any>)
    })
  const encode = Schema.encodeSync(endpoint.successSchema as Schema.Schema<Success, any>)
  const decodeUrlParams = decoder(endpoint.urlParamsSchema)
  const taken = new Set(Option.match(endpoint.urlParamsSchema, {
    onNone: () => [],
    onSome: (schema) => AST.getPropertySignatures(schema.ast).map((property) => property.name)
  }))
  return {
    decodePath: decoder(endpoint.pathSchema),
    /**
     * The request's query parameters: one the endpoint does not take, or one it takes given more
     * than once, is named in one sentence (README, Errors).
     */
    decodeQuery: (request: Request): Either.Either<UrlParams, ParseError | ValidationError> => {
      const query = queryOf(request)
      for (const name in query) {
        if (Array.isArray(query[name]) && taken.has(name)) {
          return Either.left(new ValidationError({ message: `${name} is given more than once; give it once.` }))
        }
      }
      return Either.mapLeft(decodeUrlParams(query), (error) => {
        const unknown = ArrayFormatter.formatErrorSync(error).find((issue) => issue._tag === "Unexpected")
        return unknown === undefined
          ? error
          : new ValidationError({ message: `${String(unknown.path[0])} is not a query parameter of this operation.` })
      })
    },
    decodeHeaders: decoder(endpoint.headersSchema),
    decodePayload: decoder(endpoint.payloadSchema),
    encodeSuccess: (success: Success): string => JSON.stringify(encode(success))
  }
}

/**
 * The refusal of a query sent to an endpoint that declares no query parameters, naming the first
 * (README, Errors); none when there is no query. The library's own server would ignore them: a
 * typo or a parameter meant for another operation is refused here as on the operations that take
 * some.
 */
export const unexpectedQuery = (request: Request): ValidationError | undefined => {
  const query = queryOf(request)
  for (const name in query) return new ValidationError({ message: `${name} is not a query parameter of this operation.` })
  return undefined
}

/**
 * A request's query parameters as the endpoint's URL parameter schema reads them: each name with
 * its value, a name sent twice with its values in a list (which a schema of single values refuses),
 * any name an own field (`__proto__` too, refused as unknown like any other).
 */
const queryOf = (request: Request): Record<string, string | Array<string>> => {
  const url = request.url
  const at = url.indexOf("?")
  return at === -1 ? {} : UrlParams.toRecord(UrlParams.fromInput(new URLSearchParams(url.slice(at + 1))))
}

/** A strong validator of a response body (RFC 9110 §8.8.3): its SHA-256, quoted. */
export const etagOf = (body: string): string => `"${Bun.SHA256.hash(body, "base64url").slice(0, 27)}"`

/**
 * Whether `If-None-Match` names `etag` (weak comparison, as RFC 9110 §13.1.2 has it for this
 * header), or is `*`.
 */
export const notModified = (ifNoneMatch: string | null, etag: string): boolean => {
  if (ifNoneMatch === null) return false
  for (const tag of ifNoneMatch.split(",")) {
    const candidate = tag.trim()
    if (candidate === "*" || candidate === etag || candidate === `W/${etag}`) return true
  }
  return false
}
