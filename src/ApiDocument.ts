import type * as HttpApi from "@effect/platform/HttpApi"
import { Context, Option } from "effect"
import { scopeOf } from "./ApiKeys/Api.ts"
import {
  declaredEndpoints,
  ErrorCases,
  middlewareOf,
  OptionalRequestHeaders,
  type SuccessHeader,
  SuccessHeaders
} from "./Declaration.ts"
import { grantedBy, type Scope } from "./Domain/ApiKey.ts"
import { JsonBody } from "./Domain/JsonBody.ts"
import { RequireIdempotencyKey } from "./Idempotency/Api.ts"

/**
 * Finishing touches on the generated OpenAPI document, so that it matches the wire:
 * HttpApi always lists its own HttpApiDecodeError, which never reaches a client here
 * (it leaves as VALIDATION_ERROR), response headers have no place in HttpApi schemas, and the
 * `HEAD` the server answers on every GET route is no endpoint of the definition.
 * What differs between operations is read from their declaration: the scope each requires, and
 * whether it answers repeats of an `Idempotency-Key` (`Idempotent-Replayed`).
 */
type Json = Record<string, any>

const decodeErrorSchemas = ["HttpApiDecodeError", "Issue", "PropertyKey"]
const isDecodeErrorRef = (schema: Json) => schema.$ref === "#/components/schemas/HttpApiDecodeError"

const header = (description: string, schema: Json = { type: "string" }) => ({ description, schema })

/** The headers on every answer of the service (docs/http-reference.md, Headers on every answer), declared once and referred to. */
const everyAnswer: Json = {
  "X-Request-Id": {
    ...header("The request's id, as the service's log names it: a new UUID, or the one a trusted reverse proxy sent."),
    required: true
  },
  "X-Content-Type-Options": {
    ...header("`nosniff`: no browser reads an answer as anything but its `Content-Type`.", {
      type: "string",
      enum: ["nosniff"]
    }),
    required: true
  }
}
const everyAnswerRefs = Object.fromEntries(
  Object.keys(everyAnswer).map((name) => [name, { $ref: `#/components/headers/${name}` }])
)
const rateLimitHeaders = {
  "RateLimit-Policy": {
    ...header("The key's quota (IETF draft-10), its own or the server's, e.g. `\"default\";q=120;w=60`."),
    required: true
  },
  "RateLimit": {
    ...header("What is left of it: `\"default\";r=<remaining>;t=<seconds until a request is available again>`."),
    required: true
  },
  "Api-Key-Expires": header(
    "When the secret this request sent stops working (the key's expiry, or the end of a rolled key's previous secret), the earlier, as an IMF-fixdate (RFC 9110); absent for a secret without an end."
  )
}
const retryAfter = header("Seconds to wait before retrying.", { type: "integer", format: "int32", minimum: 1 })

/**
 * The statuses a secured operation answers only once the key has been checked: these always carry
 * the RateLimit headers. A 401 never does; a 405 is answered before the key is read; a 404 may be
 * the route's (before) or a record's (after); a 500 or 503 may come before or after.
 */
const afterTheKey = new Set(["200", "304", "400", "403", "409", "413", "415", "429"])

/**
 * The code of an answer that comes after the key and carries none of the key's quota headers: the
 * analytics' brand line, which is no measure of the key's quota (docs/integrators.md, Analytics).
 */
const notTheQuota = "`CONCURRENCY_LIMITED`"
const quotaHeaders = new Set(["RateLimit-Policy", "RateLimit"])

/**
 * The RateLimit headers of a secured operation's answer with `status` and `codes`, required where
 * every such answer has them.
 */
const rateLimitHeadersFor = (status: string, codes: ReadonlyArray<string>): Json => {
  if (status === "401" || status === "405") return {}
  const unmetered = codes.includes(notTheQuota)
  if (afterTheKey.has(status) && !unmetered) return rateLimitHeaders
  return Object.fromEntries(
    Object.entries<Json>(rateLimitHeaders).map(([name, { required: _, ...optional }]) => [
      name,
      unmetered && quotaHeaders.has(name)
        ? { ...optional, description: `${optional.description} Absent with ${notTheQuota}.` }
        : optional
    ])
  )
}

const headersFor = (status: string, secured: boolean, replays: boolean, codes: ReadonlyArray<string>): Json => ({
  ...everyAnswerRefs,
  ...(secured ? rateLimitHeadersFor(status, codes) : {}),
  ...(status === "401"
    ? { "WWW-Authenticate": { ...header("`Bearer`"), required: true } }
    : status === "403"
    ? { "WWW-Authenticate": { ...header("`Bearer error=\"insufficient_scope\", scope=\"<scope>\"`"), required: true } }
    : status === "429"
    ? { "Retry-After": { ...retryAfter, required: true } }
    : status === "405"
    ? { "Allow": { ...header("The methods the route takes, e.g. `GET, HEAD`."), required: true } }
    : status === "415"
    ? {
      "Accept-Encoding": header(
        "`identity`, when the body was refused for its `Content-Encoding`: the body must be sent as it is.",
        { type: "string", enum: ["identity"] }
      )
    }
    : status === "409"
    ? {
      "Retry-After": header("`1`, with `IDEMPOTENCY_IN_PROGRESS` only.", {
        type: "integer",
        format: "int32",
        minimum: 1
      })
    }
    : status === "200" && replays
    ? {
      "Idempotent-Replayed": header("Present, as `true`, when this is the stored response of an earlier request.", {
        type: "string",
        enum: ["true"]
      })
    }
    : {})
})

const withoutDecodeError = (schema: Json): Json | undefined => {
  if (isDecodeErrorRef(schema)) return undefined
  if (!Array.isArray(schema.anyOf)) return schema
  const refs = [...new Set(schema.anyOf.filter((s: Json) => !isDecodeErrorRef(s)).map((s: Json) => JSON.stringify(s)))]
    .map((s) => JSON.parse(s as string))
  return refs.length === 1 ? refs[0] : { ...schema, anyOf: refs }
}

const codesOf = (schema: Json): Array<string> =>
  (schema.anyOf ?? [schema]).map((s: Json) => `\`${String(s.$ref).split("/").pop()}\``)

const pathExamples: Readonly<Record<string, string>> = {
  creatorId: "5d2a7c3e-1b4f-4e6a-8c9d-0e1f2a3b4c5d",
  campaignId: "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d"
}

/** What the OpenAPI document says of an operation beyond its schemas, from its declaration. */
interface Declaration {
  readonly scope: Option.Option<Scope>
  readonly replays: boolean
  /** Whether it takes a JSON body, read and refused as `JsonBody` does. */
  readonly takesJson: boolean
  /** Optional request headers it reads, with what they mean. */
  readonly optionalHeaders: Readonly<Record<string, string>>
  /** Headers its 200 (and 304) carries, with what they mean. */
  readonly successHeaders: Readonly<Record<string, SuccessHeader>>
  /** When it answers an error status, beyond its schemas, by status. */
  readonly errorCases: Readonly<Record<string, string>>
}

/** Said of every operation's 400: the edge refuses these on each (docs/integrators.md, Errors). */
const unknownQuery =
  "A query parameter the operation does not take, or one given twice, is `VALIDATION_ERROR` naming it; so is a `Host` that is missing (HTTP/1.0), given more than once or not a `host[:port]`."

/** Said of each operation that takes a JSON body, in its description and its 415 (docs/integrators.md, Errors). */
const jsonBody =
  "The body is JSON in UTF-8, at most 16 KiB. A body without `Content-Type` is read as JSON; a byte order mark (U+FEFF) before it is ignored."
const unsupportedBody =
  "A `Content-Type` other than `application/json`, a `charset` other than `utf-8`, or a `Content-Encoding` other than `identity` (the body compressed) is `UNSUPPORTED_MEDIA_TYPE`."

/** The transform for `api`'s document (`OpenApi.Transform`), by operation id (`group.endpoint`). */
export const finishDocument = (api: HttpApi.HttpApi.Any) => {
  const declarations = new Map<string, Declaration>(
    declaredEndpoints(api).map((declared) => [
      `${declared.group.identifier}.${declared.endpoint.name}`,
      {
        scope: Option.fromNullable(scopeOf(middlewareOf(declared))),
        replays: middlewareOf(declared).some((tag) => tag.key === RequireIdempotencyKey.key),
        takesJson: middlewareOf(declared).some((tag) => tag.key === JsonBody.key),
        successHeaders: Option.getOrElse(Context.getOption(declared.endpoint.annotations, SuccessHeaders), () => ({})),
        optionalHeaders: Option.getOrElse(
          Context.getOption(declared.endpoint.annotations, OptionalRequestHeaders),
          () => ({})
        ),
        errorCases: Option.getOrElse(Context.getOption(declared.endpoint.annotations, ErrorCases), () => ({}))
      }
    ])
  )
  return (spec: Json): Json => finish(spec, declarations)
}

/** Who answers questions about the service: those who run it (each deployment serves its own document). */
const contact = { name: "The operators of this deployment" }

const finish = (spec: Json, declarations: ReadonlyMap<string, Declaration>): Json => {
  spec.info.contact = contact
  // The definition hands the keys' middleware the whole `Authorization` header (`ApiKeys/Api.ts`):
  // what clients send in it is a Bearer token.
  const bearer = spec.components?.securitySchemes?.bearer
  if (bearer !== undefined) {
    spec.components.securitySchemes.bearer = {
      description: bearer.description,
      type: "http",
      scheme: "bearer",
      bearerFormat: "cak_<keyId>_<secret>"
    }
  }
  for (const [path, operations] of Object.entries<Json>(spec.paths)) {
    for (const [method, operation] of Object.entries<Json>(operations)) {
      const declaration = declarations.get(operation.operationId)
      // The scope in the security requirement, each scope that grants it an alternative (whoami needs none).
      if (declaration !== undefined && Option.isSome(declaration.scope)) {
        operation.security = grantedBy(declaration.scope.value).map((scope) => ({ bearer: [scope] }))
      }
      for (const [name, description] of Object.entries(declaration?.optionalHeaders ?? {})) {
        operation.parameters.push({ name, in: "header", required: false, description, schema: { type: "string" } })
      }
      const secured = operation.security.length > 0
      for (const [status, response] of Object.entries<Json>(operation.responses)) {
        const content = response.content?.["application/json"]
        let codes: ReadonlyArray<string> = []
        if (content !== undefined) {
          const schema = withoutDecodeError(content.schema)
          if (schema === undefined) {
            delete operation.responses[status]
            continue
          }
          content.schema = schema
          if (Number(status) >= 400) {
            const cases = [
              ...(declaration?.errorCases[status] === undefined ? [] : [declaration.errorCases[status]]),
              ...(status === "400" ? [unknownQuery] : []),
              ...(status === "415" && declaration?.takesJson === true ? [unsupportedBody] : [])
            ]
            codes = codesOf(schema)
            const listed = codes.join(", ")
            response.description = cases.length === 0 ? listed : `${listed}. ${cases.join(" ")}`
          }
        }
        response.headers = headersFor(status, secured, declaration?.replays ?? false, codes)
        if (status === "200" || status === "304") {
          for (const [name, { always, description }] of Object.entries(declaration?.successHeaders ?? {})) {
            response.headers[name] = { ...header(description), ...(always ? { required: true } : {}) }
          }
        }
      }
      for (const parameter of operation.parameters) {
        if (parameter.in === "header" && parameter.name === "idempotency-key") {
          parameter.name = "Idempotency-Key"
          parameter.example = "walkthrough-1"
        }
        // Working values to try the operation with (the README's walkthrough).
        if (parameter.in === "path") parameter.example = pathExamples[parameter.name]
      }
      if (declaration?.takesJson === true) operation.description = `${operation.description} ${jsonBody}`
      if (method === "get") operations.head = headOf(path, operation)
    }
  }
  for (const name of decodeErrorSchemas) delete spec.components.schemas[name]
  spec.components.headers = everyAnswer
  return spec
}

/**
 * `HEAD` on a GET route, which the server answers as the GET without its body: the same
 * parameters, security, statuses and headers, and no content. The docs page lists each operation
 * once: Scalar leaves an operation marked `x-scalar-ignore` out of its page (its sidebar
 * included), and the document keeps it for every other reader.
 */
const headOf = (path: string, get: Json): Json => ({
  ...structuredClone(get),
  "x-scalar-ignore": true,
  operationId: `${get.operationId}.head`,
  summary: `${get.summary} (headers only)`,
  description: `The answer of \`GET ${path}\`, its status and headers (\`Date\` too), without its body.`,
  responses: Object.fromEntries(
    Object.entries<Json>(get.responses).map((
      [status, { content: _, ...response }]
    ) => [status, structuredClone(response)])
  )
})
