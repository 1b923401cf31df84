import { HashMap, Logger, Option } from "effect"
import type { AccessLogFields } from "../../src/Logging.ts"

/** Every stderr line as JSON; a line that is not JSON fails the parse, as it should. */
export const logLines = (stderr: string): Array<Record<string, any>> =>
  stderr.split("\n").filter((line) => line.trim() !== "").map((line) => JSON.parse(line))

/** An access line's annotations: its fields and the request id every line of the request carries. */
export type AccessLine = AccessLogFields & { readonly requestId: string }

export const accessLog = (stderr: string): Array<AccessLine> =>
  logLines(stderr).filter((line) => line.message === "request").map((line) => line.annotations)

export interface OtlpSpan {
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId?: string
  readonly name: string
  readonly attributes: ReadonlyArray<{ readonly key: string; readonly value: Record<string, unknown> }>
  readonly events?: ReadonlyArray<{
    readonly name: string
    readonly attributes: ReadonlyArray<{ readonly key: string; readonly value: Record<string, unknown> }>
  }>
}

export const spanAttribute = (span: OtlpSpan, key: string): unknown => {
  const value = span.attributes.find((attribute) => attribute.key === key)?.value
  return value === undefined ? undefined : Object.values(value)[0]
}

export type OtlpCollector = ReturnType<typeof otlpCollector>

/** An OTLP/HTTP collector on loopback that keeps every JSON body POSTed to it (/v1/traces, /v1/metrics). */
export const otlpCollector = (port = 0) => {
  const received: Array<{ readonly path: string; readonly body: any }> = []
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port,
    fetch: async (req) => {
      received.push({ path: new URL(req.url).pathname, body: await req.json() })
      return Response.json({})
    }
  })
  return {
    url: `http://127.0.0.1:${server.port}`,
    received,
    resources: () =>
      received.flatMap(({ body, path }) => path === "/v1/traces" ? body.resourceSpans.map((r: any) => r.resource) : []),
    spans: (): Array<OtlpSpan> =>
      received.flatMap(({ body, path }) =>
        path === "/v1/traces" ? body.resourceSpans.flatMap((r: any) => r.scopeSpans.flatMap((s: any) => s.spans)) : []
      ),
    /** Every metric of every export to /v1/metrics, in the order received (the last export last). */
    metrics: (): Array<{ readonly name: string; readonly [field: string]: any }> =>
      received.flatMap(({ body, path }) =>
        path === "/v1/metrics"
          ? body.resourceMetrics.flatMap((r: any) => r.scopeMetrics.flatMap((s: any) => s.metrics))
          : []
      ),
    stop: () => server.stop(true)
  }
}

/**
 * Every line logged in process (on any fiber of the layers built after `layer`), as `keep` takes
 * it from the logger's options.
 */
export const captureLogs = <A>(keep: (options: Logger.Logger.Options<unknown>) => A) => {
  const lines: Array<A> = []
  return {
    lines,
    layer: Logger.replace(Logger.defaultLogger, Logger.make((options) => void lines.push(keep(options))))
  }
}

/** A logged line's annotation under `key`, or undefined. */
export const annotationOf = (annotations: HashMap.HashMap<string, unknown>, key: string): unknown =>
  Option.getOrUndefined(HashMap.get(annotations, key))
