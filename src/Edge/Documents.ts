import * as HttpApi from "@effect/platform/HttpApi"
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import type * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import type * as HttpApiScalar from "@effect/platform/HttpApiScalar"
import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as OpenApi from "@effect/platform/OpenApi"
import { Context, Effect, Layer, Option } from "effect"
import { brotliCompress, constants as zlib, gzip as gzipAsync } from "node:zlib"
import { EdgeConfig, ServerConfig } from "../Config.ts"
import { NotFound } from "../Domain/Errors.ts"
import { notModified } from "../Responses.ts"
import { DocumentsApi } from "./DocumentsApi.ts"
import type { Reply } from "./Endpoint.ts"
import { rawPath, type Route } from "./Router.ts"
import type { EdgeRequest } from "./ServerRequest.ts"

/**
 * The docs page and the page's script: where they are served. The script's name is its digest, so
 * a browser keeps it for good and a new version is a new name. The index and the OpenAPI document
 * are operations of the definition (`DocumentsApi.ts`).
 */
export const documentRoutes = {
  docs: "/docs",
  docsScript: "/docs/:script"
} as const

/**
 * The port this server listens on, which the documents name unless `PUBLIC_URL` is set: the web
 * server's (`WebServer.ts`); without one (in process) the configured PORT.
 */
export class ListeningPort extends Context.Tag("Edge/ListeningPort")<ListeningPort, number>() {}

/** One form of a document: its bytes, its `Content-Encoding` (none for the plain form) and its validator. */
interface Form {
  readonly coding: "br" | "gzip" | undefined
  readonly bytes: Uint8Array<ArrayBuffer>
  /**
   * A strong validator of these bytes: each form has its own, as a strong tag names one sequence
   * of bytes, so that one form's is never taken for another's (RFC 9110 §8.8.3).
   */
  readonly etag: string
}

interface Encoded extends Form {
  readonly coding: "br" | "gzip"
}

/** A document as served: its bytes, compressed once, each form with the validator that names it. */
export interface PreparedDocument {
  readonly contentType: string
  readonly cacheControl: string
  readonly plain: Form
  /** The smallest first. */
  readonly encoded: ReadonlyArray<Encoded>
  /** Headers of its own, beyond its type, caching and validator. */
  readonly headers?: Readonly<Record<string, string>>
}

const accepts: Readonly<Record<Encoded["coding"], RegExp>> = { br: /\bbr\b/, gzip: /\bgzip\b/ }

/** The smallest form of the document the client takes: a compressed one, or else the plain. */
const formFor = (document: PreparedDocument, acceptEncoding: string | null | undefined): Form =>
  (acceptEncoding === null || acceptEncoding === undefined
    ? undefined
    : document.encoded.find(({ coding }) => accepts[coding].test(acceptEncoding))) ?? document.plain

const noCache = "no-cache"
const immutable = "public, max-age=31536000, immutable"

const digestOf = (bytes: Uint8Array<ArrayBuffer>) =>
  new Bun.CryptoHasher("sha256").update(bytes).digest("base64url").slice(0, 27)

const formOf = <Coding extends Form["coding"]>(coding: Coding, bytes: Uint8Array<ArrayBuffer>) => ({
  coding,
  bytes,
  etag: `"${digestOf(bytes)}"`
})

/** Compressed off the event loop (zlib's thread pool). */
const compress = (coding: Encoded["coding"], plain: Uint8Array<ArrayBuffer>): Effect.Effect<Encoded> =>
  Effect.promise(() =>
    new Promise<Encoded>((resolve, reject) => {
      const done = (error: Error | null, result: Buffer) =>
        error === null ? resolve(formOf(coding, new Uint8Array(result))) : reject(error)
      if (coding === "gzip") gzipAsync(plain, { level: 9 }, done)
      // Quality 9, not brotli's default 11: on Scalar's script 11 takes seconds of CPU for a few
      // percent fewer bytes (bench/BENCHMARKS.md).
      else {
        brotliCompress(plain, {
          params: { [zlib.BROTLI_PARAM_QUALITY]: 9, [zlib.BROTLI_PARAM_SIZE_HINT]: plain.length }
        }, done)
      }
    })
  )

const prepare = (
  contentType: string,
  cacheControl: string,
  plain: Uint8Array<ArrayBuffer>,
  codings: ReadonlyArray<Encoded["coding"]>
): Effect.Effect<PreparedDocument> =>
  Effect.map(
    Effect.forEach(codings, (coding) => compress(coding, plain), { concurrency: "unbounded" }),
    (encoded) => ({ contentType, cacheControl, plain: formOf(undefined, plain), encoded })
  )

const encoder = new TextEncoder()

/** The scheme the definition's secured endpoints declare (the API has one: the bearer API key). */
const securitySchemeOf = (api: HttpApi.HttpApi.Any): string | undefined =>
  Object.keys(OpenApi.fromApi(api as HttpApi.HttpApi.AnyWithProps).components.securitySchemes)[0]

/**
 * `@effect/platform`'s Scalar page (web fonts off so nothing loads from outside), rendered once by
 * the platform's own handler rather than per request. Its module is loaded here, by the first
 * request for the page: it holds Scalar's script as a string of 3.4 MB, 8 MB of the heap once
 * loaded, and a heap that keeps more live is let grow further before it is collected
 * (bench/BENCHMARKS.md, Memory).
 */
const scalarPage = (api: HttpApi.HttpApi.Any) =>
  Effect.gen(function*() {
    const HttpApiScalar = yield* Effect.promise(() => import("@effect/platform/HttpApiScalar"))
    const layer = HttpApiScalar.layer({
      path: documentRoutes.docs,
      // Scalar's own options, not in @effect/platform's type: `showToolbar` because its toolbar
      // offers to share the document and generate SDKs through outside services;
      // `authentication` so that "Test Request" sends the key pasted in it from the start,
      // instead of "No authentication selected" until the reader picks the scheme.
      scalar: {
        withDefaultFonts: false,
        showToolbar: "never",
        authentication: { preferredSecurityScheme: securitySchemeOf(api) }
      } as HttpApiScalar.ScalarConfig
    }).pipe(
      Layer.provideMerge(HttpApiBuilder.Router.Live),
      Layer.provide(Layer.succeed(HttpApi.Api, { api: api as never, context: Context.empty() }))
    )
    return yield* Effect.provide(
      Effect.gen(function*() {
        const router = yield* HttpApiBuilder.Router.router
        const handler = HttpApp.toWebHandler(router as HttpApp.Default<unknown>)
        const response = yield* Effect.promise(() => handler(new Request(`http://localhost${documentRoutes.docs}`)))
        return yield* Effect.promise(() => response.text())
      }),
      layer
    )
  })

const scriptEnd = "</script>"

/**
 * The platform's page ends with Scalar's script inlined, `<script>…</script>`, after the
 * document's and the configuration's (an inlined script holds no `</script>`). It is most of
 * the page: served apart, the page is a few kilobytes and the browser keeps the script.
 */
const splitScript = (page: string) => {
  const end = page.lastIndexOf(scriptEnd)
  const start = page.indexOf("<script>", page.lastIndexOf(scriptEnd, end - 1))
  if (start === -1) throw new Error("@effect/platform's Scalar page no longer ends with Scalar's inlined script")
  return {
    script: page.slice(start + "<script>".length, end),
    around: (element: string) => page.slice(0, start) + element + page.slice(end + scriptEnd.length)
  }
}

const embeddedDocument = "<script id=\"api-reference\" type=\"application/json\">"

/**
 * The platform's page carries the whole OpenAPI document inline, which grows with every endpoint:
 * Scalar is pointed at `/openapi.json` instead (its `data-url`), the document the service serves
 * anyway, with its own validator. So the page stays a few kilobytes, and a browser that has the
 * document asks only whether it changed.
 */
const withDocumentByUrl = (page: string) => {
  const start = page.indexOf(embeddedDocument)
  const end = page.indexOf(scriptEnd, start)
  if (start === -1 || end === -1) {
    throw new Error("@effect/platform's Scalar page no longer embeds the document as it did")
  }
  return `${page.slice(0, start)}<script id="api-reference" data-url="${DocumentsApi.openApi.path}"></script>${
    page.slice(end + scriptEnd.length)
  }`
}

/** The source map it names is jsDelivr's, not served here: a 404 each time the browser's tools open. */
const withoutSourceMap = (script: string) => script.replace(/\n\/\/# sourceMappingURL=\S+\s*$/, "\n")

/** The definition naming `publicUrl` as its server (a trailing slash dropped, so clients join paths to it). */
const withServer = (api: HttpApi.HttpApi.Any, publicUrl: string) =>
  (api as HttpApi.HttpApi.AnyWithProps).annotate(OpenApi.Servers, [
    { url: publicUrl.replace(/\/+$/, ""), description: "This service" }
  ])

/**
 * The definition with its description's first paragraph alone, which the platform's page puts in
 * its `<meta>` description (twice): the page shows the whole description from the document
 * (`/openapi.json`), and a summary is what a description tag is for.
 */
const withSummary = (api: HttpApi.HttpApi.AnyWithProps) =>
  Option.match(Context.getOption(api.annotations, OpenApi.Description), {
    onNone: () => api,
    onSome: (description) => api.annotate(OpenApi.Description, description.split("\n\n")[0]!)
  })

/** The OpenAPI document generated from the HttpApi definition, naming `publicUrl` as the server. */
export const openApiDocument = (api: HttpApi.HttpApi.Any, publicUrl: string): Effect.Effect<PreparedDocument> =>
  prepare("application/json", noCache, encoder.encode(JSON.stringify(OpenApi.fromApi(withServer(api, publicUrl)))), [
    "gzip"
  ])

/** The docs page and its script, which it names by digest; the script is compressed when first asked for. */
export interface DocsPage {
  readonly page: PreparedDocument
  /** The script, if `name` (its route's parameter) is its name. */
  readonly script: (name: string) => Option.Option<Effect.Effect<PreparedDocument>>
}

/**
 * The docs page for the same document. Brotli only for the script: on the page (mostly the
 * document) it saves under a kilobyte over gzip.
 */
export const docsPage = (api: HttpApi.HttpApi.Any, publicUrl: string): Effect.Effect<DocsPage> =>
  Effect.gen(function*() {
    const { around, script } = splitScript(yield* scalarPage(withSummary(withServer(api, publicUrl))))
    const scriptBytes = encoder.encode(withoutSourceMap(script))
    const scriptName = `scalar.${digestOf(scriptBytes)}.js`
    const page = yield* prepare(
      "text/html; charset=utf-8",
      noCache,
      encoder.encode(withDocumentByUrl(around(`<script src="${documentRoutes.docs}/${scriptName}"></script>`))),
      ["gzip"]
    )
    const prepared = yield* Effect.cached(
      prepare("text/javascript; charset=utf-8", immutable, scriptBytes, ["br", "gzip"])
    )
    return {
      // The one HTML page: no other site may frame it (docs/http-reference.md, Headers on every answer).
      page: { ...page, headers: { "content-security-policy": "frame-ancestors 'none'" } },
      script: (name) => name === scriptName ? Option.some(prepared) : Option.none()
    }
  })

/**
 * A document from bytes prepared once: the form the client takes, with that form's `ETag`, or 304
 * when `If-None-Match` names that form's (weak comparison, RFC 9110 §13.1.2). Another form's tag
 * is another sequence of bytes: it does not match.
 */
const documentReply = (
  document: PreparedDocument,
  ifNoneMatch: string | null | undefined,
  acceptEncoding: string | null | undefined
): Reply => {
  const form = formFor(document, acceptEncoding)
  const headers = {
    ...document.headers,
    "content-type": document.contentType,
    "cache-control": document.cacheControl,
    "etag": form.etag,
    "vary": "accept-encoding"
  }
  if (notModified(ifNoneMatch, form.etag)) return { status: 304, body: undefined, headers }
  return {
    status: 200,
    body: form.bytes,
    headers: form.coding === undefined ? headers : { ...headers, "content-encoding": form.coding }
  }
}

const serveDocument = (request: EdgeRequest, document: PreparedDocument): Reply =>
  documentReply(document, request.source.headers.get("if-none-match"), request.source.headers.get("accept-encoding"))

/** The address the documents name: `PUBLIC_URL`, or else this server on localhost at the port it listens on. */
const serverUrl = Effect.gen(function*() {
  const { publicUrl } = yield* EdgeConfig
  if (Option.isSome(publicUrl)) return publicUrl.value.href
  const listening = yield* Effect.serviceOption(ListeningPort)
  return `http://localhost:${Option.isSome(listening) ? listening.value : (yield* ServerConfig).port}`
})

/**
 * The handlers of the definition's documents (`DocumentsApi.ts`), for both servers. `GET /`: what
 * this service is and where its documents are, from the definition's title and version; their
 * URLs are PUBLIC_URL's when it is set, and without it the server does not know the address its
 * clients use, and names their paths alone (docs/integrators.md, API). The OpenAPI document is made
 * by the first request that asks for it and served from its bytes from then on.
 */
export const documentHandlers = (api: HttpApi.HttpApi.Any) =>
  Effect.gen(function*() {
    const { docsEnabled, publicUrl } = yield* EdgeConfig
    const { annotations } = api as HttpApi.HttpApi.AnyWithProps
    const at = (path: string) =>
      Option.match(publicUrl, { onNone: () => path, onSome: (url) => `${url.href.replace(/\/+$/, "")}${path}` })
    const index = {
      ok: true as const,
      name: Context.unsafeGet(annotations, OpenApi.Title),
      version: Context.unsafeGet(annotations, OpenApi.Version),
      docs: docsEnabled ? at(documentRoutes.docs) : null,
      openApi: at(DocumentsApi.openApi.path)
    }
    const url = yield* serverUrl
    const document = yield* Effect.cached(Effect.suspend(() => openApiDocument(api, url)))
    const handlers: {
      readonly index: HttpApiEndpoint.HttpApiEndpoint.Handler<typeof DocumentsApi.index, never, never>
      readonly openApi: HttpApiEndpoint.HttpApiEndpoint.Handler<typeof DocumentsApi.openApi, never, never>
    } = {
      index: () => Effect.succeed(index),
      openApi: ({ request }) =>
        Effect.map(document, (prepared) => {
          const { body, headers, status } = documentReply(
            prepared,
            request.headers["if-none-match"],
            request.headers["accept-encoding"]
          )
          const { "content-type": contentType, ...rest } = headers ?? {}
          return body === undefined
            ? HttpServerResponse.empty({ status, headers: rest })
            : HttpServerResponse.raw(body, { status, headers: rest, contentType })
        })
    }
    return handlers
  })

/**
 * The docs page and its script, the edge's own routes beside the definition's, with DOCS_ENABLED.
 * The page is made by the first request that asks for it and served from its bytes from then on
 * (megabytes, never held by a server nobody reads it from).
 */
export const makeDocumentRoutes = (api: HttpApi.HttpApi.Any) =>
  Effect.gen(function*() {
    const { docsEnabled } = yield* EdgeConfig
    const url = yield* serverUrl
    const docs = yield* Effect.cached(Effect.suspend(() => docsPage(api, url)))
    const noSuchScript = (request: EdgeRequest) =>
      Effect.fail(new NotFound({ message: `No route for ${request.method} ${rawPath(request.source.url)}.` }))
    const routes: ReadonlyArray<Route> = docsEnabled
      ? [
        {
          method: "GET",
          path: documentRoutes.docs,
          run: (request: EdgeRequest) => Effect.map(docs, ({ page }) => serveDocument(request, page))
        },
        {
          method: "GET",
          path: documentRoutes.docsScript,
          run: (request: EdgeRequest, params: Readonly<Record<string, string>>) =>
            Effect.flatMap(docs, ({ script }) =>
              Option.match(script(params.script ?? ""), {
                onNone: () => noSuchScript(request),
                onSome: Effect.map((document) => serveDocument(request, document))
              }))
        }
      ]
      : []
    return routes
  })
