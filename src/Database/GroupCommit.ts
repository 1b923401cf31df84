import { SqlClient } from "@effect/sql"
import {
  Cause,
  Chunk,
  Clock,
  Context,
  Deferred,
  Duration,
  Effect,
  Exit,
  FiberRef,
  Layer,
  Option,
  Queue,
  Schedule,
  Tracer
} from "effect"
import { Metrics } from "../Metrics.ts"
import { spans, tracing } from "../Spans.ts"
import { BatchAborted, batchTransaction, type Piece } from "./Batch.ts"
import { busyTimeout, DatabaseFile } from "./Sql.ts"
import { isRetryable, isSqlError } from "./SqlErrors.ts"

interface Pending extends Piece {
  readonly done: Deferred.Deferred<unknown, unknown>
}

/** At most this many requests' writes share one commit. */
const maxBatch = 256

/**
 * How long a batch goes on taking in work after its first piece. Unbounded, a steady trickle of
 * writes among other requests kept a batch open until nearly every connection waited on it, and
 * the benchmark's 90/10 mix's p99 with it (bench/BENCHMARKS.md).
 */
const gatherForNanos = 5_000_000n

/**
 * While another process holds SQLite's write lock, or PostgreSQL chose the batch as a deadlock's
 * victim: try again every 25 ms, up to the busy timeout.
 */
const busyRetry = Schedule.spaced("25 millis").pipe(Schedule.upTo(busyTimeout))

/**
 * Group commit: concurrent writers share one transaction, so one fsync acknowledges
 * many requests instead of one, and their inserts into a table share one multi-row statement
 * (`insertBatched`). Nobody is answered before the shared commit is durable. How a batch's
 * transaction runs its pieces and writes their rows is `batchTransaction`'s.
 *
 * Work may run more than once, when a piece cannot be left out of its batch alone, as it already
 * may when the database is busy: it must do nothing outside the transaction.
 */
export class GroupCommit extends Context.Tag("Database/GroupCommit")<GroupCommit, {
  readonly transaction: <A, E>(work: Effect.Effect<A, E>) => Effect.Effect<A, E>
}>() {
  static readonly Live = Layer.scoped(
    GroupCommit,
    Effect.gen(function*() {
      const span = yield* spans
      const traced = yield* tracing
      const metrics = yield* Metrics
      const sql = yield* SqlClient.SqlClient
      const file = yield* DatabaseFile
      const transactionOf = batchTransaction(sql)
      const queue = yield* Queue.unbounded<Pending>()

      const commit = (batch: ReadonlyArray<Pending>) =>
        file.ensurePresent.pipe(
          Effect.zipRight(transactionOf(batch)),
          Effect.catchIf(isSqlError, (e) => Effect.fail(new BatchAborted(e))),
          // SQLite's lock is waited for here, asynchronously: bun:sqlite would block the whole event
          // loop. A PostgreSQL deadlock victim runs again the same way.
          Effect.retry({ while: (aborted) => isRetryable(aborted.defect), schedule: busyRetry }),
          Effect.exit
        )

      // Requests whose work is on its way (mid-parse, mid-authentication) join the batch: after the
      // first item, yield to the event loop and take what arrived, until a turn brings nothing new
      // or the batch has gathered for `gatherForNanos` (a monotonic clock; under a TestClock that
      // never moves, as in most tests, only the first condition ends a batch).
      const gather = (batch: Array<Pending>, until: bigint): Effect.Effect<ReadonlyArray<Pending>> =>
        batch.length >= maxBatch
          ? Effect.succeed(batch)
          : Effect.flatMap(Clock.currentTimeNanos, (now) =>
            now >= until
              ? Effect.succeed(batch)
              : Effect.flatMap(
                Effect.zipRight(Effect.sleep(Duration.zero), Queue.takeUpTo(queue, maxBatch - batch.length)),
                (more) => Chunk.isEmpty(more) ? Effect.succeed(batch) : gather([...batch, ...more], until)
              ))

      yield* Queue.takeBetween(queue, 1, maxBatch).pipe(
        Effect.flatMap((first) =>
          Effect.flatMap(Clock.currentTimeNanos, (now) => gather(Chunk.toArray(first), now + gatherForNanos))
        ),
        Effect.flatMap((batch) =>
          Effect.flatMap(commit(batch), (outcome) => {
            if (Exit.isSuccess(outcome)) metrics.committed(batch.length)
            return Effect.forEach(batch, (pending, i) =>
              Deferred.done(
                pending.done,
                Exit.isSuccess(outcome)
                  ? outcome.value[i]!
                  : Exit.die(Option.match(Cause.failureOption(outcome.cause), {
                    onNone: () => Cause.squash(outcome.cause),
                    onSome: (aborted) => aborted.defect
                  }))
              ), { discard: true })
          })
        ),
        Effect.forever,
        // The work brings its services along; an empty context keeps the savepoints' context
        // updates cheap (each compares the whole context, once per statement batch).
        Effect.locally(FiberRef.currentContext, Context.empty()),
        Effect.forkScoped
      )

      return {
        transaction: <A, E>(work: Effect.Effect<A, E>) =>
          Effect.withFiberRuntime<A, E>((fiber) => {
            const done = Deferred.unsafeMake<A, E>(fiber.id())
            // The work runs on the committing fiber: it keeps the request's log annotations, and
            // its trace while tracing is on.
            const parent = traced ? Context.getOption(fiber.currentContext, Tracer.ParentSpan) : Option.none()
            const offered = queue.unsafeOffer({
              work: Option.isSome(parent) ? Effect.withParentSpan(work, parent.value) : work,
              done,
              annotations: fiber.getFiberRef(FiberRef.currentLogAnnotations)
            } as Pending)
            return offered ? Deferred.await(done) : Effect.interrupt
          }).pipe(span("GroupCommit.transaction"))
      }
    })
  )
}
