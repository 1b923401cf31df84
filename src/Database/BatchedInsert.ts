import type { SqlError } from "@effect/sql/SqlError"
import { Effect, FiberRef } from "effect"
import type { Table } from "./WriteOrder.ts"

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
   * Whether a row may be refused (a live one of the same key is there, another instance's): a
   * batch learns which from `many`; its savepoint fallback runs `one` at once, as a piece needs the answer.
   */
  readonly refuses: boolean
  /** Inserts the row now and says whether it wrote it. */
  readonly one: (row: Row) => Effect.Effect<boolean, E>
  /** Inserts the rows, given in key order, in one statement, and gives the keys of those it refused. */
  readonly many: (rows: ReadonlyArray<Row>) => Effect.Effect<ReadonlyArray<string>, SqlError>
}

/** What `many` gives for a table that takes every row. */
export const noneRefused: ReadonlyArray<string> = []

export type AnyInsert = BatchedInsert<any, any>

/** A batch's transaction while it runs its pieces (Batch.ts): it gathers their inserts instead. */
export interface Gathering {
  /** The savepoint fallback: a savepoint per piece, and inserts that may be refused run at once. */
  readonly isolated: boolean
  /** Takes `row` into its table's statement; `false` for a key refused to an earlier run of the piece. */
  readonly gather: (into: AnyInsert, row: unknown) => boolean
}

/** Set while a batch's transaction runs its pieces. */
export const gathering = FiberRef.unsafeMake<Gathering | undefined>(undefined)

/**
 * Inserts `row`: at once, or, inside a group-commit batch, with the batch's other rows of the
 * same table in one multi-row statement before it commits, so the statements per request fall
 * with the batch size. Inside a batch it answers `true` before the row is written; if the
 * statement then refuses it (another instance stored a row of the same key first), the piece's
 * rows are left out and its work runs again, where this insert answers `false`.
 */
export const insertBatched = <Row, E>(into: BatchedInsert<Row, E>, row: Row): Effect.Effect<boolean, E> =>
  Effect.withFiberRuntime((fiber) => {
    const batch = fiber.getFiberRef(gathering)
    if (batch === undefined || (into.refuses && batch.isolated)) return into.one(row)
    return batch.gather(into, row) ? gathered : refusedBefore
  })

const gathered = Effect.succeed(true)
const refusedBefore = Effect.succeed(false)
