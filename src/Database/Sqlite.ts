import * as BunContext from "@effect/platform-bun/BunContext"
import { SqlClient, type Statement } from "@effect/sql"
import { SqliteClient, SqliteMigrator } from "@effect/sql-sqlite-bun"
import { SqlError } from "@effect/sql/SqlError"
import { Database, type SQLQueryBindings } from "bun:sqlite"
import { Effect, Layer } from "effect"
import { chmodSync, closeSync, mkdirSync, openSync, readSync, statSync, watch } from "node:fs"
import { basename, dirname, resolve } from "node:path"
import { StartupError } from "../Config.ts"
import { tracing } from "../Spans.ts"
import { migrations } from "./migrations/index.ts"
import { DatabaseFile, DatabaseInUse, NoDatabase, ReadSql } from "./Services.ts"
import { databaseError } from "./SqlErrors.ts"

const sqliteHeader = Buffer.from("SQLite format 3\0")

/** Whether a file that is already there could be a SQLite database (empty, or SQLite's header). */
const looksLikeDatabase = (filename: string): boolean => {
  const fd = openSync(filename, "r")
  try {
    const head = Buffer.alloc(sqliteHeader.length)
    const read = readSync(fd, head, 0, head.length, 0)
    return read === 0 || head.subarray(0, read).equals(sqliteHeader.subarray(0, read))
  } finally {
    closeSync(fd)
  }
}

const unusable = (filename: string, why: string, fix: string) =>
  new StartupError({ variable: "DATABASE_URL", message: `DATABASE_URL=${filename} ${why}: ${fix}.` })

/**
 * Makes `directory` and whichever directories above it are missing, each 0700 whatever the umask
 * (which narrows mkdir's mode, hence the chmod of each level made): the first one made, if any.
 */
const makePrivateDirectories = (directory: string): string | undefined => {
  const first = mkdirSync(directory, { recursive: true, mode: 0o700 })
  if (first === undefined) return undefined
  for (let level = directory; level.startsWith(first); level = dirname(level)) chmodSync(level, 0o700)
  return first
}

/**
 * The file holds key digests and brands' records: only its owner may read it, or enter the
 * directories made for it. A path that cannot be a database stops the start with one sentence,
 * and a file that is something else is left as it was (its mode included). Unless `create`, a
 * file that is not there is not made, nor its directory.
 */
const createPrivateFile = (filename: string, create: boolean) =>
  Effect.try({
    try: (): typeof DatabaseInUse.Service => {
      const name = filename === ":memory:" ? filename : resolve(filename)
      if (filename === ":memory:") return { name, created: false, createdDirectory: undefined }
      const existing = statSync(filename, { throwIfNoEntry: false })
      if (existing === undefined && !create) throw new NoDatabase({ path: name })
      if (existing?.isDirectory()) throw unusable(filename, "is a directory", "give the path of a database file in it")
      if (existing !== undefined && !looksLikeDatabase(filename)) {
        throw unusable(filename, "is not a SQLite database", "point it at this service's database or at a new path")
      }
      // A missing directory is made, and the start-up log says so (docs/operators.md, Configuration).
      const createdDirectory = makePrivateDirectories(dirname(name))
      closeSync(openSync(filename, "a", 0o600))
      chmodSync(filename, 0o600)
      return { name, created: existing === undefined, createdDirectory }
    },
    catch: (error) =>
      error instanceof StartupError || error instanceof NoDatabase
        ? error
        : unusable(
          filename,
          `cannot be created or opened (${(error as NodeJS.ErrnoException).code ?? String(error)})`,
          "point it at a place this user can write"
        )
  })

const fileIdentity = (filename: string) => {
  const stats = statSync(filename, { throwIfNoEntry: false })
  return stats === undefined ? undefined : `${stats.dev}:${stats.ino}`
}

/**
 * The database file and, in WAL mode, its `-wal` and `-shm` files, as they were when the server
 * opened and migrated the database: SQLite keeps them while a connection is open, so one gone or
 * replaced since is a file trick (a deleted `-wal` takes every commit since the last checkpoint
 * with it), never SQLite's own doing.
 */
const databaseFile = (filename: string) =>
  Effect.gen(function*() {
    if (filename === ":memory:") return DatabaseFile.none
    const files = [filename, `${filename}-wal`, `${filename}-shm`]
    const names = new Set(files.map((file) => basename(file)))
    const opened = files.map(fileIdentity)
    const replaced = () => files.find((file, i) => fileIdentity(file) !== opened[i])
    let suspect = false
    let changed = false
    let alwaysLook = false
    // SQLite's own writes are "change" events; a file removed, renamed or put in place is "rename".
    // Without a watch (inotify's limits reached, say), every call looks at the files instead.
    const watcher = yield* Effect.acquireRelease(
      Effect.sync(() => {
        try {
          return watch(dirname(filename), (event, name) => {
            if (event === "rename" && name !== null && names.has(String(name))) suspect = true
          }).on("error", () => (alwaysLook = true))
        } catch {
          alwaysLook = true
          return undefined
        }
      }),
      (watcher) => Effect.sync(() => watcher?.close())
    )
    void watcher
    return {
      ensurePresent: Effect.suspend(() => {
        const file = replaced()
        return file === undefined
          ? Effect.void
          : Effect.fail(databaseError("SQLITE_CANTOPEN", `the database file ${file} is gone or was replaced`))
      }),
      // While changed, looked at on every call: a file moved away and back is the same file again.
      changed: () => {
        if (suspect || changed || alwaysLook) {
          suspect = false
          changed = replaced() !== undefined
        }
        return changed
      }
    }
  })

const makeClient = (filename: string, busyTimeoutMs: number, create: boolean) =>
  Layer.unwrapEffect(
    Effect.gen(function*() {
      const inUse = yield* createPrivateFile(filename, create)
      const tune = Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql.unsafe(`PRAGMA busy_timeout = ${busyTimeoutMs}`)
        // WAL (set by the client) with FULL syncs the log on every commit: an acknowledged activation survives power loss.
        yield* sql.unsafe("PRAGMA synchronous = FULL")
      })
      return SqliteClient.layer({ filename }).pipe(
        Layer.tap((context) => Effect.provide(tune, context)),
        Layer.merge(Layer.succeed(DatabaseInUse, inUse))
      )
    })
  )

const MigratorLive = SqliteMigrator.layer({
  loader: SqliteMigrator.fromRecord(migrations)
}).pipe(Layer.provide(BunContext.layer))

const readSql = (filename: string) =>
  Layer.scoped(
    ReadSql,
    Effect.gen(function*() {
      // An in-memory database has no second connection: its one connection serves.
      if (filename === ":memory:") return ReadSql.asIs
      const tracingOn = yield* tracing
      const db = yield* Effect.acquireRelease(
        Effect.try({
          try: () => {
            const db = new Database(filename, { readonly: true, create: false })
            try {
              db.run("PRAGMA busy_timeout = 0")
            } catch (error) {
              db.close()
              throw error
            }
            return db
          },
          catch: (cause) => new SqlError({ cause, message: "Failed to open the read-only connection" })
        }),
        (db) => Effect.sync(() => db.close())
      )
      // bun:sqlite keeps the prepared statement of each text: compiled once.
      const run = (text: string, params: ReadonlyArray<unknown>) => runPrepared(db.query(text), params)
      const runPrepared = (statement: ReturnType<typeof db.query>, params: ReadonlyArray<unknown>) =>
        Effect.try({
          try: () => statement.all(...(params as Array<SQLQueryBindings>)),
          catch: (cause) => new SqlError({ cause, message: "Failed to execute statement" })
        })
      // The span @effect/sql gives each statement, only while tracing is on.
      const traced = (text: string, direct: Effect.Effect<ReadonlyArray<any>, SqlError>) =>
        tracingOn
          ? Effect.withSpan(direct, "sql.execute", {
            kind: "client",
            captureStackTrace: false,
            attributes: { "db.system.name": "sqlite", "db.operation.name": "execute", "db.query.text": text }
          })
          : direct
      return ReadSql.of({
        prepare: <Args extends ReadonlyArray<string | number>, A extends object>(
          make: (...args: Args) => Statement.Statement<A>
        ) => {
          const standIns = Array.from({ length: make.length }, (_, i) => `\u0000stand-in ${i}`) as unknown as Args
          const [text, params] = make(...standIns).compile()
          const inPlace = params.length === standIns.length && params.every((param, i) => param === standIns[i])
          if (inPlace) {
            // The statement's text never changes: its prepared statement is taken once, here.
            const statement = db.query(text)
            return (...args: Args) =>
              traced(text, runPrepared(statement, args)) as Effect.Effect<ReadonlyArray<A>, SqlError>
          }
          return (...args: Args) => {
            const [built, values] = make(...args).compile()
            return traced(built, run(built, values)) as Effect.Effect<ReadonlyArray<A>, SqlError>
          }
        }
      })
    })
  )

/**
 * The SQLite database, opened, tuned and migrated, with its read-only connection and the watch
 * on its files (taken once it is migrated: by then its `-wal` and `-shm` files exist). The
 * server passes a busy timeout of 0: bun:sqlite waits for another process's lock synchronously,
 * which would block the event loop, so SQLITE_BUSY comes back at once and GroupCommit retries
 * asynchronously. Unless `create`, a database that is not there is refused (`NoDatabase`).
 */
export const layer = (filename: string, options: { readonly busyTimeoutMs: number; readonly create: boolean }) =>
  Layer.merge(
    Layer.scoped(DatabaseFile, databaseFile(filename)).pipe(Layer.provide(MigratorLive)),
    readSql(filename)
  ).pipe(Layer.provideMerge(makeClient(filename, options.busyTimeoutMs, options.create)))
