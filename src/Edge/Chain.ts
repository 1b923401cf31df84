import { Context, Effect, Option } from "effect"
import { type Declared, middlewareOf } from "../Declaration.ts"
import { unexpectedQuery } from "./Endpoint.ts"
import type { Exchange, Failure, Handler, Passed, Reply, Step, Steps } from "./Exchange.ts"

/** Records what a passed step said, in the edge's own record of the request. */
const record = (exchange: Exchange, passed: Passed) => {
  if (passed.headers !== undefined) Object.assign(exchange.headers, passed.headers)
  if (passed.key !== undefined) exchange.key = passed.key
}

/**
 * What the steps before this one and `passed` provide together: a new context, never a step's own
 * written into (a step may hand out a context it made once).
 */
const together = (given: Context.Context<never>, passed: Passed): Context.Context<never> =>
  passed.provides === undefined
    ? given
    : given.unsafeMap.size === 0
    ? passed.provides
    : Context.merge(given, passed.provides)

type Run = (exchange: Exchange, given: Context.Context<never>) => Effect.Effect<Reply, Failure>

/**
 * An endpoint's chain, built once at start-up from its declaration: the step of each middleware it
 * declares, in order, then its handler. Per request it is one `Effect.flatMap` per step and no
 * generator body (README, Layout: the request path). A declared middleware without a step is an
 * error at start-up, never a check silently skipped.
 */
export const chainOf = (declared: Declared, steps: Steps, handler: Handler<any>): (exchange: Exchange) => Effect.Effect<Reply, Failure> => {
  const built: ReadonlyArray<Step> = middlewareOf(declared).map((tag) => {
    const stepFor = steps[tag.key]
    if (stepFor === undefined) {
      throw new Error(`${declared.group.identifier}.${declared.endpoint.name} declares ${tag.key}, which has no step`)
    }
    return stepFor(declared.endpoint)
  })
  // An endpoint that declares no query parameters refuses any, at the validation of its input.
  const handle: Run = Option.isSome(declared.endpoint.urlParamsSchema)
    ? handler as Run
    : (exchange, given) => {
      const unexpected = unexpectedQuery(exchange.request)
      return unexpected === undefined ? (handler as Run)(exchange, given) : Effect.fail(unexpected)
    }
  const run = built.reduceRight<Run>(
    (next, step) => (exchange, given) =>
      Effect.flatMap(step(exchange, given), (passed) => {
        record(exchange, passed)
        return next(exchange, together(given, passed))
      }),
    handle
  )
  const nothingGiven = Context.empty() as Context.Context<never>
  // Suspended: nothing of the request runs before its program does (a throw becomes a 500 envelope).
  return (exchange) => Effect.suspend(() => run(exchange, nothingGiven))
}
