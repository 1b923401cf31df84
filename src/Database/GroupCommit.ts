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
import { byKeyOrder, positionOf, type Table } from "./WriteOrder.ts"

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

/** A piece of work failed, or a statement refused a row: the batch is rolled back and run again with a savepoint per piece. */
class Isolate {
  readonly _tag = "Isolate"
}
const isolate = new Isolate()
// Failures raised under a span come back wrapped in a proxy: compare by class, not identity.
const isIsolate = (e: unknown): e is Isolate => e instanceof Isolate

const isSqlError = (e: unknown): e is SqlError => e instanceof SqlError

/**
 * A table's insert: one row in a statement of its own, or many rows in one statement. A failure
 * of `one` is the caller's to shape (a repository's SQL errors are defects); `many` fails the
 * batch, which GroupCommit handles.
 */
export interface BatchedInsert<Row, E = never> {
  /** A batch writes its tables in `writeOrder`, each in one statement. */
  readonly table: Table
  /** The row's primary key, its columns joined: a batch writes a table's rows in this key's order. */
  readonly keyOf: (row: Row) => string
  /**
   * Whether a row may be refused (a live one of the same key is there, another instance's): the
   * savepoint fallback runs `one` at once, as a piece needs the answer.
   */
  readonly refuses: boolean
  /** Inserts the row now and says whether it wrote it. */
  readonly one: (row: Row) => Effect.Effect<boolean, E>
  /** Inserts the rows, given in key order, in one statement, and gives the keys of those it refused. */
  readonly many: (rows: ReadonlyArray<Row>) => Effect.Effect<ReadonlyArray<string>, SqlError>
}

/** What `many` gives for a table that takes every row. */
export const noneRefused: ReadonlyArray<string> = []

type AnyInsert = BatchedInsert<any, any>

interface Gathered {
  readonly key: string
  readonly row: unknown
  /** The piece's place in the batch. */
  readonly piece: number
}

/** One attempt at a batch's transaction: its pieces' answers, and the rows they gathered. */
interface Attempt {
  readonly pieces: ReadonlyArray<Pending>
  readonly exits: Array<Exit.Exit<unknown, unknown>>
  readonly rows: Map<AnyInsert, Array<Gathered>>
  /** The savepoint fallback: a savepoint per piece, and inserts that may be refused run at once. */
  readonly isolated: boolean
  /** The piece under way, whose inserts are gathered. */
  current: number
}

const attemptOf = (pieces: ReadonlyArray<Pending>, isolated: boolean): Attempt => ({
  pieces,
  exits: new Array(pieces.length),
  rows: new Map(),
  isolated,
  current: 0
})

/** Set while a batch's transaction runs its pieces: their inserts are gathered here instead of run. */
const collecting = FiberRef.unsafeMake<Attempt | undefined>(undefined)

/**
 * Inserts `row`: at once, or, inside a group-commit batch, with the batch's other rows of the
 * same table in one multi-row statement before it commits, so the statements per request fall
 * with the batch size. Inside a batch it answers `true` before the row is written; if the
 * statement then refuses it (another instance stored a conflicting row first), the batch is
 * rolled back and run again one piece at a time, where every insert that may be refused answers
 * for itself.
 */
export const insertBatched = <Row, E>(into: BatchedInsert<Row, E>, row: Row): Effect.Effect<boolean, E> =>
  Effect.withFiberRuntime((fiber) => {
    const attempt = fiber.getFiberRef(collecting)
    if (attempt === undefined || (into.refuses && attempt.isolated)) return into.one(row)
    const gathered = { key: into.keyOf(row), row, piece: attempt.current }
    const rows = attempt.rows.get(into)
    if (rows === undefined) attempt.rows.set(into, [gathered])
    else rows.push(gathered)
    return answeredLater
  })

const answeredLater = Effect.succeed(true)

/**
 * Writes the rows of the pieces that stand, table after table in `writeOrder`, each table's in key
 * order in one statement; a refused row isolates the batch.
 */
const writeGathered = (attempt: Attempt): Effect.Effect<void, SqlError | Isolate> =>
  Effect.forEach(
    [...attempt.rows].sort(([a], [b]) => positionOf(a.table) - positionOf(b.table)),
    ([into, gathered]) => {
      const rows = gathered.filter(({ piece }) => Exit.isSuccess(attempt.exits[piece]!))
        .sort((a, b) => byKeyOrder(a.key, b.key))
      return rows.length === 0
        ? Effect.void
        : Effect.flatMap(into.many(rows.map(({ row }) => row)), (refused) =>
          refused.length === 0 ? Effect.void : Effect.fail(isolate))
    },
    { discard: true }
  )

/**
 * The savepoint fallback's order of the pieces: by their first key in a table that may refuse rows,
 * as the batch's first attempt gathered them (a piece without one first), so that those inserts,
 * run at once there, take their locks in key order too.
 */
const fallbackOrder = (first: Attempt): ReadonlyArray<number> => {
  const keys = Array.from({ length: first.pieces.length }, (): string | undefined => undefined)
  const refusing = [...first.rows].filter(([into]) => into.refuses)
    .sort(([a], [b]) => positionOf(a.table) - positionOf(b.table))
  for (const [, rows] of refusing) {
    const lowest = new Map<number, string>()
    for (const { key, piece } of rows) {
      const known = lowest.get(piece)
      if (known === undefined || byKeyOrder(key, known) < 0) lowest.set(piece, key)
    }
    for (const [piece, key] of lowest) keys[piece] ??= key
  }
  return keys.map((key, piece) => ({ key: key ?? "", piece }))
    .sort((a, b) => byKeyOrder(a.key, b.key))
    .map(({ piece }) => piece)
}

/**
 * Group commit: concurrent writers share one transaction, so one fsync acknowledges
 * many requests instead of one, and their inserts into a table share one multi-row statement
 * (`insertBatched`). Nobody is answered before the shared commit is durable.
 *
 * The pieces of work run first, gathering their rows; then each table is written in one statement,
 * table after table in `writeOrder`, its rows in key order, so that every batch, on any instance,
 * takes its locks in that one order. When a piece of work fails, or a statement refuses a row, the
 * batch is rolled back and run again with each piece in its own savepoint, so the failure undoes
 * only its own writes (a savepoint per piece every time was a large part of an activation's CPU:
 * README, Performance): the pieces in key order, their inserts that may be refused at once, their
 * other rows gathered and written after the last piece, in the same order. Work may therefore run
 * more than once, as it already may when the database is busy: it must do nothing outside the
 * transaction.
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
      const workOf = (pending: Pending) =>
        Effect.zipRight(FiberRef.set(FiberRef.currentLogAnnotations, pending.annotations), pending.work)

      /**
       * Runs a piece's work, its inserts gathered. A failure of its own isolates the batch, once every
       * piece has run (the fallback orders them by what they gathered); in the fallback's savepoint,
       * it undoes the piece's statements and leaves its rows out.
       */
      const runPiece = (attempt: Attempt, piece: number) =>
        Effect.suspend(() => {
          attempt.current = piece
          const work = workOf(attempt.pieces[piece]!)
          return Effect.flatMap(
            Effect.exit(attempt.isolated ? sql.withTransaction(work) : work),
            (exit): Effect.Effect<void, BatchAborted> => {
              attempt.exits[piece] = exit
              return Exit.isSuccess(exit)
                ? Effect.void
                : Option.match(abortsBatch(exit.cause), { onNone: () => Effect.void, onSome: Effect.fail })
            }
          )
        })

      /** Runs the pieces in `order`, then writes their rows; each piece's answer, in the batch's order. */
      const runAttempt = (attempt: Attempt, order: ReadonlyArray<number>) =>
        Effect.forEach(order, (piece) => runPiece(attempt, piece), { discard: true }).pipe(
          Effect.ensuring(FiberRef.set(FiberRef.currentLogAnnotations, HashMap.empty())),
          Effect.zipRight(
            Effect.suspend(() =>
              !attempt.isolated && attempt.exits.some(Exit.isFailure) ? Effect.fail(isolate) : writeGathered(attempt)
            )
          ),
          Effect.as(attempt.exits),
          Effect.locally(collecting, attempt)
        )

      // Each attempt gathers its inserts afresh: a retry after SQLITE_BUSY runs every piece again.
      const commit = (batch: ReadonlyArray<Pending>) =>
        file.ensurePresent.pipe(
          Effect.zipRight(Effect.suspend(() => {
            const first = attemptOf(batch, false)
            const isolated = Effect.suspend(() => runAttempt(attemptOf(batch, true), fallbackOrder(first))).pipe(
              // There inserts that may be refused answer for themselves.
              Effect.catchIf(isIsolate, () => Effect.dieMessage("a table refused a row it takes every row of"))
            )
            return sql.withTransaction(Effect.zipRight(bounded, runAttempt(first, batch.map((_, piece) => piece))))
              .pipe(
                Effect.catchIf(isIsolate, () => sql.withTransaction(Effect.zipRight(bounded, isolated)))
              )
          })),
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
