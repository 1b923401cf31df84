import { SqlClient } from "@effect/sql"
import { Data, Effect, Exit, type Layer } from "effect"
import { closeSync, existsSync, fchmodSync, fstatSync, fsyncSync, openSync, rmSync } from "node:fs"
import { dirname, resolve } from "node:path"
import { DatabaseConfig, databaseName, type DatabaseTarget } from "../Config.ts"
import { NoDatabase } from "./Services.ts"

/** Why no backup was written, as the one sentence `backup` prints before it exits 1 (docs/operators.md, Backups). */
export class BackupRefused extends Data.TaggedError("BackupRefused")<{ readonly message: string }> {}

type SqliteTarget = Extract<DatabaseTarget, { _tag: "sqlite" }>

const refused = (message: string) => Effect.fail(new BackupRefused({ message }))

/**
 * The SQLite file DATABASE_URL names, when there is one to back up. A path with no database at it
 * is refused rather than opened: opening would make a new, empty database there, and its backup
 * would hide that DATABASE_URL names the wrong file.
 */
export const databaseToBackUp = Effect.flatMap(
  DatabaseConfig,
  (target): Effect.Effect<SqliteTarget, BackupRefused> =>
    target._tag === "postgres"
      ? refused(
        `DATABASE_URL names PostgreSQL (${
          databaseName(target)
        }), which this command does not back up: use pg_dump, which copies a consistent snapshot while the servers run.`
      )
      : target.filename === ":memory:"
      ? refused(
        "DATABASE_URL is :memory:, a database that lives only in the process that opened it: there is no file to back up."
      )
      : existsSync(target.filename)
      ? Effect.succeed(target)
      : refused(new NoDatabase({ path: resolve(target.filename) }).message)
)

/**
 * The backup's file, made before anything is copied: exclusively, so an existing file is never
 * overwritten (not even one made a moment ago), and readable by its owner only from its first
 * byte, as the database (it holds key digests). SQLite writes into an empty file as into a new one.
 */
const newPrivateFile = (file: string) =>
  Effect.try({
    try: () => {
      const fd = openSync(file, "wx", 0o600)
      // The mode asked of openSync is narrowed by the umask; the database's is exactly 0600.
      fchmodSync(fd, 0o600)
      return fd
    },
    catch: (error) => {
      const code = (error as NodeJS.ErrnoException).code
      return new BackupRefused({
        message: code === "EEXIST"
          ? `${file} already exists: a backup never overwrites a file; name a new one.`
          : code === "ENOENT"
          ? `${dirname(file)} does not exist: make the directory first, or name a file in another one.`
          : `${file} cannot be created (${code ?? String(error)}): name a file in a directory this user can write.`
      })
    }
  })

/** SQLite does not sync what `VACUUM INTO` writes: a backup reported written must survive a power cut. */
const syncToDisk = (fd: number, file: string) => {
  fsyncSync(fd)
  const directory = openSync(dirname(file), "r")
  try {
    fsyncSync(directory)
  } finally {
    closeSync(directory)
  }
}

/**
 * Writes a copy of the database that `database` opens to the new file `destination`, and says
 * where and how many bytes (docs/operators.md, Backups). `VACUUM INTO` reads the database in one read
 * transaction, so the copy is the database as one moment saw it, every write committed before
 * that moment and none after; in WAL mode the server's writes go on meanwhile. The database is
 * opened only once the new file is there, and a copy that fails leaves no file behind.
 */
export const backUp = <E, R>(destination: string, database: Layer.Layer<SqlClient.SqlClient, E, R>) => {
  // Absolute, so SQLite can never read it as a `file:` URI, and the message names the file plainly.
  const file = resolve(destination)
  return Effect.acquireUseRelease(
    newPrivateFile(file),
    (fd) =>
      Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe("VACUUM INTO ?", [file])).pipe(
        Effect.provide(database),
        Effect.zipRight(Effect.sync(() => {
          syncToDisk(fd, file)
          return { file, bytes: fstatSync(fd).size }
        }))
      ),
    (fd, exit) =>
      Effect.sync(() => {
        closeSync(fd)
        if (Exit.isFailure(exit)) rmSync(file, { force: true })
      })
  )
}
