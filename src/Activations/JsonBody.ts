import { HttpServerRequest } from "@effect/platform"
import { Effect, Layer } from "effect"
import { isApiError, type MalformedJson, type PayloadTooLarge, type UnsupportedMediaType } from "../Domain/Errors.ts"
import { bodyRefusals, JsonBody, maxBodyBytes } from "../Domain/JsonBody.ts"

const mediaType = (contentType: string) => contentType.split(";")[0]!.trim().toLowerCase()
const refused = {
  unsupported: Effect.fail(bodyRefusals.unsupported),
  tooLarge: Effect.fail(bodyRefusals.tooLarge),
  incomplete: Effect.fail(bodyRefusals.incomplete),
  notJson: Effect.fail(bodyRefusals.notJson)
}

/**
 * `JsonBody` (README, Errors): 415 for another media type and 413 for a declared length past the
 * limit, from the headers alone; then the body, read and parsed once (400 MALFORMED_JSON). The
 * server reading it may refuse it itself, with the error it is answered with (the edge bounds a
 * body in size, chunks and time: `Edge/ServerRequest.ts`); any other failure to read it is a body
 * that did not arrive.
 */
export const JsonBodyLive = Layer.succeed(
  JsonBody,
  Effect.flatMap(
    HttpServerRequest.HttpServerRequest,
    (request): Effect.Effect<void, UnsupportedMediaType | PayloadTooLarge | MalformedJson> => {
      const contentType = request.headers["content-type"]
      if (contentType !== undefined && contentType.trim() !== "" && mediaType(contentType) !== "application/json") {
        return refused.unsupported
      }
      const declared = request.headers["content-length"]
      if (declared !== undefined && Number(declared) > maxBodyBytes) return refused.tooLarge
      return Effect.matchEffect(request.text, {
        onFailure: ({ cause }) =>
          isApiError(cause) && (cause._tag === "PayloadTooLarge" || cause._tag === "MalformedJson")
            ? Effect.fail(cause)
            : refused.incomplete,
        // A server that read it unbounded (chunked, with no length declared) has it refused all the same.
        onSuccess: (text): Effect.Effect<void, PayloadTooLarge | MalformedJson> =>
          text.length * 3 > maxBodyBytes && Buffer.byteLength(text) > maxBodyBytes
            ? refused.tooLarge
            : Effect.catchAll(Effect.asVoid(request.json), () => refused.notJson)
      })
    }
  )
)
