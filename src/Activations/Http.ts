import { Effect, Either } from "effect"
import { ArrayFormatter } from "effect/ParseResult"
import { Activations } from "../Activations.ts"
import type { CampaignApi } from "../Api.ts"
import { Authentication } from "../ApiKeys/Authentication.ts"
import { withDefaults } from "../Domain/Activation.ts"
import type { ApiKeyIdentity, Scope } from "../Domain/ApiKey.ts"
import {
  Forbidden,
  IdempotencyKeyRequired,
  MalformedJson,
  PayloadTooLarge,
  UnsupportedMediaType,
  ValidationError
} from "../Domain/Errors.ts"
import { isMissingIdempotencyKey } from "../Domain/IdempotencyKey.ts"
import { compile } from "../Edge/Endpoint.ts"
import type { Exchange, Handlers } from "../Edge/Exchange.ts"
import { maxBodyBytes, maxBodyChunks, readBody } from "../Edge/RequestBody.ts"
import { Idempotency } from "../Idempotency.ts"
import { ActivationsApi } from "./Api.ts"

const endpoint = compile(ActivationsApi.endpoints.activate)

/** 403 unless the key carries the scope, with the scope named in `WWW-Authenticate`. */
const requireScope = (exchange: Exchange, key: ApiKeyIdentity, scope: Scope) => {
  if (key.scopes.includes(scope)) return Effect.void
  exchange.headers["www-authenticate"] = `Bearer error="insufficient_scope", scope="${scope}"`
  return Effect.fail(new Forbidden({ message: `This API key lacks the scope "${scope}" that this operation requires.` }))
}

const keyRequired = new IdempotencyKeyRequired({
  message: "The Idempotency-Key header is required: send a unique value per activation, and the same value to retry it."
})

/** 400 unless an `Idempotency-Key` is there, and 400 naming the rule unless it keeps it. */
const requireIdempotencyKey = (exchange: Exchange): Either.Either<string, IdempotencyKeyRequired | ValidationError> => {
  const header = exchange.request.headers.get("idempotency-key")
  if (isMissingIdempotencyKey(header)) return Either.left(keyRequired)
  return Either.mapBoth(endpoint.decodeHeaders({ "idempotency-key": header }), {
    onLeft: (error) => new ValidationError({ message: ArrayFormatter.formatErrorSync(error)[0]!.message }),
    onRight: (headers) => headers["idempotency-key"]
  })
}

const mediaType = (contentType: string) => contentType.split(";")[0]!.trim().toLowerCase()
const unsupported = new UnsupportedMediaType({ message: "Content-Type must be application/json." })
const tooLarge = new PayloadTooLarge({ message: `The request body must be at most ${maxBodyBytes} bytes.` })
const tooManyChunks = new PayloadTooLarge({
  message: `The request body came in more than ${maxBodyChunks} chunks: send it with a Content-Length, or in fewer chunks.`
})
const incomplete = new MalformedJson({ message: "The request body did not arrive completely in time." })
const notJson = new MalformedJson({ message: "The request body is not valid JSON." })
const utf8 = new TextDecoder("utf-8", { fatal: true })

/**
 * 415 for another media type, then the body: read once, bounded in size and time (413), and
 * parsed once (400 MALFORMED_JSON). It is read only now, after every check its headers allow.
 */
const readJson = (exchange: Exchange): Effect.Effect<unknown, UnsupportedMediaType | PayloadTooLarge | MalformedJson> => {
  const contentType = exchange.request.headers.get("content-type")
  if (contentType !== null && contentType.trim() !== "" && mediaType(contentType) !== "application/json") {
    return Effect.fail(unsupported)
  }
  return Effect.flatMap(Effect.promise(() => readBody(exchange.request)), (body): Effect.Effect<unknown, PayloadTooLarge | MalformedJson> => {
    if (body._tag === "TooLarge") return Effect.fail(tooLarge)
    if (body._tag === "TooManyChunks") return Effect.fail(tooManyChunks)
    if (body._tag === "Incomplete") return Effect.fail(incomplete)
    exchange.bodyRead = true
    try {
      return Effect.succeed(JSON.parse(utf8.decode(body.bytes)) as unknown)
    } catch {
      return Effect.fail(notJson)
    }
  })
}

/**
 * POST /v1/creators/{creatorId}/campaigns/{campaignId}/activate, its checks as steps in the
 * README's order: key, rate limit, scope, Idempotency-Key, media type, size, JSON, validation,
 * then the activation itself under the Idempotency-Key.
 *
 * Every step a request runs is written with `Effect.flatMap`, not `Effect.gen`: under load,
 * JavaScriptCore compiled the generator bodies of these steps again and again (over a hundred
 * optimizing compiles each in 25 s, most of the tenth of the server's one core the compiler took),
 * and fresh activations ran 13-17 % faster without them, side by side with the generators
 * (bench/BENCHMARKS.md). Layers are still built with `Effect.gen`.
 */
export const ActivationsHandlers = Effect.gen(function*() {
  const authentication = yield* Authentication
  const activations = yield* Activations
  const idempotency = yield* Idempotency
  type Input = Parameters<typeof activations.activate>[0]

  /** The activation under its Idempotency-Key, once every check has passed. */
  const activateOnce = (
    exchange: Exchange,
    by: ApiKeyIdentity,
    key: string,
    path: Pick<Input, "creatorId" | "campaignId">,
    request: Input["request"]
  ) => {
    const operation = Effect.map(activations.activate({ ...path, request, by }), (activation) => ({
      status: 200,
      body: endpoint.encodeSuccess({ ok: true, activation }),
      resourceId: activation.id
    }))
    return idempotency.run({
      brandId: by.brandId,
      key,
      method: exchange.request.method,
      // A trailing slash is the same route: both spellings are one request.
      path: exchange.path.replace(/\/$/, ""),
      body: request
    }, operation).pipe(
      Effect.tapErrorTag("IdempotencyInProgress", () => Effect.sync(() => void (exchange.headers["retry-after"] = "1")))
    )
  }

  /** Media type, size, JSON and validation, then the activation: the key and its scope are settled. */
  const withKey = (exchange: Exchange, by: ApiKeyIdentity, key: string) =>
    Effect.flatMap(readJson(exchange), (json) =>
      Effect.flatMap(endpoint.decodePath(exchange.params), (path) =>
        Effect.flatMap(endpoint.decodePayload(json), (payload) => activateOnce(exchange, by, key, path, withDefaults(payload)))))

  /** The scope, then the Idempotency-Key: the key is authenticated and within its rate limit. */
  const authorized = (exchange: Exchange, by: ApiKeyIdentity) =>
    Effect.flatMap(requireScope(exchange, by, "campaigns:write"), () =>
      Effect.flatMap(requireIdempotencyKey(exchange), (key) => withKey(exchange, by, key)))

  const handlers: Handlers<typeof CampaignApi>["activations"] = {
    // Suspended: nothing of the request runs before its program does (a throw becomes a 500 envelope).
    activate: (exchange) =>
      Effect.suspend(() => Effect.flatMap(authentication.authenticate(exchange), (by) => authorized(exchange, by)))
  }
  return handlers
})
