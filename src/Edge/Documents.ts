import { HttpApi, HttpApiBuilder, HttpApiScalar, HttpApp, OpenApi } from "@effect/platform"
import { Context, Effect, Layer, Option } from "effect"
import { brotliCompress, constants as zlib, gzip as gzipAsync } from "node:zlib"
import { EdgeConfig, ServerConfig } from "../Config.ts"
import { NotFound } from "../Domain/Errors.ts"
import { notModified } from "../Responses.ts"
import type { Reply } from "./Endpoint.ts"
import { rawPath, type Route } from "./Router.ts"
import type { EdgeRequest } from "./ServerRequest.ts"

/**
 * The OpenAPI document, its docs page and the page's script: where they are served. The script's
 * name is its digest, so a browser keeps it for good and a new version is a new name.
 */
export const documentRoutes = {
  index: "/",
  openApi: "/openapi.json",
  docs: "/docs",
  docsScript: "/docs/:script"
} as const

/** A compressed form of a document, by its `Content-Encoding`. */
interface Encoded {
  readonly coding: "br" | "gzip"
  readonly bytes: Uint8Array<ArrayBuffer>
}

/** A document as served: its bytes, compressed once, and the validator that names them. */
export interface PreparedDocument {
  readonly contentType: string
  readonly cacheControl: string
  readonly plain: Uint8Array<ArrayBuffer>
  /** The smallest first. */
  readonly encoded: ReadonlyArray<Encoded>
  readonly etag: string
  /** Headers of its own, beyond its type, caching and validator. */
  readonly headers?: Readonly<Record<string, string>>
}

const accepts: Readonly<Record<Encoded["coding"], RegExp>> = { br: /\bbr\b/, gzip: /\bgzip\b/ }

/** The smallest form of the document the client takes, if any. */
export const encodedFor = (document: PreparedDocument, acceptEncoding: string | null): Encoded | undefined =>
  acceptEncoding === null ? undefined : document.encoded.find(({ coding }) => accepts[coding].test(acceptEncoding))

const noCache = "no-cache"
const immutable = "public, max-age=31536000, immutable"

/** Compressed off the event loop (zlib's thread pool). */
const compress = (coding: Encoded["coding"], plain: Uint8Array<ArrayBuffer>): Effect.Effect<Encoded> =>
  Effect.promise(() =>
    new Promise<Encoded>((resolve, reject) => {
      const done = (error: Error | null, result: Buffer) =>
        error === null ? resolve({ coding, bytes: new Uint8Array(result) }) : reject(error)
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

const digestOf = (plain: Uint8Array<ArrayBuffer>) =>
  new Bun.CryptoHasher("sha256").update(plain).digest("base64url").slice(0, 27)

const prepare = (
  contentType: string,
  cacheControl: string,
  plain: Uint8Array<ArrayBuffer>,
  codings: ReadonlyArray<Encoded["coding"]>
): Effect.Effect<PreparedDocument> =>
  Effect.map(
    Effect.forEach(codings, (coding) => compress(coding, plain), { concurrency: "unbounded" }),
    (encoded) => ({ contentType, cacheControl, plain, encoded, etag: `"${digestOf(plain)}"` })
  )

const encoder = new TextEncoder()

/** The scheme the definition's secured endpoints declare (the API has one: the bearer API key). */
const securitySchemeOf = (api: HttpApi.HttpApi.Any): string | undefined =>
  Object.keys(OpenApi.fromApi(api as HttpApi.HttpApi.AnyWithProps).components.securitySchemes)[0]

/**
 * `@effect/platform`'s Scalar page (web fonts off so nothing loads from outside), rendered once by
 * the platform's own handler rather than per request.
 */
const scalarPage = (api: HttpApi.HttpApi.Any) =>
  Effect.gen(function*() {
    const router = yield* HttpApiBuilder.Router.router
    const handler = HttpApp.toWebHandler(router as HttpApp.Default<unknown>)
    const response = yield* Effect.promise(() => handler(new Request(`http://localhost${documentRoutes.docs}`)))
    return yield* Effect.promise(() => response.text())
  }).pipe(
    Effect.provide(
      HttpApiScalar.layer({
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
    )
  )

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
  return `${page.slice(0, start)}<script id="api-reference" data-url="${documentRoutes.openApi}"></script>${
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
    const { around, script } = splitScript(yield* scalarPage(withServer(api, publicUrl)))
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
      // The one HTML page: no other site may frame it (README, For integrators).
      page: { ...page, headers: { "content-security-policy": "frame-ancestors 'none'" } },
      script: (name) => name === scriptName ? Option.some(prepared) : Option.none()
    }
  })

/** A document from bytes prepared once: compressed as the client takes it, 304 when it has them. */
const serveDocument = (request: EdgeRequest, document: PreparedDocument): Reply => {
  const headers = {
    ...document.headers,
    "content-type": document.contentType,
    "cache-control": document.cacheControl,
    "etag": document.etag,
    "vary": "accept-encoding"
  }
  if (notModified(request.source.headers.get("if-none-match"), document.etag)) {
    return { status: 304, body: undefined, headers }
  }
  const encoded = encodedFor(document, request.source.headers.get("accept-encoding"))
  return {
    status: 200,
    body: encoded === undefined ? document.plain : encoded.bytes,
    headers: encoded === undefined ? headers : { ...headers, "content-encoding": encoded.coding }
  }
}

/**
 * `GET /`: what this service is and where its documents are, from the definition's title and
 * version. The documents' URLs are PUBLIC_URL's when it is set; without it the server does not
 * know the address its clients use, and names their paths alone (README, For integrators).
 */
const indexOf = (api: HttpApi.HttpApi.Any, docsEnabled: boolean, publicUrl: Option.Option<URL>): string => {
  const { annotations } = api as HttpApi.HttpApi.AnyWithProps
  const at = (path: string) =>
    Option.match(publicUrl, { onNone: () => path, onSome: (url) => `${url.href.replace(/\/+$/, "")}${path}` })
  return JSON.stringify({
    ok: true,
    name: Context.unsafeGet(annotations, OpenApi.Title),
    version: Context.unsafeGet(annotations, OpenApi.Version),
    docs: docsEnabled ? at(documentRoutes.docs) : null,
    openApi: at(documentRoutes.openApi)
  })
}

/**
 * The documents' routes beside the definition's (`GET /`, the OpenAPI document, and with
 * DOCS_ENABLED the docs page and its script), and the port they name: `PUBLIC_URL` or, by
 * default, this server at the port it listens on (`listening`). Each document is made by the
 * first request that asks for it and served from its bytes from then on (the docs page, megabytes,
 * is never held by a server nobody reads it from).
 */
export const makeDocumentRoutes = (api: HttpApi.HttpApi.Any) =>
  Effect.gen(function*() {
    const { docsEnabled, publicUrl } = yield* EdgeConfig
    let listeningPort = (yield* ServerConfig).port
    const serverUrl = () =>
      Option.match(publicUrl, { onNone: () => `http://localhost:${listeningPort}`, onSome: (url) => url.href })
    const openApi = yield* Effect.cached(Effect.suspend(() => openApiDocument(api, serverUrl())))
    const docs = yield* Effect.cached(Effect.suspend(() => docsPage(api, serverUrl())))
    const index: Reply = { status: 200, body: indexOf(api, docsEnabled, publicUrl) }
    const noSuchScript = (request: EdgeRequest) =>
      Effect.fail(new NotFound({ message: `No route for ${request.method} ${rawPath(request.source.url)}.` }))
    const routes: ReadonlyArray<Route> = [
      { method: "GET", path: documentRoutes.index, run: () => Effect.succeed(index) },
      {
        method: "GET",
        path: documentRoutes.openApi,
        run: (request) => Effect.map(openApi, (document) => serveDocument(request, document))
      },
      ...(docsEnabled
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
        : [])
    ]
    return {
      routes,
      /** At once, before any request can make a document with the configured port (0, say). */
      listening: (port: number) => {
        listeningPort = port
      }
    }
  })
