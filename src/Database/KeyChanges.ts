import { SqlClient } from "@effect/sql"
import { Database } from "bun:sqlite"
import {
  Deferred,
  Duration,
  Effect,
  Fiber,
  Option,
  PubSub,
  type Queue,
  Schedule,
  Schema,
  type Scope,
  Stream
} from "effect"
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

/** A key changed, as PostgreSQL announces it once the change committed: `keyId` null for every key. */
export interface KeyChange {
  readonly keyId: string | null
  readonly generation: number
}

/** How the server learns that the keys changed, whichever process changed them. */
export interface KeyChanges {
  /** The keys' generation: a number that changes whenever any process changes, adds or deletes a key. */
  readonly generation: Effect.Effect<number>
  /**
   * On PostgreSQL, where `generation` is a poll's reading: each key change as it is announced,
   * the moment its transaction commits (migration 0008), to apply at once. Undefined on SQLite,
   * where `generation` is exact at every request and there is nothing to wait for.
   */
  readonly announcements: Effect.Effect<Queue.Dequeue<KeyChange>, never, Scope.Scope> | undefined
}

type Probe = Effect.Effect<KeyChanges, never, SqlClient.SqlClient | DatabaseFile | Scope.Scope>

/**
 * How the server learns that the keys changed, cheaply enough to ask on every request
 * (docs/operators.md, Reliability): on SQLite the wal-index header and `PRAGMA data_version`, on PostgreSQL
 * each change announced by a notification, with a poll of the counter behind it (docs/operators.md, Running
 * several instances).
 */
export const keyChanges = Effect.flatMap(DatabaseConfig, (target): Probe =>
  target._tag === "postgres"
    ? sharedGeneration
    : Effect.map<Effect.Effect<number>, never, SqlClient.SqlClient | DatabaseFile | Scope.Scope, KeyChanges>(
      target.filename === ":memory:"
        // An in-memory database has no other connection: its counter is read through the one it has.
        ? Effect.map(readCounter, Effect.orDie)
        : fileGeneration(target.filename),
      (generation) => ({ generation, announcements: undefined })
    ))

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

/** Where migration 0008's trigger announces each change to a key. */
const channel = "api_keys_changed"

/**
 * An announcement as the trigger spells it. Anything else on the channel (any user of the database
 * may send there) is ignored: an announcement only ever makes an instance read a key again.
 */
const decodeAnnouncement = Schema.decodeUnknownOption(
  Schema.parseJson(Schema.Struct({ keyId: Schema.NullOr(Schema.String), generation: Schema.Number }))
)

/**
 * On PostgreSQL, each change announced by the trigger of migration 0008 as its transaction commits,
 * heard on a connection of its own (`PgClient.listen`) and passed on for the keys to apply at once;
 * and the counter polled in the background, so a request reads a number in memory and never waits
 * on the database. The poll is what the keys fall back on: a change whose announcement was missed
 * is seen within one poll, as before there were announcements. The listener swallows the errors
 * of its connection (@effect/sql-pg 0.53), so a lost one shows only in the poll: a generation a
 * whole poll old that no announcement brought, and then it listens again.
 *
 * While the database does not answer, the last reading is trusted for `generationTrustedFor`
 * (counted from when the read started, so a reading always reflects every commit made that long
 * ago), then no key is vouched for (503) rather than one that may have been revoked since: docs/operators.md,
 * Running several instances.
 *
 * Nothing is asked before the first request asks the generation: the key commands, which build
 * the same layers and never authenticate, neither poll nor listen.
 */
const sharedGeneration = Effect.gen(function*() {
  // Loaded here, not imported: on SQLite the PostgreSQL client is never loaded (Database/Sql.ts).
  const { PgClient } = yield* Effect.promise(() => import("@effect/sql-pg/PgClient"))
  const listen = yield* Effect.map(
    Effect.serviceOption(PgClient),
    Option.match({
      onNone: () => (_: string): Stream.Stream<string> => Stream.die("the PostgreSQL client has no listen"),
      onSome: (pg) => pg.listen
    })
  )
  // No timeout on a read: sql-pg cancels an interrupted statement with pg_cancel_backend, which
  // could reach the connection's next user. A reading grown too old is refused instead (`stale`).
  const read = yield* readCounter
  const clock = yield* Effect.clock
  // The layer's: a listener outlives the fiber that starts it.
  const scope = yield* Effect.scope
  const trustedFor = Duration.toMillis(generationTrustedFor)
  const changes = yield* PubSub.unbounded<KeyChange>()

  // The highest generation an announcement (or, at first, the first reading) has brought.
  let announced = Number.NEGATIVE_INFINITY
  // A listener that cannot connect ends: the poll finds it gone at the next change, as a lost one.
  const listening = Effect.ignore(
    Stream.runForEach(listen(channel), (payload) =>
      Option.match(decodeAnnouncement(payload), {
        onNone: () => Effect.void,
        onSome: (change) => {
          if (change.generation > announced) announced = change.generation
          return Effect.asVoid(PubSub.publish(changes, change))
        }
      }))
  )
  let listener: Fiber.RuntimeFiber<void> | undefined
  let relistening = false
  // Interrupting the old listener ends its connection (the client's last user gone): the new one
  // gets a connection of its own.
  const relisten = Effect.suspend(() => {
    if (relistening) return Effect.void
    relistening = true
    return Effect.logWarning("a key change was not announced to this instance: listening again").pipe(
      Effect.zipRight(listener === undefined ? Effect.void : Fiber.interrupt(listener)),
      Effect.zipRight(Effect.map(Effect.forkIn(listening, scope), (fiber) => void (listener = fiber))),
      Effect.ensuring(Effect.sync(() => void (relistening = false))),
      // On its own: a connection that hangs as it closes must not stop the poll.
      Effect.fork,
      Effect.asVoid
    )
  })
  // A generation the poll read that no announcement had brought by then.
  let unannounced: number | undefined
  const heard = (generation: number) => {
    if (generation <= announced) {
      unannounced = undefined
      return Effect.void
    }
    if (unannounced !== undefined && announced < unannounced) {
      unannounced = undefined
      announced = generation
      return relisten
    }
    unannounced = generation
    return Effect.void
  }

  let reading: { readonly generation: number; readonly startedAt: number } | undefined
  const poll = Effect.suspend(() => {
    const startedAt = clock.unsafeCurrentTimeMillis()
    return Effect.flatMap(read, (generation) => {
      const first = reading === undefined
      reading = { generation, startedAt }
      if (!first) return heard(generation)
      // Announcements count from here on: what came before is in this reading.
      if (generation > announced) announced = generation
      return Effect.void
    })
  }).pipe(Effect.ignore)
  const wanted = yield* Deferred.make<void>()
  const firstPollDone = yield* Deferred.make<void>()
  yield* Effect.gen(function*() {
    yield* Deferred.await(wanted)
    listener = yield* Effect.forkIn(listening, scope)
    yield* poll
    yield* Deferred.succeed(firstPollDone, undefined)
    // `schedule` waits before each run: the reading above is as new as a first poll would be.
    yield* Effect.schedule(poll, Schedule.spaced(generationPollInterval))
  }).pipe(Effect.forkScoped)

  // SQLSTATE 08000, connection_exception: what the other requests get while the database is away.
  const stale = Effect.die(databaseError("08000", "the API keys' generation could not be read for a second"))
  const trusted = () =>
    reading !== undefined && clock.unsafeCurrentTimeMillis() - reading.startedAt <= trustedFor
      ? Effect.succeed(reading.generation)
      : stale
  const generation = Effect.suspend(() =>
    reading !== undefined
      ? trusted()
      : Deferred.succeed(wanted, undefined).pipe(
        Effect.zipRight(Deferred.await(firstPollDone)),
        Effect.zipRight(Effect.suspend(trusted))
      )
  )
  return { generation, announcements: PubSub.subscribe(changes) }
})
