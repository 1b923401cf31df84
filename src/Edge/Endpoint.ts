import { Either, Option, Schema } from "effect"
import type { ParseError } from "effect/ParseResult"

/**
 * An endpoint's schemas from the HttpApi definition, compiled once when the handler is built:
 * the path parameters', headers' and payload's decoders, and the success body's encoder to
 * JSON text. The same schemas make the OpenAPI document and the typed client.
 */
export const compile = <
  Path,
  Headers,
  Payload,
  Success
>(endpoint: {
  readonly pathSchema: Option.Option<Schema.Schema<Path, any, any>>
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
  return {
    decodePath: decoder(endpoint.pathSchema),
    decodeHeaders: decoder(endpoint.headersSchema),
    decodePayload: decoder(endpoint.payloadSchema),
    encodeSuccess: (success: Success): string => JSON.stringify(encode(success))
  }
}
