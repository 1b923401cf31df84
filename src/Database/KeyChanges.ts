import { SqlClient } from "@effect/sql"
import { Database } from "bun:sqlite"
import { Duration, Effect, Schedule, type Scope } from "effect"
import { openSync, readSync, realpathSync } from "node:fs"
import { DatabaseConfig } from "../Config.ts"
import { DatabaseFile } from "./Sql.ts"
import { databaseError } from "./SqlErrors.ts"

/** The counter (kept by triggers, see migration 0002), through the shared client. */
const readCounter = Effect.map(
  SqlClient.SqlClient,
  (sql) =>
    sql<{ generation: number | string }>`SELECT generation FROM api_keys_generation`.pipe(
      Effect.map((rows) => Number(rows[0]!.generation))
    )
)

/** The keys' generation: a number that changes whenever any process changes, adds or deletes a key. */
type Probe = Effect.Effect<Effect.Effect<number>, never, SqlClient.SqlClient | DatabaseFile | Scope.Scope>

/**
 * How the server learns that the keys changed, cheaply enough to ask on every request
 * (README, Reliability): on SQLite the wal-index header and `PRAGMA data_version`, on PostgreSQL a
 * poll of the counter (README, Running several instances).
 */
export const keyChanges = Effect.flatMap(DatabaseConfig, (target): Probe =>
  target._tag === "postgres"
    ? sharedGeneration
    : target.filename === ":memory:"
    // An in-memory database has no other connection: its counter is read through the one it has.
    ? Effect.map(readCounter, Effect.orDie)
    : fileGeneration(target.filename))

/**
 * SQLite's wal-index header, both of its copies: the first 96 bytes of the `-shm` file
 * (https://sqlite.org/walformat.html). Every commit, by any process, rewrites them (`iChange`
 * counts transactions, `mxFrame` the log's frames, and a checksum covers both) before a new
 * reader can see that commit. So while they read exactly as they did just before the last
 * `PRAGMA data_version`, and the two copies agree, nothing was committed since. (A writer killed
 * between its two copies leaves them different: then the pragma is asked, and SQLite recovers.)
 *
 * Read with `pread` on a descriptor of our own that is never closed: closing any descriptor of a
 * file drops every POSIX lock the process holds on it, SQLite's on `-shm` included, and a
 * mapping (`Bun.mmap`) opens and closes one. The path is the one SQLite uses: next to the real
 * file, symbolic links followed. Undefined when it cannot be opened: then every request asks the pragma.
 */
const walIndexHeader = (
  filename: string
): { readonly unchangedSince: (seen: Uint32Array) => boolean; readonly read: () => Uint32Array } | undefined => {
  let fd: number
  try {
    fd = openSync(`${realpathSync(filename)}-shm`, "r")
  } catch {
    return undefined
  }
  const words = new Uint32Array(24)
  const bytes = new Uint8Array(words.buffer)
  /** Reads the header into `words`; false when the file is shorter (not a header to trust). */
  const readInto = (): boolean => {
    if (readSync(fd, bytes, 0, 96, 0) === 96) return true
    words.fill(0)
    return false
  }
  return {
    read: () => {
      readInto()
      return words.slice()
    },
    unchangedSince: (seen) => {
      if (!readInto()) return false
      for (let i = 0; i < 12; i++) if (words[i] !== seen[i] || words[i] !== words[i + 12]) return false
      for (let i = 12; i < 24; i++) if (words[i] !== seen[i]) return false
      return true
    }
  }
}

/**
 * On SQLite, the counter read on a read-only connection of its own: `PRAGMA data_version` on it
 * changes only when another connection commits, so the counter itself is read only then. The
 * pragma takes and drops a WAL read lock (system calls, a few microseconds): it is asked only
 * when the wal-index header moved since it was last asked, which a run of reads never does.
 * Through @effect/sql each read would cost tens of microseconds and queue behind the server's
 * writes on the shared connection.
 */
const fileGeneration = (filename: string) =>
  Effect.gen(function*() {
    const file = yield* DatabaseFile
    const db = yield* Effect.acquireRelease(
      Effect.sync(() => new Database(filename, { readonly: true })),
      (db) => Effect.sync(() => db.close())
    )
    // Never wait for a lock on the event loop: a busy database is a 503, as for every other read.
    db.run("PRAGMA busy_timeout = 0")
    const dataVersion = db.query<{ data_version: number }, []>("PRAGMA data_version")
    const counter = db.query<{ generation: number }, []>("SELECT generation FROM api_keys_generation")
    let seenVersion = -1
    let generation = -1
    // Opened after the read connection's first read: by then the `-shm` file is SQLite's, in use.
    dataVersion.get()
    const header = walIndexHeader(filename)
    let headerAtLastRead: Uint32Array | undefined
    return Effect.suspend(() => {
      // With a file of the database gone or replaced, a key revoked since may never show here:
      // refuse to vouch for any key (503) rather than answer from what may be stale. (This also
      // covers a `-shm` file replaced under our descriptor, which would then never move.)
      if (file.changed()) {
        return Effect.die(databaseError("SQLITE_CANTOPEN", "the database files changed under the server"))
      }
      try {
        if (header !== undefined && headerAtLastRead !== undefined && header.unchangedSince(headerAtLastRead)) {
          return Effect.succeed(generation)
        }
        // Copied before the pragma: a commit between the two makes the next request ask again.
        const before = header?.read()
        const version = dataVersion.get()!.data_version
        if (version !== seenVersion) {
          generation = Number(counter.get()!.generation)
          seenVersion = version
        }
        headerAtLastRead = before
        return Effect.succeed(generation)
      } catch (error) {
        const code = typeof error === "object" && error !== null && "code" in error
          ? String(error.code)
          : "SQLITE_ERROR"
        return Effect.die(databaseError(code, `reading the API keys' generation: ${String(error)}`))
      }
    })
  })

/** How often each instance reads the shared counter, and how old a reading may be before it is not trusted. */
const generationPollInterval = Duration.millis(200)
const generationTrustedFor = Duration.seconds(1)

/**
 * On PostgreSQL, the counter polled in the background, so a request reads a number in memory and
 * never waits on the database: a key id absent at the last reading is refused without a query, so
 * a flood of made-up ids costs the database nothing and answers as fast as a known id does. A key
 * created, changed or revoked by any instance or the command line is seen within one poll. While
 * the database does not answer, the last reading is trusted for `generationTrustedFor` (counted
 * from when the read started, so a reading always reflects every commit made that long ago), then
 * no key is vouched for (503) rather than one that may have been revoked since: README, Running
 * several instances.
 */
const sharedGeneration = Effect.gen(function*() {
  // No timeout on a read: sql-pg cancels an interrupted statement with pg_cancel_backend, which
  // could reach the connection's next user. A reading grown too old is refused instead (`stale`).
  const read = yield* readCounter
  const clock = yield* Effect.clock
  const trustedFor = Duration.toMillis(generationTrustedFor)
  const readNow = Effect.suspend(() => {
    const startedAt = clock.unsafeCurrentTimeMillis()
    return Effect.map(read, (generation) => ({ generation, startedAt }))
  })
  let reading = yield* Effect.orDie(readNow)
  yield* Effect.map(readNow, (latest) => {
    reading = latest
  }).pipe(
    Effect.ignore,
    // `schedule` waits before each run: the reading above is as new as a first poll would be.
    Effect.schedule(Schedule.spaced(generationPollInterval)),
    Effect.forkScoped
  )
  // SQLSTATE 08000, connection_exception: what the other requests get while the database is away.
  const stale = Effect.die(databaseError("08000", "the API keys' generation could not be read for a second"))
  return Effect.suspend(() =>
    clock.unsafeCurrentTimeMillis() - reading.startedAt <= trustedFor ? Effect.succeed(reading.generation) : stale
  )
})
