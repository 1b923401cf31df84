import { Context, Effect } from "effect"
import { MalformedJson, PayloadTooLarge, UnsupportedMediaType } from "../Domain/Errors.ts"
import { JsonBody, JsonPayload } from "../Domain/JsonBody.ts"
import type { Passed, Steps } from "./Exchange.ts"
import { maxBodyBytes, maxBodyChunks, readBody } from "./RequestBody.ts"

const mediaType = (contentType: string) => contentType.split(";")[0]!.trim().toLowerCase()
const unsupported = Effect.fail(new UnsupportedMediaType({ message: "Content-Type must be application/json." }))
const tooLarge = Effect.fail(new PayloadTooLarge({ message: `The request body must be at most ${maxBodyBytes} bytes.` }))
const tooManyChunks = Effect.fail(
  new PayloadTooLarge({
    message: `The request body came in more than ${maxBodyChunks} chunks: send it with a Content-Length, or in fewer chunks.`
  })
)
const incomplete = Effect.fail(new MalformedJson({ message: "The request body did not arrive completely in time." }))
const notJson = Effect.fail(new MalformedJson({ message: "The request body is not valid JSON." }))
const utf8 = new TextDecoder("utf-8", { fatal: true })

/**
 * The step of `JsonBody`, for any endpoint that declares it (README, Errors): 415 for another
 * media type, then the body, read once, bounded in size and time (413), and parsed once (400
 * MALFORMED_JSON). Declared last, it reads the body only after every check its headers allow.
 */
export const JsonBodySteps: Steps = {
  [JsonBody.key]: () => (exchange) => {
    const contentType = exchange.request.headers.get("content-type")
    if (contentType !== null && contentType.trim() !== "" && mediaType(contentType) !== "application/json") {
      return unsupported
    }
    return Effect.flatMap(
      Effect.promise(() => readBody(exchange.request)),
      (body): Effect.Effect<Passed, PayloadTooLarge | MalformedJson> => {
        if (body._tag === "TooLarge") return tooLarge
        if (body._tag === "TooManyChunks") return tooManyChunks
        if (body._tag === "Incomplete") return incomplete
        // The connection's own state, which the edge keeps: its body is off the wire.
        exchange.bodyRead = true
        try {
          return Effect.succeed({ provides: Context.make(JsonPayload, JSON.parse(utf8.decode(body.bytes)) as unknown) })
        } catch {
          return notJson
        }
      }
    )
  }
}
