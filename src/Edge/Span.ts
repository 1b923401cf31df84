import { Effect, FiberRef } from "effect"

/** `traced()` while tracing is on (`OTEL_EXPORTER_OTLP_ENDPOINT` set), `plain` otherwise. */
export const whenTracing = <A, E, R>(
  traced: () => Effect.Effect<A, E, R>,
  plain: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime((fiber) => fiber.getFiberRef(FiberRef.currentTracerEnabled) ? traced() : plain)

/**
 * A span named after a service method, only while tracing is on: with it off, even a no-op
 * span puts a parent span into the context of every call, a visible share of a request's CPU
 * time. Its call-site stack trace is never captured.
 */
export const span = (name: string) => <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  whenTracing(() => Effect.withSpan(self, name, { captureStackTrace: false }), self)
