import { HttpApiMiddleware } from "@effect/platform"
import { Context, Schema } from "effect"
import { Envelope, MalformedJson, PayloadTooLarge, UnsupportedMediaType } from "./Errors.ts"

/** The request's body, parsed as JSON but not yet decoded: the endpoint's payload schema does that. */
export class JsonPayload extends Context.Tag("JsonPayload")<JsonPayload, unknown>() {}

/**
 * "This endpoint takes a JSON body": 415 for another media type, 413 past the size limit, 400
 * MALFORMED_JSON. The body is read by this step alone, after every check its headers allow
 * (the edge's `Edge/JsonBody.ts`, for any endpoint that declares it).
 */
export class JsonBody extends HttpApiMiddleware.Tag<JsonBody>()("JsonBody", {
  failure: Schema.Union(Envelope(UnsupportedMediaType), Envelope(PayloadTooLarge), Envelope(MalformedJson)),
  provides: JsonPayload
}) {}
