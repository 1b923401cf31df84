import { Effect, FiberRef } from "effect"

/**
 * A span named after a service method, only while tracing is on: with it off (no
 * `OTEL_EXPORTER_OTLP_ENDPOINT`) even a no-op span puts a parent span into the context of every
 * call, a visible share of a request's CPU time. Its call-site stack trace is never captured.
 */
export const span = (name: string) => <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> => {
  const traced = Effect.withSpan(self, name, { captureStackTrace: false })
  return Effect.flatMap(FiberRef.get(FiberRef.currentTracerEnabled), (enabled) => enabled ? traced : self)
}
