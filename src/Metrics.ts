import { type ConfigError, Context, Effect, Layer, Option } from "effect"
import { MetricsConfig, type StartupError, TracingConfig } from "./Config.ts"
import type { Recorder } from "./Metrics/Series.ts"

/**
 * What the service counts (docs/operators.md, Operating it: Metrics), asked for once by the edge and each
 * service that counts, when it is built. Always provided: by `MetricsLive` in the server, by
 * `MetricsOff` where tests build services alone, so that a layer left without it does not compile.
 */
export class Metrics extends Context.Tag("Metrics")<Metrics, Recorder>() {}

const nothing = () => {}

/** Metrics off: every call does nothing, and the edge, seeing `on` false, adds no step at all. */
export const MetricsOff: Layer.Layer<Metrics> = Layer.succeed(Metrics, {
  on: false,
  answered: nothing,
  replayed: nothing,
  conflicted: nothing,
  activationCreated: nothing,
  committed: nothing,
  databaseUnavailable: nothing
})

/**
 * Metrics when METRICS_PORT or OTEL_EXPORTER_OTLP_ENDPOINT is set: the recorder over the series
 * (`Metrics/Series.ts`), the process's own gauges, the Prometheus listener and the OTLP export, as
 * configured (`Metrics/Exposition.ts`); both are loaded only then. Neither set: `MetricsOff`, and
 * nothing is loaded or counted.
 */
export const MetricsLive: Layer.Layer<Metrics, ConfigError.ConfigError | StartupError> = Layer.unwrapEffect(
  Effect.flatMap(Effect.all([MetricsConfig, TracingConfig]), ([{ host, port }, { endpoint, serviceName }]) => {
    if (Option.isNone(port) && Option.isNone(endpoint)) return Effect.succeed(MetricsOff)
    return Effect.map(
      Effect.promise(() => Promise.all([import("./Metrics/Series.ts"), import("./Metrics/Exposition.ts")])),
      ([{ makeRecorder }, { exposition }]) =>
        Layer.merge(Layer.succeed(Metrics, makeRecorder()), exposition({ host, port, endpoint, serviceName }))
    )
  })
)
