import type { Statement } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Context, Data, Duration, Effect } from "effect"

/** How long a write waits for another process's lock before SQLITE_BUSY (503). */
export const busyTimeout = Duration.seconds(5)

/**
 * The database file the connection was opened on. SQLite keeps using its open file when the
 * path is removed or replaced, so writes would land where no restart finds them: check first.
 * On PostgreSQL there is no file of ours to watch: both checks always pass.
 */
export class DatabaseFile extends Context.Tag("Database/DatabaseFile")<DatabaseFile, {
  /** Fails (SQLITE_CANTOPEN) when a file is gone or replaced: checked with `stat`, for writes and readiness. */
  readonly ensurePresent: Effect.Effect<void, SqlError>
  /**
   * The same, cheap enough for every request: the directory is watched, and the files are looked
   * at only after something was renamed or removed in it (and then until they are as opened again).
   */
  readonly changed: () => boolean
}>() {
  static readonly none = DatabaseFile.of({ ensurePresent: Effect.void, changed: () => false })
}

/**
 * No SQLite database at the path DATABASE_URL names, and a command that must not make one (docs/operators.md,
 * The key command line): most likely DATABASE_URL is mistyped or relative to another directory,
 * and a new, empty database there would only hide it.
 */
export class NoDatabase extends Data.TaggedError("NoDatabase")<{ readonly path: string }> {
  override get message() {
    return `There is no database at ${this.path}: set DATABASE_URL to the server's database (only serve and keys create make a new one).`
  }
}

/**
 * Which database this process opened, as the start-up log names it (docs/operators.md, Configuration): the
 * SQLite file's absolute path or PostgreSQL's host and database, never a password; and whether
 * the SQLite file (`created`) and its directory (`createdDirectory`) were made by this start.
 */
export class DatabaseInUse extends Context.Tag("Database/DatabaseInUse")<DatabaseInUse, {
  readonly name: string
  readonly created: boolean
  readonly createdDirectory: string | undefined
}>() {}

/**
 * Reads that must see only committed rows (the idempotency lookup, the reads, the analytics):
 * `prepare(make)` gives a function that runs the statement `make` builds with the main client's
 * `sql` on a connection outside every transaction.
 *
 * On SQLite, a read-only connection of their own, used directly: on the shared connection a plain
 * read could run inside a group-commit batch opened meanwhile and see its uncommitted writes, and
 * a read transaction there costs two more statements and queues behind the writes. bun:sqlite
 * answers synchronously and nothing ever opens a transaction on this connection, so the
 * statement needs none of the client's connection handling (its scope, lock and span were a
 * third of a fresh activation's Effect operations). Its text is compiled once: `make` is called
 * with stand-ins, and when each comes back as the parameter in its place, the text is kept and
 * each call passes its values in their places (otherwise each call builds its statement). So
 * `make` must only interpolate its arguments as values: a text that depended on them (a branch
 * on one) would be kept as the stand-ins made it. On PostgreSQL, the pool: a statement outside a
 * transaction sees only what is committed.
 */
export class ReadSql extends Context.Tag("Database/ReadSql")<ReadSql, {
  readonly prepare: <Args extends ReadonlyArray<string | number>, A extends object>(
    make: (...args: Args) => Statement.Statement<A>
  ) => (...args: Args) => Effect.Effect<ReadonlyArray<A>, SqlError>
}>() {
  /** The statement built for each call and run by its own client (PostgreSQL's pool, or SQLite's one in-memory connection). */
  static readonly asIs = ReadSql.of({ prepare: (make) => (...args) => make(...args) })
}
