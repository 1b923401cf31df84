import { Database } from "bun:sqlite"
import { existsSync, statSync } from "node:fs"

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
