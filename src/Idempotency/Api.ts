import * as HttpApiMiddleware from "@effect/platform/HttpApiMiddleware"
import { Context, Schema } from "effect"
import { Envelope, IdempotencyKeyRequired, ValidationError } from "../Domain/Errors.ts"

/** The request's `Idempotency-Key`, unquoted: what `RequireIdempotencyKey` gives the handler. */
export class IdempotencyKey extends Context.Tag("Idempotency/IdempotencyKey")<IdempotencyKey, string>() {}

/**
 * "This endpoint runs once per `Idempotency-Key`": 400 without one, 400 naming the rule for one
 * that breaks it, before the body is read (docs/integrators.md, Errors), and the key, decoded once, for the
 * handler. The endpoint declares the header too (`setHeaders`), so that the OpenAPI document shows
 * it and typed clients send it.
 */
export class RequireIdempotencyKey extends HttpApiMiddleware.Tag<RequireIdempotencyKey>()(
  "Idempotency/RequireIdempotencyKey",
  { failure: Schema.Union(Envelope(IdempotencyKeyRequired), Envelope(ValidationError)), provides: IdempotencyKey }
) {}
