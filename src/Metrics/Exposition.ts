import { Duration, Effect, Layer, Metric, MetricKeyType, MetricState, Option, Runtime } from "effect"
import type { MetricPair } from "effect"
import { StartupError } from "../Config.ts"
import { logAtStart } from "../Logging.ts"
import { version } from "../Version.ts"
import { series, seriesNames } from "./Series.ts"

const contentType = "text/plain; version=0.0.4; charset=utf-8"

/** A name as Prometheus spells it: OpenTelemetry's dots (and anything else) as underscores. */
const prometheusName = (name: string) => name.replace(/[^a-zA-Z0-9_]/g, "_")

const escapeValue = (value: string) => value.replace(/\\/g, "\\\\").replace(/"/g, "\\\"").replace(/\n/g, "\\n")

const escapeHelp = (text: string) => text.replace(/\\/g, "\\\\").replace(/\n/g, "\\n")

const numberText = (n: number | bigint) =>
  typeof n === "bigint"
    ? n.toString()
    : n === Infinity
    ? "+Inf"
    : n === -Infinity
    ? "-Inf"
    : Number.isNaN(n)
    ? "NaN"
    : String(n)

const labelText = (labels: ReadonlyArray<readonly [string, string]>) =>
  labels.length === 0 ? "" : `{${labels.map(([key, value]) => `${key}="${escapeValue(value)}"`).join(",")}}`

/**
 * The registry's series of this service in the Prometheus text format 0.0.4. By hand, from
 * `Metric.unsafeSnapshot`: the format is a few lines per type, where OpenTelemetry's Prometheus
 * exporter would load its metrics SDK beside Effect's registry for the same text
 * (bench/BENCHMARKS.md, Metrics).
 */
export const render = (): string => {
  const byName = new Map<string, Array<MetricPair.MetricPair.Untyped>>()
  for (const pair of Metric.unsafeSnapshot()) {
    const pairs = byName.get(pair.metricKey.name)
    if (pairs === undefined) byName.set(pair.metricKey.name, [pair])
    else pairs.push(pair)
  }
  const lines: Array<string> = []
  // The service's own families, in their order; never whatever else shares the registry.
  for (const name of seriesNames) {
    const pairs = byName.get(name)
    if (pairs === undefined) continue
    const state = pairs[0]!.metricState
    const type = MetricState.isCounterState(state)
      ? "counter"
      : MetricState.isGaugeState(state)
      ? "gauge"
      : MetricState.isHistogramState(state)
      ? "histogram"
      : undefined
    if (type === undefined) continue
    const family = prometheusName(name)
    lines.push(`# HELP ${family} ${escapeHelp(Option.getOrElse(pairs[0]!.metricKey.description, () => family))}`)
    lines.push(`# TYPE ${family} ${type}`)
    for (const { metricKey, metricState } of pairs) {
      const labels = metricKey.tags.map((tag) => [prometheusName(tag.key), tag.value] as const)
      if (MetricState.isCounterState(metricState)) {
        lines.push(`${family}${labelText(labels)} ${numberText(metricState.count)}`)
      } else if (MetricState.isGaugeState(metricState)) {
        lines.push(`${family}${labelText(labels)} ${numberText(metricState.value)}`)
      } else if (MetricState.isHistogramState(metricState)) {
        // Effect's buckets are already cumulative, and end with +Inf.
        for (const [bound, count] of metricState.buckets) {
          lines.push(`${family}_bucket${labelText([...labels, ["le", numberText(bound)]])} ${count}`)
        }
        lines.push(`${family}_sum${labelText(labels)} ${numberText(metricState.sum)}`)
        lines.push(`${family}_count${labelText(labels)} ${metricState.count}`)
      }
    }
  }
  return `${lines.join("\n")}\n`
}

/** How often the process's gauges are read and the event loop's lag is sampled. */
const sampleEvery = 100
/** The lag shown is the longest of the current and the previous window of this many samples. */
const samplesPerWindow = 50

/**
 * The process's CPU time the counter already holds: one process, one count, however many servers
 * it builds (the tests build several in one).
 */
let cpuMicrosCounted = 0

/** A failing sample is logged at most once per this many milliseconds. */
const failureLogEvery = 60_000

/**
 * The process's own series: memory, CPU and the event loop's lag, measured by a timer that is
 * due every 100 ms and notes how late it ran. A scrape (and the OTLP export) reads what the last
 * sample set; the lag kept is the longest of the last 5–10 s, so that a scrape every 15 s still
 * sees a stall between two samples. A sample that fails (reading the memory opens a file, which
 * fails with EMFILE while the process holds all the descriptors it may) leaves the gauges as they
 * were and is logged at most once a minute; the timer goes on, and so does the process.
 */
const processSampler = Effect.acquireRelease(
  Effect.map(Effect.runtime<never>(), (runtime) => {
    const none: ReadonlyArray<never> = []
    series.startTime.unsafeUpdate(Math.round(Date.now() / 1000 - process.uptime()), none)
    let windowMax = 0
    let previousMax = 0
    let samples = 0
    let due = performance.now() + sampleEvery
    let failures = 0
    let failureLoggedAt = Number.NEGATIVE_INFINITY
    const sample = () => {
      const now = performance.now()
      windowMax = Math.max(windowMax, Math.max(0, now - due) / 1000)
      due = now + sampleEvery
      if (++samples % samplesPerWindow === 0) {
        previousMax = windowMax
        windowMax = 0
      }
      const { system, user } = process.cpuUsage()
      series.cpuSeconds.unsafeUpdate((user + system - cpuMicrosCounted) / 1e6, none)
      cpuMicrosCounted = user + system
      series.eventLoopLag.unsafeUpdate(Math.max(windowMax, previousMax), none)
      series.residentMemory.unsafeUpdate(process.memoryUsage.rss(), none)
    }
    const sampled = () => {
      try {
        sample()
      } catch (error) {
        failures++
        const now = performance.now()
        if (now - failureLoggedAt < failureLogEvery) return
        failureLoggedAt = now
        const failed = failures
        failures = 0
        Runtime.runFork(runtime)(
          Effect.logWarning("the process's metrics could not be sampled; they keep their last values", {
            error: (error as NodeJS.ErrnoException).code ?? (error as Error).message ?? String(error),
            failedSamples: failed
          })
        )
      }
    }
    sampled()
    const timer = setInterval(sampled, sampleEvery)
    // The sampler never keeps the process alive by itself.
    timer.unref()
    return timer
  }),
  (timer) => Effect.sync(() => clearInterval(timer))
)

/**
 * The service's counters read 0 from the start, so that `rate()` and `increase()` see their first
 * increase (the CPU's is set from the process's own figure when it is sampled).
 */
const zeroedCounters = Effect.sync(() => {
  for (const metric of Object.values(series)) {
    if (metric !== series.cpuSeconds && MetricKeyType.isCounterKey(metric.keyType)) {
      ;(metric as Metric.Metric.Counter<number>).unsafeUpdate(0, [])
    }
  }
})

const cannotListen = (host: string, port: number, error: unknown) => {
  const code = (error as NodeJS.ErrnoException).code
  return new StartupError({
    variable: code === "EADDRINUSE" || code === "EACCES" ? "METRICS_PORT" : "METRICS_HOST",
    // Whichever address the other process holds the port on: see the API's own listener (WebServer.ts).
    message: code === "EADDRINUSE"
      ? `METRICS_PORT=${port}: another process on this machine is listening on port ${port}; stop it or choose another METRICS_PORT.`
      : code === "EACCES"
      ? `METRICS_PORT=${port}: this user may not listen on it; choose a METRICS_PORT above 1023.`
      : `METRICS_HOST=${host}: not an address of this machine to listen on (${
        code ?? String(error)
      }); use 127.0.0.1, 0.0.0.0 or one of its addresses.`
  })
}

const notFound = () =>
  new Response("Not found: the metrics are at GET /metrics.\n", {
    status: 404,
    headers: { "content-type": "text/plain" }
  })

/**
 * `GET /metrics` on a listener of its own. It is acquired before the API's server and released
 * after it, so a scrape during the shutdown's drain is still answered.
 */
const listener = (host: string, port: number) =>
  Effect.acquireRelease(
    Effect.try({
      try: () =>
        Bun.serve({
          hostname: host,
          port,
          routes: { "/metrics": { GET: () => new Response(render(), { headers: { "content-type": contentType } }) } },
          fetch: notFound,
          development: false,
          // As the API's server: never a port silently shared with another process.
          reusePort: false
        }),
      catch: (error) => cannotListen(host, port, error)
    }),
    (server) => Effect.promise(() => server.stop(true))
  ).pipe(
    Effect.tap((server) => logAtStart("metrics", { url: `http://${server.hostname}:${server.port}/metrics` }))
  )

/**
 * Everything metrics need once on besides the recorder (`MetricsLive` provides it): the process's
 * gauges, and each configured outlet (the Prometheus listener, the OTLP export next to the spans).
 */
export const exposition = (options: {
  readonly host: string
  readonly port: Option.Option<number>
  readonly endpoint: Option.Option<URL>
  readonly serviceName: string
}): Layer.Layer<never, StartupError> => {
  const listening = Option.match(options.port, {
    onNone: () => Layer.empty,
    onSome: (port) => Layer.scopedDiscard(listener(options.host, port))
  })
  const exported = Option.match(options.endpoint, {
    onNone: () => Layer.empty,
    onSome: (endpoint) => otlpExport(endpoint, options.serviceName)
  })
  return Layer.mergeAll(
    Layer.scopedDiscard(Effect.zipRight(zeroedCounters, processSampler)),
    listening,
    exported
  )
}

/** How often the registry goes out over OTLP. */
const exportInterval = Duration.seconds(10)

/**
 * The registry over OTLP/HTTP to `<endpoint>/v1/metrics`, as the spans go to `/v1/traces`; loaded
 * only when the endpoint is set, by deep imports (`Tracing.ts` says why).
 */
const otlpExport = (endpoint: URL, serviceName: string) =>
  Layer.unwrapEffect(Effect.map(
    Effect.promise(() =>
      Promise.all([
        import("@effect/opentelemetry/OtlpSerialization"),
        import("@effect/opentelemetry/OtlpMetrics"),
        import("@effect/platform/FetchHttpClient")
      ])
    ),
    ([OtlpSerialization, OtlpMetrics, FetchHttpClient]) =>
      OtlpMetrics.layer({
        url: new URL("v1/metrics", endpoint.href.endsWith("/") ? endpoint : `${endpoint.href}/`).href,
        resource: { serviceName, serviceVersion: version },
        exportInterval
      }).pipe(Layer.provide([OtlpSerialization.layerJson, FetchHttpClient.layer]))
  ))
