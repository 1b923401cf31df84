import * as HttpApiMiddleware from "@effect/platform/HttpApiMiddleware"
import { Schema } from "effect"
import { Envelope, MalformedJson, PayloadTooLarge, UnsupportedMediaType } from "./Errors.ts"

/** Bodies above this are refused with 413 (docs/integrators.md, Errors). */
export const maxBodyBytes = 16 * 1024
/** A body that has not fully arrived by then is given up on, so slow senders cannot hold the server. */
export const bodyTimeoutMs = 10_000
/**
 * A chunked body in more pieces than this is refused: each piece costs a read of its own, and a
 * body trickled a byte at a time costs many times the same body in one piece.
 */
export const maxBodyChunks = 256

/** Each way a JSON body is refused (docs/integrators.md, Errors), whoever finds it: the middleware or the server reading the body. */
export const bodyRefusals = {
  unsupported: new UnsupportedMediaType({ message: "Content-Type must be application/json." }),
  charset: new UnsupportedMediaType({
    message: "The request body must be UTF-8: send Content-Type: application/json, with no charset or charset=utf-8."
  }),
  encoded: new UnsupportedMediaType({
    message: "The request body must be sent as it is, not compressed: send it without Content-Encoding."
  }),
  tooLarge: new PayloadTooLarge({ message: `The request body must be at most ${maxBodyBytes} bytes.` }),
  tooManyChunks: new PayloadTooLarge({
    message:
      `The request body came in more than ${maxBodyChunks} chunks: send it with a Content-Length, or in fewer chunks.`
  }),
  incomplete: new MalformedJson({ message: "The request body did not arrive completely in time." }),
  notJson: new MalformedJson({ message: "The request body is not valid JSON." })
} as const

/**
 * "This endpoint takes a JSON body": 415 for another media type, another charset than UTF-8 or a
 * `Content-Encoding`, 413 past the size limit, 400
 * MALFORMED_JSON, each before the payload is decoded (docs/integrators.md, Errors). The body is read once,
 * here: the endpoint's payload schema then decodes what it parsed to.
 */
export class JsonBody extends HttpApiMiddleware.Tag<JsonBody>()("JsonBody", {
  failure: Schema.Union(Envelope(UnsupportedMediaType), Envelope(PayloadTooLarge), Envelope(MalformedJson))
}) {}
