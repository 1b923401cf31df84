import { Effect } from "effect"

/**
 * A span named after a service method. Its call-site stack trace is not captured:
 * that `new Error()` per call was a visible share of a request's CPU time.
 */
export const span = (name: string) => Effect.withSpan(name, { captureStackTrace: false })
