import { SqlClient } from "@effect/sql"
import type { Connection } from "@effect/sql/SqlConnection"
import type { SqlError } from "@effect/sql/SqlError"
import { Cause, Effect, Exit, FiberRef, HashMap, Option } from "effect"
import { type AnyInsert, type Gathering, gathering } from "./BatchedInsert.ts"
import { isSqlError } from "./SqlErrors.ts"
import { byKeyOrder, positionOf, writeOrder } from "./WriteOrder.ts"

/** A request's work in a batch. */
export interface Piece {
  readonly work: Effect.Effect<unknown, unknown>
  /** The request's log annotations: set on the committing fiber while its work runs. */
  readonly annotations: HashMap.HashMap<string, unknown>
}

/** The batch was rolled back as a whole; `defect` is why (the database failing, or a bug). */
export class BatchAborted {
  readonly _tag = "BatchAborted"
  constructor(readonly defect: unknown) {}
}

/**
 * A piece of work cannot be left out of the batch alone: it ran a statement itself (only a
 * rollback undoes it), or, run again, it gave a row to a table already written. The batch is rolled
 * back and run again with a savepoint per piece.
 */
class Isolate {
  readonly _tag = "Isolate"
}
const isolate = new Isolate()
// Failures raised under a span come back wrapped in a proxy: compare by class, not identity.
const isIsolate = (e: unknown): e is Isolate => e instanceof Isolate

/** One run of a piece of work in a batch's transaction: its rows are written only while it stands. */
interface Run {
  /** The piece's place in the batch. */
  readonly piece: number
  /** Keys that the batch's statements refused the piece's earlier runs, by insert: they answer `false` here. */
  readonly refused: ReadonlyMap<AnyInsert, ReadonlySet<string>>
  stands: boolean
  /** Its work ran a statement itself, which only a rollback undoes. */
  ranStatements: boolean
  /** It gave a row to a table already written: that table's locks would be taken out of order. */
  late: boolean
  /** The earliest table (its place in `writeOrder`) it gave a row to. */
  firstTable: number
}

const noRefusals: Run["refused"] = new Map()

const runOf = (piece: number, refused: Run["refused"] = noRefusals): Run => ({
  piece,
  refused,
  stands: true,
  ranStatements: false,
  late: false,
  firstTable: writeOrder.length
})

interface Gathered {
  readonly key: string
  readonly row: unknown
  readonly run: Run
}

/** One attempt at a batch's transaction: the rows its runs gathered, and how far it has written them. */
interface Attempt extends Gathering {
  readonly pieces: ReadonlyArray<Piece>
  readonly exits: Array<Exit.Exit<unknown, unknown>>
  readonly rows: Map<AnyInsert, Array<Gathered>>
  readonly written: Set<AnyInsert>
  /** The place in `writeOrder` of the table written last; -1 before the first. */
  writtenThrough: number
  /** The run under way, whose inserts are gathered. */
  current: Run
  /** Statements run on the transaction's connection so far (`countingStatements`). */
  statements: number
  /** A piece failed after running a statement itself, which only a rollback undoes. */
  mustIsolate: boolean
}

const attemptOf = (pieces: ReadonlyArray<Piece>, isolated: boolean): Attempt => {
  const attempt: Attempt = {
    pieces,
    exits: new Array(pieces.length),
    rows: new Map(),
    written: new Set(),
    isolated,
    gather: (into, row) => gatherRow(attempt, into, row),
    writtenThrough: -1,
    current: runOf(0),
    statements: 0,
    mustIsolate: false
  }
  return attempt
}

const gatherRow = (attempt: Attempt, into: AnyInsert, row: unknown): boolean => {
  const run = attempt.current
  const key = into.keyOf(row)
  if (run.refused.get(into)?.has(key) === true) return false
  const position = positionOf(into.table)
  if (position <= attempt.writtenThrough) run.late = true
  if (position < run.firstTable) run.firstTable = position
  const rows = attempt.rows.get(into)
  if (rows === undefined) attempt.rows.set(into, [{ key, row, run }])
  else rows.push({ key, row, run })
  return true
}

/**
 * The transaction's connection, counting into `attempt` every statement run on it: how the batch
 * knows whether a piece ran one itself (its own statements go through it too, between the runs).
 */
const countingStatements = (attempt: Attempt, connection: Connection): Connection => {
  const counted = <Args extends Array<unknown>, A>(run: (...args: Args) => A) => (...args: Args): A => {
    attempt.statements++
    return run(...args)
  }
  return {
    execute: counted(connection.execute.bind(connection)),
    executeRaw: counted(connection.executeRaw.bind(connection)),
    executeStream: counted(connection.executeStream.bind(connection)),
    executeValues: counted(connection.executeValues.bind(connection)),
    executeUnprepared: counted(connection.executeUnprepared.bind(connection))
  }
}

/** The insert with rows left to write whose table comes first in `writeOrder`. */
const nextToWrite = (attempt: Attempt): AnyInsert | undefined => {
  let next: AnyInsert | undefined
  for (const into of attempt.rows.keys()) {
    if (!attempt.written.has(into) && (next === undefined || positionOf(into.table) < positionOf(next.table))) {
      next = into
    }
  }
  return next
}

/** The runs whose keys a statement refused, each with its keys. */
const refusedRuns = (rows: ReadonlyArray<Gathered>, refused: ReadonlyArray<string>) => {
  const runOfKey = new Map(rows.map(({ key, run }) => [key, run]))
  const keysOfRun = new Map<Run, Set<string>>()
  for (const key of refused) {
    const run = runOfKey.get(key)!
    const keys = keysOfRun.get(run)
    if (keys === undefined) keysOfRun.set(run, new Set([key]))
    else keys.add(key)
  }
  return keysOfRun
}

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
    for (const { key, run } of rows) {
      const known = lowest.get(run.piece)
      if (known === undefined || byKeyOrder(key, known) < 0) lowest.set(run.piece, key)
    }
    for (const [piece, key] of lowest) keys[piece] ??= key
  }
  return keys.map((key, piece) => ({ key: key ?? "", piece }))
    .sort((a, b) => byKeyOrder(a.key, b.key))
    .map(({ piece }) => piece)
}

/** A failure that rolls back the batch as a whole: the database failing, or a defect. */
const abortsBatch = (cause: Cause.Cause<unknown>): Option.Option<BatchAborted> => {
  const sqlFailure = Option.filter(Cause.failureOption(cause), isSqlError)
  return Cause.isDie(cause) || Option.isSome(sqlFailure)
    ? Option.some(new BatchAborted(Option.getOrElse(sqlFailure, () => Cause.squash(cause))))
    : Option.none()
}

// The pieces run one after another on the batch's fiber: each sets its request's annotations (one
// operation, where a scoped `Effect.locally` took fifteen), cleared once they have run,
// before the batch's own statements.
const clearAnnotations = FiberRef.set(FiberRef.currentLogAnnotations, HashMap.empty())
const workOf = (piece: Piece) =>
  Effect.zipRight(FiberRef.set(FiberRef.currentLogAnnotations, piece.annotations), piece.work)

/**
 * One batch's transaction on `sql`: each piece's answer, in the batch's order, once the
 * transaction has committed.
 *
 * The pieces of work run first, gathering their rows; then each table is written in one statement,
 * table after table in `writeOrder`, its rows in key order, so that every batch, on any instance,
 * takes its locks in that one order. A piece that fails on its own, or whose row a statement
 * refuses, has its rows left out; a refused one runs again knowing that answer, before any other
 * row of it is written. Neither needs a savepoint or the others run again (a savepoint per piece
 * every time was a large part of an activation's CPU: docs/operators.md, Performance). Only a piece that ran
 * a statement itself and then failed or was refused (or, run again, gave a row to a table already
 * written) makes the batch roll back and run again with each piece in its own savepoint, the pieces
 * in key order, their inserts that may be refused at once, their other rows after the last piece.
 */
export const batchTransaction = (sql: SqlClient.SqlClient) => {
  // On PostgreSQL a batch waits for rows another instance holds (the same Idempotency-Key):
  // never longer than this, so that an instance frozen mid-transaction costs its peers a 503
  // (55P03), not every write; and a transaction of ours left idle is ended by the server.
  const bounded: Effect.Effect<unknown, SqlError> = sql.onDialectOrElse({
    pg: () =>
      sql`SELECT set_config('lock_timeout', '5s', true), set_config('idle_in_transaction_session_timeout', '10s', true)`,
    orElse: () => Effect.void
  })

  /**
   * Runs a piece's work, its inserts gathered under `run`. A failure of its own leaves its rows
   * out (and its statements, in the fallback's savepoint); outside a savepoint, one that ran a
   * statement itself means the batch must be isolated.
   */
  const runPiece = (attempt: Attempt, run: Run): Effect.Effect<void, BatchAborted> =>
    Effect.suspend(() => {
      attempt.current = run
      const before = attempt.statements
      const work = workOf(attempt.pieces[run.piece]!)
      return Effect.flatMap(Effect.exit(attempt.isolated ? sql.withTransaction(work) : work), (exit) => {
        run.ranStatements = attempt.statements !== before
        attempt.exits[run.piece] = exit
        if (Exit.isSuccess(exit)) return Effect.void
        run.stands = false
        if (run.ranStatements) attempt.mustIsolate = true
        return Option.match(abortsBatch(exit.cause), { onNone: () => Effect.void, onSome: Effect.fail })
      })
    })

  /**
   * The pieces whose rows `into`'s statement refused, run again knowing those answers, before any
   * later table is written. One that ran a statement itself, or has rows written already, cannot
   * be left out alone, nor one whose run again gives a row to a table already written: those
   * isolate the batch.
   */
  const runAgainRefused = (
    attempt: Attempt,
    into: AnyInsert,
    rows: ReadonlyArray<Gathered>,
    refused: ReadonlyArray<string>
  ): Effect.Effect<void, BatchAborted | Isolate> =>
    Effect.forEach(refusedRuns(rows, refused), ([run, keys]) => {
      if (run.ranStatements || run.firstTable < positionOf(into.table)) return Effect.fail(isolate)
      run.stands = false
      const again = runOf(run.piece, new Map([...run.refused, [into, keys]]))
      return Effect.zipRight(
        runPiece(attempt, again),
        Effect.suspend(() => again.late && again.stands ? Effect.fail(isolate) : Effect.void)
      )
    }, { discard: true }).pipe(Effect.ensuring(clearAnnotations))

  /** Writes the rows of the runs that stand: table after table in `writeOrder`, each in one statement. */
  const writeGathered = (attempt: Attempt): Effect.Effect<void, SqlError | BatchAborted | Isolate> =>
    Effect.suspend(() => {
      if (attempt.mustIsolate) return Effect.fail(isolate)
      const into = nextToWrite(attempt)
      if (into === undefined) return Effect.void
      attempt.written.add(into)
      attempt.writtenThrough = positionOf(into.table)
      const rows = attempt.rows.get(into)!.filter(({ run }) => run.stands).sort((a, b) => byKeyOrder(a.key, b.key))
      if (rows.length === 0) return writeGathered(attempt)
      return into.many(rows.map(({ row }) => row)).pipe(
        Effect.flatMap((refused): Effect.Effect<void, BatchAborted | Isolate> =>
          refused.length === 0
            ? Effect.void
            : into.refuses
            ? runAgainRefused(attempt, into, rows, refused)
            : Effect.dieMessage(`${into.table} refused rows, though it takes every row`)
        ),
        Effect.zipRight(writeGathered(attempt))
      )
    })

  /**
   * Runs every piece in `order` (all of them, even once one must be isolated: the fallback orders
   * them by what they gathered), then writes their rows; each piece's answer, in the batch's order.
   */
  const runAttempt = (attempt: Attempt, order: ReadonlyArray<number>) =>
    Effect.forEach(order, (piece) => runPiece(attempt, runOf(piece)), { discard: true }).pipe(
      Effect.ensuring(clearAnnotations),
      Effect.zipRight(writeGathered(attempt)),
      Effect.as(attempt.exits),
      Effect.locally(gathering, attempt)
    )

  // Outside the fallback, the transaction's connection counts the statements run on it.
  const together = (attempt: Attempt) => {
    const inBatchOrder = runAttempt(attempt, attempt.pieces.map((_, piece) => piece))
    return Effect.flatMap(
      Effect.serviceOption(SqlClient.TransactionConnection),
      Option.match({
        onNone: () => inBatchOrder,
        onSome: ([connection, depth]) =>
          Effect.provideService(inBatchOrder, SqlClient.TransactionConnection, [
            countingStatements(attempt, connection),
            depth
          ])
      })
    )
  }

  // Each attempt gathers its inserts afresh: a retry after SQLITE_BUSY runs every piece again.
  return (
    pieces: ReadonlyArray<Piece>
  ): Effect.Effect<ReadonlyArray<Exit.Exit<unknown, unknown>>, SqlError | BatchAborted> =>
    Effect.suspend(() => {
      const first = attemptOf(pieces, false)
      const isolated = Effect.suspend(() => runAttempt(attemptOf(pieces, true), fallbackOrder(first))).pipe(
        // Nothing there runs outside a savepoint, nor gathers a row that may be refused.
        Effect.catchIf(isIsolate, () => Effect.dieMessage("the savepoint fallback could not isolate a piece"))
      )
      return sql.withTransaction(Effect.zipRight(bounded, together(first))).pipe(
        Effect.catchIf(isIsolate, () => sql.withTransaction(Effect.zipRight(bounded, isolated)))
      )
    })
}
