import { Context, Effect, Either } from "effect"
import { ArrayFormatter } from "effect/ParseResult"
import { IdempotencyKeyRequired, ValidationError } from "../Domain/Errors.ts"
import { isMissingIdempotencyKey } from "../Domain/IdempotencyKey.ts"
import { compile } from "../Edge/Endpoint.ts"
import type { Steps } from "../Edge/Exchange.ts"
import { IdempotencyKey, RequireIdempotencyKey } from "./Api.ts"

const keyRequired = Effect.fail(
  new IdempotencyKeyRequired({
    message: "The Idempotency-Key header is required: send a unique value per activation, and the same value to retry it."
  })
)

/**
 * The step of `RequireIdempotencyKey` (README, Idempotency): 400 unless an `Idempotency-Key` is
 * there, and 400 naming the rule unless it keeps the endpoint's header schema; it gives the
 * handler the key, unquoted.
 */
export const IdempotencySteps: Steps = {
  [RequireIdempotencyKey.key]: (endpoint) => {
    const { decodeHeaders } = compile(endpoint)
    return (exchange) => {
      const header = exchange.request.headers.get("idempotency-key")
      if (isMissingIdempotencyKey(header)) return keyRequired
      return Either.match(decodeHeaders({ "idempotency-key": header }), {
        onLeft: (error) => Effect.fail(new ValidationError({ message: ArrayFormatter.formatErrorSync(error)[0]!.message })),
        onRight: (headers) =>
          Effect.succeed({ provides: Context.make(IdempotencyKey, (headers as { "idempotency-key": string })["idempotency-key"]) })
      })
    }
  }
}
