import { SqlClient } from "@effect/sql"
import { SqlError } from "@effect/sql/SqlError"
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
  HashMap,
  Layer,
  Option,
  Queue,
  Schedule,
  Tracer
} from "effect"
import { Metrics } from "../Metrics.ts"
import { spans, tracing } from "../Spans.ts"
import { busyTimeout, DatabaseFile } from "./Sql.ts"
import { isRetryable } from "./SqlErrors.ts"

interface Pending {
  readonly work: Effect.Effect<unknown, unknown>
  readonly done: Deferred.Deferred<unknown, unknown>
  /** The request's log annotations: set on the committing fiber while its work runs. */
  readonly annotations: HashMap.HashMap<string, unknown>
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

/** The batch was rolled back as a whole; `defect` is why (the database failing, or a bug). */
class BatchAborted {
  readonly _tag = "BatchAborted"
  constructor(readonly defect: unknown) {}
}

/** A piece of work failed: the batch is rolled back and run again with a savepoint per piece. */
class Isolate {
  readonly _tag = "Isolate"
}
const isolate = new Isolate()

const isSqlError = (e: unknown): e is SqlError => e instanceof SqlError

/**
 * A table's insert: one row in a statement of its own, or many rows in one statement. A failure
 * of `one` is the caller's to shape (a repository's SQL errors are defects); `many` fails the
 * batch, which GroupCommit handles.
 */
export interface BatchedInsert<Row, E = never> {
  /** Inserts the row now and says whether it wrote it. */
  readonly one: (row: Row) => Effect.Effect<boolean, E>
  /** Inserts every row in one statement and says how many it wrote. */
  readonly many: (rows: ReadonlyArray<Row>) => Effect.Effect<number, SqlError>
}

type Collected = Map<BatchedInsert<any, any>, Array<unknown>>

/** Set while a batch runs its pieces together: their inserts are gathered here instead of run. */
const collecting = FiberRef.unsafeMake<Collected | undefined>(undefined)

/**
 * Inserts `row`: at once, or, inside a group-commit batch, with the batch's other rows of the
 * same table in one multi-row statement before it commits, so the statements per request fall
 * with the batch size. Inside a batch it answers `true` before the row is written; if the
 * statement then writes fewer rows (another instance stored a conflicting row first), the batch
 * is rolled back and run again one piece at a time, where every insert answers for itself.
 */
export const insertBatched = <Row, E>(into: BatchedInsert<Row, E>, row: Row): Effect.Effect<boolean, E> =>
  Effect.withFiberRuntime((fiber) => {
    const collected = fiber.getFiberRef(collecting)
    if (collected === undefined) return into.one(row)
    const rows = collected.get(into)
    if (rows === undefined) collected.set(into, [row])
    else rows.push(row)
    return gathered
  })

const gathered = Effect.succeed(true)

/** Writes what a batch gathered, one statement per table; a short count isolates the batch. */
const writeCollected = (collected: Collected) =>
  Effect.forEach(
    collected,
    ([into, rows]) =>
      Effect.flatMap(into.many(rows), (written) => written === rows.length ? Effect.void : Effect.fail(isolate)),
    {
      discard: true
    }
  )

/**
 * Group commit: concurrent writers share one transaction, so one fsync acknowledges
 * many requests instead of one, and their inserts into a table share one multi-row statement
 * (`insertBatched`). Nobody is answered before the shared commit is durable.
 * When a piece of work fails, the batch is rolled back and run again with each piece in
 * its own savepoint, so the failure undoes only its own writes (a savepoint per piece
 * every time was a large part of an activation's CPU: README, Performance). Work may therefore run more than once,
 * as it already may when the database is busy: it must do nothing outside the transaction.
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
      // On PostgreSQL a batch waits for rows another instance holds (the same Idempotency-Key):
      // never longer than this, so that an instance frozen mid-transaction costs its peers a 503
      // (55P03), not every write; and a transaction of ours left idle is ended by the server.
      const bounded: Effect.Effect<unknown, SqlError> = sql.onDialectOrElse({
        pg: () =>
          sql`SELECT set_config('lock_timeout', '5s', true), set_config('idle_in_transaction_session_timeout', '10s', true)`,
        orElse: () => Effect.void
      })
      const queue = yield* Queue.unbounded<Pending>()

      /** A failure that rolls back the batch as a whole: the database failing, or a defect. */
      const abortsBatch = (cause: Cause.Cause<unknown>): Option.Option<BatchAborted> => {
        const sqlFailure = Option.filter(Cause.failureOption(cause), isSqlError)
        return Cause.isDie(cause) || Option.isSome(sqlFailure)
          ? Option.some(new BatchAborted(Option.getOrElse(sqlFailure, () => Cause.squash(cause))))
          : Option.none()
      }

      // The pieces run one after another on this fiber: each sets its request's annotations (one
      // operation, where a scoped `Effect.locally` took fifteen), cleared once the last has run,
      // before the batch's own statements.
      const run = (pending: Pending) =>
        Effect.zipRight(FiberRef.set(FiberRef.currentLogAnnotations, pending.annotations), pending.work)
      const runEach = <A, E>(batch: ReadonlyArray<Pending>, each: (pending: Pending) => Effect.Effect<A, E>) =>
        Effect.ensuring(Effect.forEach(batch, each), FiberRef.set(FiberRef.currentLogAnnotations, HashMap.empty()))

      // The common case: every piece of work succeeds, and none needs a savepoint of its own.
      const direct = (pending: Pending) =>
        Effect.flatMap(
          Effect.exit(run(pending)),
          (exit): Effect.Effect<Exit.Exit<unknown, unknown>, BatchAborted | Isolate> => {
            if (Exit.isSuccess(exit)) return Effect.succeed(exit)
            return Option.match(abortsBatch(exit.cause), { onNone: () => Effect.fail(isolate), onSome: Effect.fail })
          }
        )

      // After a piece of work failed: each in its own savepoint, so a failure undoes only its own writes.
      const inSavepoint = (pending: Pending) =>
        Effect.flatMap(
          Effect.exit(sql.withTransaction(run(pending))),
          (exit): Effect.Effect<Exit.Exit<unknown, unknown>, BatchAborted> => {
            if (Exit.isSuccess(exit)) return Effect.succeed(exit)
            return Option.match(abortsBatch(exit.cause), { onNone: () => Effect.succeed(exit), onSome: Effect.fail })
          }
        )

      // Each attempt gathers its inserts afresh: a retry after SQLITE_BUSY runs every piece again.
      const together = (batch: ReadonlyArray<Pending>) =>
        Effect.suspend(() => {
          const collected: Collected = new Map()
          return Effect.zipRight(bounded, runEach(batch, direct)).pipe(
            Effect.locally(collecting, collected),
            Effect.zipLeft(Effect.suspend(() => writeCollected(collected)))
          )
        })

      const commit = (batch: ReadonlyArray<Pending>) =>
        file.ensurePresent.pipe(
          Effect.zipRight(sql.withTransaction(together(batch))),
          Effect.catchIf(
            // Failures raised under a span come back wrapped in a proxy: compare by class, not identity.
            (e): e is Isolate => e instanceof Isolate,
            () => sql.withTransaction(Effect.zipRight(bounded, runEach(batch, inSavepoint)))
          ),
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
