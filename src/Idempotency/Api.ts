import { HttpApiMiddleware } from "@effect/platform"
import { Schema } from "effect"
import { Envelope, IdempotencyKeyRequired, ValidationError } from "../Domain/Errors.ts"

/**
 * "This endpoint runs once per `Idempotency-Key`": 400 without one, 400 naming the rule for one
 * that breaks it, before the body is read (README, Errors). The header's schema is the endpoint's
 * own (`setHeaders`), so the OpenAPI document shows it and the handler receives the key, unquoted.
 */
export class RequireIdempotencyKey extends HttpApiMiddleware.Tag<RequireIdempotencyKey>()(
  "Idempotency/RequireIdempotencyKey",
  { failure: Schema.Union(Envelope(IdempotencyKeyRequired), Envelope(ValidationError)) }
) {}
