import { Effect, FiberRef, identity } from "effect"

/**
 * Whether the fiber building a layer has tracing on: read once, when the layer is built. The
 * server sets tracing up before its services (`App.ts`), and it is on there only with
 * `OTEL_EXPORTER_OTLP_ENDPOINT` set; elsewhere (the key commands, tests) it is Effect's default, on,
 * with Effect's own tracer, which exports nothing.
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
