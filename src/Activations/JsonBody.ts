import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import { Effect, Layer } from "effect"
import { isApiError, type MalformedJson, type PayloadTooLarge, type UnsupportedMediaType } from "../Domain/Errors.ts"
import { bodyRefusals, JsonBody, maxBodyBytes } from "../Domain/JsonBody.ts"
import { addResponseHeaders } from "../Responses.ts"

const mediaType = (contentType: string) => contentType.split(";")[0]!.trim().toLowerCase()

/** A parameter of a media type (RFC 9110 §5.6.6): its name, and its value as a token or a quoted string. */
const parameter = /;[ \t]*([^=; \t]+)[ \t]*=[ \t]*(?:"((?:[^"\\]|\\.)*)"|([^; \t]*))/g

/**
 * Whether a `Content-Type` names another charset than UTF-8, the one JSON has (RFC 8259 §8.1):
 * `charset=utf-8` in any case, quoted or not, is UTF-8, as is no charset at all.
 */
const namesAnotherCharset = (contentType: string): boolean => {
  if (!contentType.includes("=")) return false
  for (const [, name, quoted, token] of contentType.matchAll(parameter)) {
    if (name!.toLowerCase() !== "charset") continue
    const value = quoted === undefined ? token! : quoted.replace(/\\(.)/g, "$1")
    if (value.toLowerCase() !== "utf-8") return true
  }
  return false
}

/**
 * Whether a `Content-Encoding` says the body is coded (gzip, br, …): the server reads a body as it
 * is sent, so a coded one is refused rather than read as JSON (RFC 9110 §8.4.1). `identity`, the
 * coding that changes nothing, is the body as sent.
 */
const isCoded = (contentEncoding: string): boolean =>
  contentEncoding.split(",").some((coding) => {
    const name = coding.trim().toLowerCase()
    return name !== "" && name !== "identity"
  })

const refused = {
  unsupported: Effect.fail(bodyRefusals.unsupported),
  charset: Effect.fail(bodyRefusals.charset),
  // Which codings a body may have (RFC 9110 §15.5.16): none but the body as sent.
  encoded: Effect.zipRight(addResponseHeaders({ "accept-encoding": "identity" }), Effect.fail(bodyRefusals.encoded)),
  tooLarge: Effect.fail(bodyRefusals.tooLarge),
  incomplete: Effect.fail(bodyRefusals.incomplete),
  notJson: Effect.fail(bodyRefusals.notJson)
}

/**
 * `JsonBody` (docs/integrators.md, Errors): 415 for another media type, another charset than UTF-8 or a coded
 * body, and 413 for a declared length past the limit, from the headers alone; no `Content-Type`
 * is JSON; then the body, read and parsed once (400 MALFORMED_JSON). The
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
      if (contentType !== undefined && contentType.trim() !== "") {
        if (mediaType(contentType) !== "application/json") return refused.unsupported
        if (namesAnotherCharset(contentType)) return refused.charset
      }
      const contentEncoding = request.headers["content-encoding"]
      if (contentEncoding !== undefined && isCoded(contentEncoding)) return refused.encoded
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
