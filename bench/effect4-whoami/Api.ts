/**
 * whoami's definition on Effect 4, as the service's README documents it (For integrators: `GET
 * /v1/whoami`, Errors): the `{ok:true, ...}` body, each error as its `{ok:false, code, message}`
 * envelope with its status, the key's bearer middleware and the decode errors' middleware. No layers
 * or handlers here.
 */
import { Context, Schema, SchemaTransformation } from "effect"
import { HttpApi, HttpApiEndpoint, HttpApiGroup, HttpApiMiddleware, HttpApiSecurity } from "effect/http-api"

/**
 * An error the code fails with, declared by its wire form: the envelope struct transformed to the
 * tagged error, with its status, so that what the definition says is what goes on the wire.
 */
const envelope = <const Tag extends string, const Code extends string>(tag: Tag, code: Code, status: number) => {
  class ApiError extends Schema.TaggedError<ApiError>()(tag, { message: Schema.String }) {
    readonly code: Code = code
    readonly status: number = status
  }
  const wire = Schema.Struct({ ok: Schema.Literal(false), code: Schema.Literal(code), message: Schema.String }).pipe(
    Schema.decodeTo(
      ApiError,
      SchemaTransformation.transform({
        decode: ({ message }) => ({ _tag: tag, message }),
        encode: ({ message }) => ({ ok: false as const, code, message })
      })
    )
  ).annotate({ httpApiStatus: status })
  return Object.assign(ApiError, { wire })
}

export const Unauthorized = envelope("Unauthorized", "UNAUTHORIZED", 401)
export type Unauthorized = InstanceType<typeof Unauthorized>
export const RateLimited = envelope("RateLimited", "RATE_LIMITED", 429)
export type RateLimited = InstanceType<typeof RateLimited>
export const ValidationError = envelope("ValidationError", "VALIDATION_ERROR", 400)
export type ValidationError = InstanceType<typeof ValidationError>
export const NotFound = envelope("NotFound", "NOT_FOUND", 404)
export const MethodNotAllowed = envelope("MethodNotAllowed", "METHOD_NOT_ALLOWED", 405)
export const InternalError = envelope("InternalError", "INTERNAL_ERROR", 500)
export const ServiceUnavailable = envelope("ServiceUnavailable", "SERVICE_UNAVAILABLE", 503)

/** What a key resolves to (README, `GET /v1/whoami`). */
export interface ApiKeyIdentity {
  readonly keyId: string
  readonly brandId: string
  readonly scopes: ReadonlyArray<string>
}

/** Why a key was refused, for the access log only (README, Operating it: Logs). */
export type RefusalReason = "missing" | "malformed" | "unknown key" | "wrong secret" | "revoked" | "expired" | "grace ended"

/** The key's note for the access line: its id and brand when known, why it was refused (401s). */
export interface KeyNote {
  readonly keyId: string | null
  readonly brandId: string | null
  readonly reason: RefusalReason | null
}

/**
 * What the edge makes for one request (its global middleware provides it): its id, who sent it,
 * and what the key's middleware add, the headers that every answer from the rate limit on carries
 * (an error's included) and the key's note for the access line, taken into in place as the
 * service's per-request collector does (src/Responses.ts).
 */
export class Exchange extends Context.Service<Exchange, {
  readonly requestId: string
  readonly clientAddress: string
  readonly clientRequestId: string | null
  readonly headers: Record<string, string>
  note: KeyNote
}>()("Edge/Exchange") {}

/** The key a request authenticated with: what the key's middleware gives the handler. */
export class CurrentKey extends Context.Service<CurrentKey, ApiKeyIdentity>()("ApiKeys/CurrentKey") {}

/** Any valid key, rate limited: 401, then 429 (README, Errors: order of checks). */
export class ApiKeyAuth extends HttpApiMiddleware.Service<ApiKeyAuth, { provides: CurrentKey }>()(
  "ApiKeys/ApiKeyAuth",
  { error: [Unauthorized.wire, RateLimited.wire], security: { bearer: HttpApiSecurity.bearer } }
) {}

/** A query, header or path the endpoint's schemas refuse: 400 VALIDATION_ERROR naming it (README, Errors). */
export class DecodeErrors extends HttpApiMiddleware.Service<DecodeErrors>()("Edge/DecodeErrors", {
  error: ValidationError.wire
}) {}

export const Identity = Schema.Struct({
  ok: Schema.Literal(true),
  keyId: Schema.String,
  brandId: Schema.String,
  scopes: Schema.Array(Schema.String)
})

export const Api = HttpApi.make("campaign-api")
  .add(
    HttpApiGroup.make("identity").add(
      HttpApiEndpoint.get("whoami", "/v1/whoami", {
        // No query parameters: any is refused, as on every operation (README, For integrators). An
        // empty Struct would take any key, whatever `onExcessProperty` says, in 4.1.0.
        query: Schema.Record(Schema.String, Schema.Never),
        success: Identity
      }).middleware(ApiKeyAuth)
    )
  )
  .middleware(DecodeErrors)
