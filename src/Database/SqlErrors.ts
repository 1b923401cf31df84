import { SqlError } from "@effect/sql/SqlError"

/** The SQLite result code behind a failure (`SQLITE_BUSY`, `SQLITE_IOERR_WRITE`, ...), if it is one. */
const sqliteCode = (u: unknown): string | undefined =>
  u instanceof SqlError && typeof u.cause === "object" && u.cause !== null && "code" in u.cause
    ? String(u.cause.code)
    : undefined

/** Another connection holds the lock: worth retrying shortly. */
export const isBusy = (u: unknown): boolean => /^SQLITE_(BUSY|LOCKED)/.test(sqliteCode(u) ?? "")

/** The database is there but cannot be used right now: the caller may retry (503, not 500). */
export const isDatabaseUnavailable = (u: unknown): boolean =>
  /^SQLITE_(BUSY|LOCKED|CANTOPEN|IOERR|FULL|READONLY|PROTOCOL|NOTADB|CORRUPT)/.test(sqliteCode(u) ?? "")

/** A failure with SQLite's code, for conditions SQLite itself cannot see. */
export const sqliteError = (code: string, message: string) =>
  new SqlError({ cause: Object.assign(new Error(message), { code }), message })
