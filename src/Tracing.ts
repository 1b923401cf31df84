import { Effect, Layer, Option } from "effect"
import { TracingConfig } from "./Config.ts"
import { version } from "./Version.ts"

/**
 * OpenTelemetry spans over OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
 * Without it tracing is off: no span is recorded, per request or per service call.
 */
export const TracingLive = Layer.unwrapEffect(
  Effect.gen(function*() {
    const { endpoint, serviceName } = yield* TracingConfig
    if (Option.isNone(endpoint)) {
      return Layer.setTracerEnabled(false)
    }
    // Loaded only when tracing is on, and by deep imports: the package index loads the whole
    // OpenTelemetry SDK, which OTLP export does not need.
    const [OtlpSerialization, OtlpTracer, FetchHttpClient] = yield* Effect.promise(() =>
      Promise.all([
        import("@effect/opentelemetry/OtlpSerialization"),
        import("@effect/opentelemetry/OtlpTracer"),
        import("@effect/platform/FetchHttpClient")
      ])
    )
    return OtlpTracer.layer({
      url: new URL("v1/traces", endpoint.value.href.endsWith("/") ? endpoint.value : `${endpoint.value.href}/`).href,
      resource: { serviceName, serviceVersion: version }
    }).pipe(Layer.provide([OtlpSerialization.layerJson, FetchHttpClient.layer]))
  })
)
