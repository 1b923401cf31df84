import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import { Data, Schema } from "effect"
import type { BrandId, KeyId } from "./ApiKey.ts"

/**
 * Every failure the API can answer with. The code fails with these tagged
 * errors; on the wire each one is the envelope `{ ok: false, code, message }`.
 */
const fields = { message: Schema.String }

export class ValidationError extends Schema.TaggedError<ValidationError>()("ValidationError", fields) {}
export class MalformedJson extends Schema.TaggedError<MalformedJson>()("MalformedJson", fields) {}
export class IdempotencyKeyRequired
  extends Schema.TaggedError<IdempotencyKeyRequired>()("IdempotencyKeyRequired", fields)
{}
export class Unauthorized extends Schema.TaggedError<Unauthorized>()("Unauthorized", fields) {}
export class Forbidden extends Schema.TaggedError<Forbidden>()("Forbidden", fields) {}
export class NotFound extends Schema.TaggedError<NotFound>()("NotFound", fields) {}
export class MethodNotAllowed extends Schema.TaggedError<MethodNotAllowed>()("MethodNotAllowed", fields) {}
export class IdempotencyConflict extends Schema.TaggedError<IdempotencyConflict>()("IdempotencyConflict", fields) {}
export class IdempotencyInProgress
  extends Schema.TaggedError<IdempotencyInProgress>()("IdempotencyInProgress", fields)
{}
export class PayloadTooLarge extends Schema.TaggedError<PayloadTooLarge>()("PayloadTooLarge", fields) {}
export class UnsupportedMediaType extends Schema.TaggedError<UnsupportedMediaType>()("UnsupportedMediaType", fields) {}
export class RateLimited extends Schema.TaggedError<RateLimited>()("RateLimited", fields) {}
export class ConcurrencyLimited extends Schema.TaggedError<ConcurrencyLimited>()("ConcurrencyLimited", fields) {}
export class InternalError extends Schema.TaggedError<InternalError>()("InternalError", fields) {}
export class ServiceUnavailable extends Schema.TaggedError<ServiceUnavailable>()("ServiceUnavailable", fields) {}

export type ApiError =
  | ValidationError
  | MalformedJson
  | IdempotencyKeyRequired
  | Unauthorized
  | Forbidden
  | NotFound
  | MethodNotAllowed
  | IdempotencyConflict
  | IdempotencyInProgress
  | PayloadTooLarge
  | UnsupportedMediaType
  | RateLimited
  | ConcurrencyLimited
  | InternalError
  | ServiceUnavailable

/** The status and code of every error: the one table docs/integrators.md's error rows live in. */
const wireCodes = {
  ValidationError: [400, "VALIDATION_ERROR"],
  MalformedJson: [400, "MALFORMED_JSON"],
  IdempotencyKeyRequired: [400, "IDEMPOTENCY_KEY_REQUIRED"],
  Unauthorized: [401, "UNAUTHORIZED"],
  Forbidden: [403, "FORBIDDEN"],
  NotFound: [404, "NOT_FOUND"],
  MethodNotAllowed: [405, "METHOD_NOT_ALLOWED"],
  IdempotencyConflict: [409, "IDEMPOTENCY_CONFLICT"],
  IdempotencyInProgress: [409, "IDEMPOTENCY_IN_PROGRESS"],
  PayloadTooLarge: [413, "PAYLOAD_TOO_LARGE"],
  UnsupportedMediaType: [415, "UNSUPPORTED_MEDIA_TYPE"],
  RateLimited: [429, "RATE_LIMITED"],
  ConcurrencyLimited: [429, "CONCURRENCY_LIMITED"],
  InternalError: [500, "INTERNAL_ERROR"],
  ServiceUnavailable: [503, "SERVICE_UNAVAILABLE"]
} as const satisfies { readonly [K in ApiError["_tag"]]: readonly [number, string] }

export const isApiError = (u: unknown): u is ApiError =>
  typeof u === "object" && u !== null && "_tag" in u && typeof u._tag === "string" && Object.hasOwn(wireCodes, u._tag)

export const statusOf = (error: ApiError): number => wireCodes[error._tag][0]

/** The envelope's bytes: the same as the error's schema (`Envelope` below) encodes. */
export const envelopeJson = (error: ApiError): string =>
  JSON.stringify({ ok: false, code: wireCodes[error._tag][1], message: error.message })

type ErrorClass<E extends ApiError> = Schema.Schema<E, { readonly _tag: E["_tag"]; readonly message: string }> & {
  readonly _tag: E["_tag"]
  new(props: { readonly message: string }): E
}

/**
 * The wire form of an error for an endpoint's error list: the envelope struct
 * transformed into the tagged error, carrying its HTTP status, so the OpenAPI
 * document shows exactly the bytes that are sent.
 */
export const Envelope = <E extends ApiError>(cls: ErrorClass<E>) => {
  const [status, code] = wireCodes[cls._tag as E["_tag"]]
  return Schema.transform(
    Schema.Struct({
      ok: Schema.Literal(false),
      code: Schema.Literal(code),
      message: Schema.String
    }),
    Schema.typeSchema(cls),
    {
      strict: false,
      decode: ({ message }) => new cls({ message }),
      encode: (error) => ({ ok: false as const, code, message: error.message })
    }
  ).annotations({ ...HttpApiSchema.annotations({ status }), identifier: code, title: code })
}

/** Why a presented key was refused (docs/operators.md, Operating it): `missing` covers any header that is not Bearer credentials. */
export type RefusalReason =
  | "missing"
  | "malformed"
  | "unknown key"
  | "wrong secret"
  | "revoked"
  | "expired"
  | "grace ended"

/**
 * A refused key as the access log tells it; never on the wire, where every reason is the same
 * `Unauthorized`, so that a 401 never tells whether a key id exists. `keyId` once the key parses
 * (it is public), `brandId` once the key is known; nothing of the secret. Not an `Error`: a client
 * sending bad keys costs no stack trace per request, as a `Data.TaggedError` would (bench/BENCHMARKS.md).
 */
export class KeyRefused extends Data.TaggedClass("KeyRefused")<{
  readonly reason: RefusalReason
  readonly keyId: KeyId | null
  readonly brandId: BrandId | null
}> {}
