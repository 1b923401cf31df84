import { HttpApi, HttpApiBuilder, HttpApiScalar, HttpApp, OpenApi } from "@effect/platform"
import { Context, Effect, Layer } from "effect"
import { gzip as gzipAsync } from "node:zlib"

/** The OpenAPI document and its docs page: where they are served. */
export const documentRoutes = { openApi: "/openapi.json", docs: "/docs" } as const

/** A document as served: its bytes, compressed once, and the validator that names them. */
export interface PreparedDocument {
  readonly contentType: string
  readonly plain: Uint8Array<ArrayBuffer>
  readonly gzip: Uint8Array<ArrayBuffer>
  readonly etag: string
}

/** Compressed off the event loop (zlib's thread pool): the docs page takes a few hundred ms. */
const prepare = (contentType: string, text: string): Effect.Effect<PreparedDocument> =>
  Effect.promise(async () => {
    const plain = new TextEncoder().encode(text)
    const gzip = await new Promise<Buffer>((resolve, reject) =>
      gzipAsync(plain, { level: 9 }, (error, result) => error === null ? resolve(result) : reject(error))
    )
    return {
      contentType,
      plain,
      gzip: new Uint8Array(gzip),
      etag: `"${new Bun.CryptoHasher("sha256").update(plain).digest("base64url").slice(0, 27)}"`
    }
  })

/**
 * `@effect/platform`'s Scalar page (its script inlined, web fonts off so nothing loads from
 * outside), rendered once by the platform's own handler rather than per request.
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
        // `showToolbar` is Scalar's own option (not in @effect/platform's type): its toolbar offers
        // to share the document and generate SDKs through outside services.
        scalar: { withDefaultFonts: false, showToolbar: "never" } as HttpApiScalar.ScalarConfig
      }).pipe(
        Layer.provideMerge(HttpApiBuilder.Router.Live),
        Layer.provide(Layer.succeed(HttpApi.Api, { api: api as never, context: Context.empty() }))
      )
    )
  )

/** The definition naming `publicUrl` as its server (a trailing slash dropped, so clients join paths to it). */
const withServer = (api: HttpApi.HttpApi.Any, publicUrl: string) =>
  (api as HttpApi.HttpApi.AnyWithProps).annotate(OpenApi.Servers, [
    { url: publicUrl.replace(/\/+$/, ""), description: "This service" }
  ])

/** The OpenAPI document generated from the HttpApi definition, naming `publicUrl` as the server. */
export const openApiDocument = (api: HttpApi.HttpApi.Any, publicUrl: string): Effect.Effect<PreparedDocument> =>
  prepare("application/json", JSON.stringify(OpenApi.fromApi(withServer(api, publicUrl))))

/** The docs page for the same document: Scalar's script, inlined, is most of its 3 MB. */
export const docsPage = (api: HttpApi.HttpApi.Any, publicUrl: string): Effect.Effect<PreparedDocument> =>
  Effect.flatMap(scalarPage(withServer(api, publicUrl)), (page) => prepare("text/html; charset=utf-8", page))
