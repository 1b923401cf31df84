/**
 * What one request's metrics cost with each candidate library, in process: the request-duration
 * histogram observed with its three labels (method, route pattern, status), cycling over 24
 * combinations as a mix of endpoints would; and what one scrape of those series costs.
 *
 *   bun bench/metrics-candidates.ts        # BENCH_OBSERVATIONS=1000000 per round, 7 rounds, min reported
 *
 * Candidates: Effect's `Metric` as the service records it (a label array kept per combination),
 * Effect's `Metric` tagged per request (new labels each time), prom-client 15 (labels object, and
 * a cached child), and OpenTelemetry's metrics SDK (an attributes object per observation, as the
 * OTel Prometheus exporter would be fed).
 */
import { MeterProvider, MetricReader } from "@opentelemetry/sdk-metrics"
import { Metric, MetricBoundaries, MetricLabel } from "effect"
import client from "prom-client"
import { render } from "../src/Metrics/Exposition.ts"
import { makeRecorder } from "../src/Metrics/Series.ts"

const observations = Number(process.env["BENCH_OBSERVATIONS"] ?? 1_000_000)
const rounds = 7
const buckets = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

const methods = ["GET", "POST"]
const routes = [
  "/v1/whoami",
  "/v1/creators/:creatorId/campaigns/:campaignId/activate",
  "/v1/activations/:activationId",
  "(unknown)"
]
const statuses = [200, 401, 404]
const combinations = methods.flatMap((method) =>
  routes.flatMap((route) => statuses.map((status) => ({ method, route, status })))
)
const seconds = (i: number) => 0.0002 + (i % 97) * 0.00005

/** Nanoseconds per observation: the least of `rounds` rounds. */
const time = (observe: (i: number) => void): number => {
  let best = Infinity
  for (let round = 0; round < rounds; round++) {
    const started = Bun.nanoseconds()
    for (let i = 0; i < observations; i++) observe(i)
    best = Math.min(best, (Bun.nanoseconds() - started) / observations)
  }
  return best
}

const timeScrape = (scrape: () => unknown): number => {
  let best = Infinity
  for (let round = 0; round < 200; round++) {
    const started = Bun.nanoseconds()
    scrape()
    best = Math.min(best, Bun.nanoseconds() - started)
  }
  return best / 1000
}

const results: Array<[string, string]> = []
const note = (name: string, value: string) => {
  results.push([name, value])
  console.log(`${name}: ${value}`)
}

// Effect's Metric, as the service records it.
const recorder = makeRecorder()
note(
  "Effect Metric, kept label arrays (shipped)",
  `${
    time((i) => {
      const c = combinations[i % combinations.length]!
      recorder.answered(c.method, c.route, c.status, seconds(i))
    }).toFixed(0)
  } ns`
)
note("  its scrape (hand-rendered text, Metric.unsafeSnapshot)", `${timeScrape(render).toFixed(0)} µs`)

// Effect's Metric tagged per request: the registry hashes a new key each time.
const tagged = Metric.histogram("bench_tagged_seconds", MetricBoundaries.fromIterable(buckets))
note(
  "Effect Metric, new labels per request",
  `${
    time((i) => {
      const c = combinations[i % combinations.length]!
      tagged.unsafeUpdate(seconds(i), [
        MetricLabel.make("http.request.method", c.method),
        MetricLabel.make("http.route", c.route),
        MetricLabel.make("http.response.status_code", String(c.status))
      ])
    }).toFixed(0)
  } ns`
)

// prom-client.
const registry = new client.Registry()
const histogram = new client.Histogram({
  name: "http_server_request_duration_seconds",
  help: "bench",
  labelNames: ["http_request_method", "http_route", "http_response_status_code"],
  buckets,
  registers: [registry]
})
note(
  "prom-client, labels object",
  `${
    time((i) => {
      const c = combinations[i % combinations.length]!
      histogram.observe(
        { http_request_method: c.method, http_route: c.route, http_response_status_code: c.status },
        seconds(i)
      )
    }).toFixed(0)
  } ns`
)
note(
  "prom-client, labels() child",
  `${
    time((i) => {
      const c = combinations[i % combinations.length]!
      histogram.labels(c.method, c.route, String(c.status)).observe(seconds(i))
    }).toFixed(0)
  } ns`
)
const promStarted = Bun.nanoseconds()
for (let i = 0; i < 200; i++) await registry.metrics()
note(
  "  its scrape (registry.metrics(), mean of 200)",
  `${((Bun.nanoseconds() - promStarted) / 200 / 1000).toFixed(0)} µs`
)

// OpenTelemetry's SDK, with a reader that only collects on demand.
class OnDemand extends MetricReader {
  protected override onForceFlush = async () => {}
  protected override onShutdown = async () => {}
}
const reader = new OnDemand()
const meter = new MeterProvider({ readers: [reader] }).getMeter("bench")
const otelHistogram = meter.createHistogram("http.server.request.duration", {
  unit: "s",
  advice: { explicitBucketBoundaries: buckets }
})
note(
  "OpenTelemetry SDK, attributes object",
  `${
    time((i) => {
      const c = combinations[i % combinations.length]!
      otelHistogram.record(seconds(i), {
        "http.request.method": c.method,
        "http.route": c.route,
        "http.response.status_code": c.status
      })
    }).toFixed(0)
  } ns`
)

console.log(
  `\n${observations.toLocaleString("en-US")} observations per round, least of ${rounds} rounds, Bun ${Bun.version}`
)
