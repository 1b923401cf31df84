import { dlopen, FFIType, ptr } from "bun:ffi"
import { Database } from "bun:sqlite"
import { closeSync, existsSync, openSync, statSync } from "node:fs"

/** Runs `read` on a connection of its own to the file, closed right after. */
export const inspect = <A>(file: string, read: (db: Database) => A): A => {
  const db = new Database(file)
  try {
    return read(db)
  } finally {
    db.close()
  }
}

export const count = (file: string, sql: string, ...params: Array<string>): number =>
  inspect(file, (db) => (db.query(`SELECT COUNT(*) AS n FROM (${sql})`).get(...params) as { n: number }).n)

export const countRows = (file: string, table: "activations" | "idempotency_keys" | "api_keys"): number =>
  count(file, `SELECT 1 FROM ${table}`)

/** Activations without their stored response, and stored responses without their activation. */
export const orphans = (file: string) => ({
  activations: count(
    file,
    "SELECT 1 FROM activations a WHERE NOT EXISTS (SELECT 1 FROM idempotency_keys i WHERE i.resource_id = a.id)"
  ),
  idempotencyKeys: count(
    file,
    `SELECT 1 FROM idempotency_keys i
     WHERE i.resource_id IS NULL OR NOT EXISTS (SELECT 1 FROM activations a WHERE a.id = i.resource_id)`
  )
})

export const activationExists = (file: string, id: string): boolean =>
  count(file, "SELECT 1 FROM activations WHERE id = ?", id) === 1

export const integrityCheck = (file: string): string =>
  inspect(file, (db) => (db.query("PRAGMA integrity_check").get() as { integrity_check: string }).integrity_check)

/** The database file and whichever of its -wal and -shm files exist. */
export const databaseFiles = (file: string): ReadonlyArray<string> =>
  [file, `${file}-wal`, `${file}-shm`].filter((path) => existsSync(path))

export const permissions = (path: string): number => statSync(path).mode & 0o777

/**
 * Holds a lock on the server's database from outside, as another process would; the function
 * returned releases it.
 * - `"writes"`: the write lock (`BEGIN IMMEDIATE` on a connection of its own). Reads go on;
 *   every write waits for it.
 * - `"everything"`: in WAL mode a reader must take one of the read locks in the `-shm` file,
 *   so holding all of them (bytes 120..127, SQLite's WAL_WRITE_LOCK to WAL_READ_LOCK(4)) leaves
 *   every statement retrying until SQLITE_PROTOCOL. bun:sqlite cannot take such a lock, hence
 *   fcntl(F_SETLK) through FFI (Linux, 64-bit `struct flock`). A lock held by another SQLite
 *   connection of the server is refused.
 */
export const lockDatabase = (database: string, what: "writes" | "everything"): () => void => {
  if (what === "writes") {
    const lock = new Database(database)
    lock.run("BEGIN IMMEDIATE")
    return () => {
      lock.run("ROLLBACK")
      lock.close()
    }
  }
  if (process.platform !== "linux") throw new Error("lockDatabase needs Linux's struct flock")
  const libc = dlopen("libc.so.6", { fcntl: { args: [FFIType.i32, FFIType.i32, FFIType.ptr], returns: FFIType.i32 } })
  const F_SETLK = 6
  const F_WRLCK = 1
  const flock = new DataView(new ArrayBuffer(32))
  flock.setInt16(0, F_WRLCK, true)
  flock.setBigInt64(8, 120n, true)
  flock.setBigInt64(16, 8n, true)
  const fd = openSync(`${database}-shm`, "r+")
  if (libc.symbols.fcntl(fd, F_SETLK, ptr(flock.buffer)) !== 0) {
    closeSync(fd)
    libc.close()
    throw new Error("could not lock the database's shared memory")
  }
  return () => {
    closeSync(fd)
    libc.close()
  }
}
