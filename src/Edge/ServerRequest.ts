import * as Cookies from "@effect/platform/Cookies"
import * as Headers from "@effect/platform/Headers"
import * as HttpIncomingMessage from "@effect/platform/HttpIncomingMessage"
import type * as HttpMethod from "@effect/platform/HttpMethod"
import * as HttpServerError from "@effect/platform/HttpServerError"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import type * as Multipart from "@effect/platform/Multipart"
import type * as Socket from "@effect/platform/Socket"
import * as UrlParams from "@effect/platform/UrlParams"
import { Effect, Inspectable, Option, Stream } from "effect"
import type { ApiError } from "../Domain/Errors.ts"
import { bodyRefusals } from "../Domain/JsonBody.ts"
import { readBody } from "./RequestBody.ts"

const utf8 = new TextDecoder("utf-8", { fatal: true })

/** The state of a request's body: not read yet, read as text, or refused. */
type Body =
  | { readonly _tag: "Unread" }
  | { readonly _tag: "Text"; readonly text: string; parsed?: { readonly json: unknown } | undefined }
  | { readonly _tag: "Refused"; readonly error: ApiError }

const unread: Body = { _tag: "Unread" }

/** What every `Headers` record has besides its headers (its type id, its redaction). */
const headersPrototype = Object.getPrototypeOf(Headers.empty) as object

/** What the edge does not offer: its endpoints take JSON, or nothing. */
const unsupported = (request: EdgeRequest, what: string) =>
  new HttpServerError.RequestError({ request, reason: "Decode", description: `${what} is not read by this server` })

/**
 * The library's `HttpServerRequest` as the edge makes it for a request, once, for the middleware
 * and the handler (docs/contributing.md, Layout: the request path). Headers are made into the library's record
 * only if asked for. The body is read at most once, when first asked for, bounded in size, chunks
 * and time (docs/integrators.md, Errors): a body past a bound is refused with the error it is answered with,
 * the `cause` of the `RequestError` (the JSON body's middleware answers it). Its text and its JSON
 * are kept, so reading it again costs nothing, and whether it was read says whether the connection
 * can carry another request.
 */
export class EdgeRequest extends Inspectable.Class implements HttpServerRequest.HttpServerRequest {
  declare readonly [HttpServerRequest.TypeId]: HttpServerRequest.TypeId
  declare readonly [HttpIncomingMessage.TypeId]: HttpIncomingMessage.TypeId
  private body: Body = unread
  private headersRecord: Headers.Headers | undefined

  constructor(
    readonly source: Request,
    /** The path and query as sent. */
    readonly url: string
  ) {
    super()
  }

  get method(): HttpMethod.HttpMethod {
    return this.source.method as HttpMethod.HttpMethod
  }
  get originalUrl(): string {
    return this.source.url
  }
  get remoteAddress(): Option.Option<string> {
    return Option.none()
  }
  /** The library's record of the headers: Bun's own, made natively, with the record's prototype. */
  get headers(): Headers.Headers {
    return this.headersRecord ??= Object.assign(
      Object.create(headersPrototype) as Headers.Headers,
      this.source.headers.toJSON()
    )
  }
  get cookies(): Readonly<Record<string, string>> {
    return Cookies.parseHeader(this.source.headers.get("cookie") ?? "")
  }
  /** Whether the body is off the connection: read whole, or there was none to read. */
  get bodyRead(): boolean {
    return this.body._tag === "Text"
  }

  get text(): Effect.Effect<string, HttpServerError.RequestError> {
    const body = this.body
    if (body._tag === "Text") return Effect.succeed(body.text)
    if (body._tag === "Refused") return Effect.fail(this.refusal(body.error))
    return Effect.flatMap(Effect.promise(() => readBody(this.source)), (read) => {
      if (read._tag !== "Read") {
        this.body = {
          _tag: "Refused",
          error: read._tag === "TooLarge"
            ? bodyRefusals.tooLarge
            : read._tag === "TooManyChunks"
            ? bodyRefusals.tooManyChunks
            : bodyRefusals.incomplete
        }
        return this.text
      }
      try {
        this.body = { _tag: "Text", text: utf8.decode(read.bytes) }
      } catch {
        // Not UTF-8: no JSON text either (RFC 8259 §8.1).
        this.body = { _tag: "Refused", error: bodyRefusals.notJson }
      }
      return this.text
    })
  }

  get json(): Effect.Effect<unknown, HttpServerError.RequestError> {
    return Effect.flatMap(this.text, () => {
      const body = this.body as Extract<Body, { _tag: "Text" }>
      if (body.parsed !== undefined) return Effect.succeed(body.parsed.json)
      try {
        body.parsed = { json: JSON.parse(body.text) as unknown }
        return Effect.succeed(body.parsed.json)
      } catch (cause) {
        return Effect.fail(new HttpServerError.RequestError({ request: this, reason: "Decode", cause }))
      }
    })
  }

  get urlParamsBody(): Effect.Effect<UrlParams.UrlParams, HttpServerError.RequestError> {
    return Effect.map(this.text, (text) => UrlParams.fromInput(new URLSearchParams(text)))
  }
  get arrayBuffer(): Effect.Effect<ArrayBuffer, HttpServerError.RequestError> {
    return Effect.map(this.text, (text) => new TextEncoder().encode(text).buffer as ArrayBuffer)
  }
  get stream(): Stream.Stream<Uint8Array, HttpServerError.RequestError> {
    return Stream.fail(unsupported(this, "a body as a stream"))
  }
  get multipart(): Effect.Effect<Multipart.Persisted, Multipart.MultipartError> {
    return Effect.die(unsupported(this, "a multipart body"))
  }
  get multipartStream(): Stream.Stream<Multipart.Part, Multipart.MultipartError> {
    return Stream.die(unsupported(this, "a multipart body"))
  }
  get upgrade(): Effect.Effect<Socket.Socket, HttpServerError.RequestError> {
    return Effect.fail(unsupported(this, "an upgrade"))
  }
  modify(): HttpServerRequest.HttpServerRequest {
    throw new Error("The edge's requests are not modified")
  }
  toJSON(): unknown {
    return { _id: "@effect/platform/HttpServerRequest", method: this.method, url: this.originalUrl }
  }

  private refusal(error: ApiError) {
    return new HttpServerError.RequestError({ request: this, reason: "Decode", cause: error })
  }
}
Object.assign(EdgeRequest.prototype, {
  [HttpServerRequest.TypeId]: HttpServerRequest.TypeId,
  [HttpIncomingMessage.TypeId]: HttpIncomingMessage.TypeId
})
