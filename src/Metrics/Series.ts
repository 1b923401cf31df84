import { Metric, MetricBoundaries, MetricLabel } from "effect"

/**
 * The service's series (docs/operators.md, Operating it: Metrics), kept in Effect's metric registry: the
 * Prometheus listener renders it and, with tracing on, `@effect/opentelemetry` exports the same
 * registry over OTLP. Names are the Prometheus spelling; label keys are OpenTelemetry's attribute
 * names, as the spans carry them, and the Prometheus text spells their dots as underscores.
 * Every label value comes from a bounded set the service chooses, never from what a client sends.
 */

/** Sub-millisecond (a whoami in process) to seconds (a database waited on). */
const durationBuckets = [
  0.0001,
  0.00025,
  0.0005,
  0.001,
  0.0025,
  0.005,
  0.01,
  0.025,
  0.05,
  0.1,
  0.25,
  0.5,
  1,
  2.5,
  5,
  10
]

/** Up to GroupCommit's bound of 256 requests per commit. */
const batchBuckets = [1, 2, 4, 8, 16, 32, 64, 128, 256]

const names: Array<string> = []
const named = (name: string) => {
  names.push(name)
  return name
}

const counter = (name: string, description: string) => Metric.counter(named(name), { description, incremental: true })
const gauge = (name: string, description: string) => Metric.gauge(named(name), { description })
const histogram = (name: string, buckets: ReadonlyArray<number>, description: string) =>
  Metric.histogram(named(name), MetricBoundaries.fromIterable(buckets), description)

export const series = {
  requestDuration: histogram(
    "http_server_request_duration_seconds",
    durationBuckets,
    "Time from a request's arrival to its answer, by method, route pattern and status."
  ),
  rateLimited: counter(
    "api_rate_limited_total",
    "Requests refused with 429: by their key's rate limit, or an analytics call by its brand's line (CONCURRENCY_LIMITED)."
  ),
  replays: counter(
    "api_idempotent_replays_total",
    "Activations answered with the stored response of an earlier request with the same Idempotency-Key."
  ),
  conflicts: counter(
    "api_idempotency_conflicts_total",
    "Requests refused with 409 IDEMPOTENCY_CONFLICT: a used Idempotency-Key with another request."
  ),
  activationsCreated: counter(
    "api_activations_created_total",
    "Activations committed to the database (replays not counted)."
  ),
  unauthorized: counter(
    "api_unauthorized_total",
    "Requests refused with 401: no key, or a key that is malformed, unknown, wrong, revoked or expired."
  ),
  commitBatchSize: histogram(
    "db_commit_batch_size",
    batchBuckets,
    "Requests whose writes shared one group commit."
  ),
  databaseUnavailable: counter("db_unavailable_total", "Requests answered 503 because the database could not be used."),
  logLinesDropped: counter(
    "log_lines_dropped_total",
    "Log lines dropped because stderr's pipe stayed full past its bound (8 MiB waiting)."
  ),
  residentMemory: gauge("process_resident_memory_bytes", "Resident memory size in bytes."),
  cpuSeconds: counter("process_cpu_seconds_total", "User and system CPU time spent, in seconds."),
  startTime: gauge("process_start_time_seconds", "Start time of the process since the Unix epoch, in seconds."),
  eventLoopLag: gauge(
    "nodejs_eventloop_lag_max_seconds",
    "The longest delay of a timer past its due time over the last 5 to 10 seconds: how long the event loop was kept busy."
  )
} as const

/** The series' names, in the order the Prometheus text lists them. */
export const seriesNames: ReadonlyArray<string> = names

/** What the service counts, as plain calls made where each thing happens. */
export interface Recorder {
  /** False for the recorder that counts nothing: the edge then adds no step at all. */
  readonly on: boolean
  /** A request answered: its method, route pattern (never the path), status and seconds taken. */
  readonly answered: (method: string, route: string, status: number, seconds: number) => void
  readonly replayed: () => void
  readonly conflicted: () => void
  readonly activationCreated: () => void
  /** A group commit of `size` requests' writes. */
  readonly committed: (size: number) => void
  readonly databaseUnavailable: () => void
}

/** RFC 9110's methods and PATCH, as OpenTelemetry's conventions know them; any other is `_OTHER`. */
const knownMethods = new Set(["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"])

/**
 * The recorder over Effect's registry. A metric updated with the same array of labels finds its
 * series in a `WeakMap` keyed by that array, so each combination's array is made once and kept:
 * a new array per request would be hashed into the registry every time.
 */
export const makeRecorder = (): Recorder => {
  const labelSets = new Map<string, ReadonlyArray<MetricLabel.MetricLabel>>()
  const labelsOf = (method: string, route: string, status: number) => {
    const known = knownMethods.has(method) ? method : "_OTHER"
    const id = `${known} ${status} ${route}`
    let labels = labelSets.get(id)
    if (labels === undefined) {
      labels = [
        MetricLabel.make("http.request.method", known),
        MetricLabel.make("http.route", route),
        MetricLabel.make("http.response.status_code", String(status))
      ]
      labelSets.set(id, labels)
    }
    return labels
  }
  const none: ReadonlyArray<MetricLabel.MetricLabel> = []
  return {
    on: true,
    answered: (method, route, status, seconds) => {
      series.requestDuration.unsafeUpdate(seconds, labelsOf(method, route, status))
      if (status === 401) series.unauthorized.unsafeUpdate(1, none)
      else if (status === 429) series.rateLimited.unsafeUpdate(1, none)
    },
    replayed: () => series.replays.unsafeUpdate(1, none),
    conflicted: () => series.conflicts.unsafeUpdate(1, none),
    activationCreated: () => series.activationsCreated.unsafeUpdate(1, none),
    committed: (size) => series.commitBatchSize.unsafeUpdate(size, none),
    databaseUnavailable: () => series.databaseUnavailable.unsafeUpdate(1, none)
  }
}
