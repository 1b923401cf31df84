import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerError from "@effect/platform/HttpServerError"
import type { FiberId } from "effect"
import {
  Cause,
  Context,
  Effect,
  Exit,
  type Fiber,
  FiberRef,
  FiberRefs,
  HashMap,
  Option,
  Runtime,
  Scheduler
} from "effect"
import { currentKeyNote, keyNoteSlot } from "../Logging.ts"
import { collectResponseHeaders } from "../Responses.ts"
import type { Provided, Reply } from "./Endpoint.ts"
import type { Exchange } from "./Exchange.ts"

/**
 * How the edge runs one request's Effect program: a runtime of its own, made from the layers' (the
 * logger, tracer and clock), answered synchronously when nothing it runs waits, and interrupted
 * when its client goes while it waits.
 */
export const makeRunner = ({ synchronousGets }: { readonly synchronousGets: boolean }) =>
  Effect.map(Effect.runtime<never>(), (built) => {
    const baseAnnotations = FiberRefs.getOrDefault(built.fiberRefs, FiberRef.currentLogAnnotations)
    /** One runtime for every request: each request's own values go into its fiber's refs (`requestRefs`). */
    const shared = Runtime.make({
      context: Context.empty(),
      fiberRefs: built.fiberRefs,
      runtimeFlags: built.runtimeFlags
    })
    /**
     * A request's fiber starts with its own context (`Provided`), its log annotations carrying the
     * request's id (so every line it logs does), its own collector of the headers its middleware
     * add and its own slot for its key's note (taken into in place, with no write of the fiber's
     * state: `Responses.ts`, `Logging.ts`). They are set in the refs the runtime has just made for
     * the new fiber alone (`updateRefs`), before it starts: a fiber that set them itself would write
     * its state, and compare the old value with the new, each time. A runtime made per request
     * with them (what this did before) copied every fiber ref once more: 3.9 KB of a request's
     * allocation (bench/BENCHMARKS.md, As fast at the default log level). The library's way, one
     * runtime with the request, its middleware's values and its fiber refs provided around the
     * program (`Effect.provideService`, `Effect.locally`), as HttpApiBuilder runs one, allocated
     * 66.1 KB per whoami against 21.3 and took 65 against 19 µs in process (bench/BENCHMARKS.md,
     * One reading of each thing).
     */
    const requestRefs =
      (provided: Provided, requestId: string) =>
      (refs: FiberRefs.FiberRefs, fiberId: FiberId.Runtime): FiberRefs.FiberRefs => {
        const locals = refs.locals
        locals.set(FiberRef.currentContext, [[fiberId, Context.unsafeMake(provided)]])
        locals.set(FiberRef.currentLogAnnotations, [[fiberId, HashMap.set(baseAnnotations, "requestId", requestId)]])
        locals.set(HttpApp.currentPreResponseHandlers, [[fiberId, Option.some(collectResponseHeaders())]])
        locals.set(currentKeyNote, [[fiberId, keyNoteSlot()]])
        return refs
      }

    /**
     * The requests whose fibers are waiting and not yet listened to, each until its fiber ends or
     * the turn of the event loop it waited in is over (`watch`): most have been answered by then (a
     * replay, once its body is read), and listening to a request's signal is one of the dearer steps
     * of an answer (bench/BENCHMARKS.md, The second guard).
     */
    const unwatched = new Map<Fiber.RuntimeFiber<Reply>, Request>()
    let watchDue = false
    /**
     * Each request still waiting is interrupted once its client has gone (Bun aborts the request's
     * signal when its connection closes), as the library's own web handler interrupts it
     * (`HttpApp.toWebHandler`): what it was doing stops at its next wait (a read between its pages,
     * a turn in a line). A request answered synchronously never waits long enough to be left.
     */
    const watch = () => {
      watchDue = false
      for (const [fiber, request] of unwatched) {
        const signal = request.signal
        const left = () => fiber.unsafeInterruptAsFork(HttpServerError.clientAbortFiberId)
        if (signal.aborted) left()
        else signal.addEventListener("abort", left, { once: true })
      }
      unwatched.clear()
    }

    /**
     * A request's fiber once it waits, as a promise of its reply, watched for its client leaving
     * (`watch`). Its program's own matching of a failure does not run for an interruption, so
     * `failed` answers it (499, `Render.ts`) from where the fiber stopped, as the fiber itself
     * would have: its context, headers and key note are the fiber's. A program made uninterruptible
     * around its route would answer it in the fiber, at the cost of two changes of its flags for
     * every request, the synchronous ones included, which no client can leave.
     */
    const awaited = (
      fiber: Fiber.RuntimeFiber<Reply>,
      request: Request,
      failed: (cause: Cause.Cause<unknown>) => Effect.Effect<Reply>
    ): Promise<Reply> => {
      unwatched.set(fiber, request)
      if (!watchDue) {
        watchDue = true
        setImmediate(watch)
      }
      return new Promise((resolve, reject) =>
        fiber.addObserver((exit) => {
          unwatched.delete(fiber)
          if (Exit.isSuccess(exit)) return resolve(exit.value)
          if (!Cause.isInterruptedOnly(exit.cause)) return reject(Runtime.makeFiberFailure(exit.cause))
          const where = Runtime.make({
            context: fiber.currentContext,
            fiberRefs: fiber.getFiberRefs(),
            runtimeFlags: built.runtimeFlags
          })
          resolve(Runtime.runPromise(where, failed(exit.cause)))
        })
      )
    }

    /**
     * Runs a request's program, `failed` its answer to an interruption. A GET reads no body: on
     * SQLite with the rate limits in memory its program never waits, and answering it
     * synchronously, without a promise or a scheduler turn, saves much of its cost. Should it wait
     * after all, it goes on in its fiber, awaited; that costs more than a promise from the start,
     * which is why a POST (always a body to read), and every request when the rate limits are on
     * Redis (a round trip each) or the reads on PostgreSQL (its pool), starts with one.
     */
    return (
      exchange: Exchange,
      provided: Provided,
      program: Effect.Effect<Reply>,
      failed: (cause: Cause.Cause<unknown>) => Effect.Effect<Reply>
    ): Reply | Promise<Reply> => {
      const updateRefs = requestRefs(provided, exchange.requestId)
      const method = exchange.request.method
      if (!synchronousGets || (method !== "GET" && method !== "HEAD")) {
        return awaited(Runtime.runFork(shared, program, { updateRefs }), exchange.request.source, failed)
      }
      // As `Runtime.runSyncExit` runs it: on a scheduler of its own, flushed at once; a fiber that
      // waits goes on, on the default scheduler, awaited.
      const scheduler = new Scheduler.SyncScheduler()
      const fiber = Runtime.runFork(shared, program, { scheduler, updateRefs })
      scheduler.flush()
      const exit = fiber.unsafePoll()
      if (exit === null) return awaited(fiber, exchange.request.source, failed)
      return Exit.isSuccess(exit) ? exit.value : Promise.reject(Cause.squash(exit.cause))
    }
  })
