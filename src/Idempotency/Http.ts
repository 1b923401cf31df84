import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import { Effect, Layer, ParseResult } from "effect"
import { IdempotencyKeyRequired, ValidationError } from "../Domain/Errors.ts"
import { decodeIdempotencyKeyHeader, isMissingIdempotencyKey } from "../Domain/IdempotencyKey.ts"
import { RequireIdempotencyKey } from "./Api.ts"

const keyRequired = Effect.fail(
  new IdempotencyKeyRequired({
    message:
      "The Idempotency-Key header is required: send a unique value per activation, and the same value to retry it."
  })
)

/**
 * `RequireIdempotencyKey` (docs/integrators.md, Idempotency): 400 IDEMPOTENCY_KEY_REQUIRED unless an
 * `Idempotency-Key` is there, 400 VALIDATION_ERROR naming the rule unless it keeps the header's
 * schema, and otherwise the key, unquoted, for the handler.
 */
export const RequireIdempotencyKeyLive = Layer.succeed(
  RequireIdempotencyKey,
  Effect.flatMap(
    HttpServerRequest.HttpServerRequest,
    (request): Effect.Effect<string, IdempotencyKeyRequired | ValidationError> => {
      const header = request.headers["idempotency-key"]
      if (isMissingIdempotencyKey(header ?? null)) return keyRequired
      const decoded = decodeIdempotencyKeyHeader(header)
      return decoded._tag === "Right"
        ? Effect.succeed(decoded.right)
        : Effect.fail(
          new ValidationError({ message: ParseResult.ArrayFormatter.formatErrorSync(decoded.left)[0]!.message })
        )
    }
  )
)
