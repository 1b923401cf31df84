import { Effect, FiberRef, identity } from "effect"

/**
 * Whether tracing is on (`OTEL_EXPORTER_OTLP_ENDPOINT` set) for what is being built: read once,
 * when a layer is built (the wiring sets tracing up before the services).
 */
export const tracing: Effect.Effect<boolean> = FiberRef.get(FiberRef.currentTracerEnabled)

/** A span named after a service method around an effect, or nothing at all. */
export type SpanNamed = (name: string) => <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>

const spanned: SpanNamed = (name) => (self) => Effect.withSpan(self, name, { captureStackTrace: false })
const unspanned: SpanNamed = () => identity

/**
 * Spans named after service methods, decided when the layer is built: with tracing off, `span(name)`
 * is the identity, as if there were none. (Asked per call, the question was two Effect operations
 * each time, 18 of a fresh activation's 139; and even a no-op span puts a parent span into the
 * context of every call.) A span never captures its call site's stack trace.
 */
export const spans: Effect.Effect<SpanNamed> = Effect.map(tracing, (on) => on ? spanned : unspanned)
