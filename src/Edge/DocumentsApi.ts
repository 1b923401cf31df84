import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { OptionalRequestHeaders, SuccessHeaders } from "../Declaration.ts"

/**
 * The documents the server serves of itself, declared as operations of the definition so that
 * the OpenAPI document lists them, the typed client can call them, and both servers serve them
 * from the same handlers (`Documents.ts`). The docs page and its script are HTML and JavaScript
 * for a browser, no operations: the edge serves them beside the definition.
 */

export const ServiceIndex = Schema.Struct({
  ok: Schema.Literal(true),
  name: Schema.String.annotations({ description: "The API's title, as this document names it." }),
  version: Schema.String.annotations({ description: "The version of the service, as `--version` prints it." }),
  docs: Schema.NullOr(Schema.String).annotations({
    description:
      "The docs page: at `PUBLIC_URL` when it is set, else its path (`/docs`); `null` when the page is turned off (`DOCS_ENABLED=false`)."
  }),
  openApi: Schema.String.annotations({
    description: "This OpenAPI document: at `PUBLIC_URL` when it is set, else its path (`/openapi.json`)."
  })
}).annotations({
  identifier: "ServiceIndex",
  examples: [{
    ok: true,
    name: "Campaign Activation and Identity API",
    version: "0.1.0",
    docs: "/docs",
    openApi: "/openapi.json"
  }]
})

/**
 * The OpenAPI document, by the fields every one has: stated as JSON Schema outright, since the
 * library's own for `Unknown` (the rest of the document) names a schema id of its own, three times.
 */
export const OpenApiDocument = Schema.Struct(
  {
    openapi: Schema.String,
    info: Schema.Struct({ title: Schema.String, version: Schema.String }),
    paths: Schema.Object
  },
  Schema.Record({ key: Schema.String, value: Schema.Unknown })
).annotations({
  identifier: "OpenApiDocument",
  jsonSchema: {
    description: "An OpenAPI 3.1 document: this one.",
    type: "object",
    required: ["openapi", "info", "paths"],
    properties: {
      openapi: { type: "string" },
      info: {
        type: "object",
        required: ["title", "version"],
        properties: { title: { type: "string" }, version: { type: "string" } }
      },
      paths: { type: "object" }
    }
  }
})

const index = HttpApiEndpoint.get("index", "/")
  .addSuccess(ServiceIndex)
  .annotate(OpenApi.Summary, "Where to start")
  .annotate(
    OpenApi.Description,
    "What this service is, its version, and where its documents are: this OpenAPI document and the docs page. Needs no API key and is not rate limited."
  )

const openApi = HttpApiEndpoint.get("openApi", "/openapi.json")
  .addSuccess(OpenApiDocument)
  .addSuccess(
    Schema.Void.annotations({
      description: "Not Modified: the `ETag` sent in `If-None-Match` is the one this form of the document has; no body."
    }),
    { status: 304 }
  )
  .annotate(SuccessHeaders, {
    "ETag": {
      description:
        "A strong validator of the form sent: the plain document, its gzip form and its br form each have their own. Send it in `If-None-Match` for a `304`.",
      always: true
    },
    "Cache-Control": { description: "`no-cache`: kept, but asked again with its `ETag` each time.", always: true },
    "Vary": { description: "`accept-encoding`: the form sent follows `Accept-Encoding`.", always: true },
    "Content-Encoding": {
      description: "`gzip` when `Accept-Encoding` takes it; absent for the plain form.",
      always: false
    }
  })
  .annotate(OptionalRequestHeaders, {
    "If-None-Match":
      "The `ETag` of the form asked for (or a list of tags, or `*`): `304 Not Modified` without a body when it matches.",
    "Accept-Encoding": "`gzip` for the document gzipped (with its own `ETag`); anything else, the plain document."
  })
  .annotate(OpenApi.Summary, "This OpenAPI document")
  .annotate(
    OpenApi.Description,
    "This document, generated from the definition the server runs, naming `PUBLIC_URL` as its server. Needs no API key and is not rate limited."
  )

export class DocumentsApi extends HttpApiGroup.make("documents")
  .add(index)
  .add(openApi)
  .annotate(OpenApi.Title, "Documents")
{
  static readonly index = index
  static readonly openApi = openApi
}
