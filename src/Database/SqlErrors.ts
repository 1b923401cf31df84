import { SqlError } from "@effect/sql/SqlError"

export const isSqlError = (u: unknown): u is SqlError => u instanceof SqlError

/**
 * The driver's code behind a failure, if it is one: SQLite's result code (`SQLITE_BUSY`,
 * `SQLITE_IOERR_WRITE`, ...), PostgreSQL's SQLSTATE (`40P01`, `57P01`, ...) or a socket's
 * error code (`ECONNREFUSED`, ...).
 */
const driverCode = (u: unknown): string | undefined =>
  u instanceof SqlError && typeof u.cause === "object" && u.cause !== null && "code" in u.cause
    ? String(u.cause.code)
    : undefined

const causeMessage = (u: unknown): string => u instanceof SqlError && u.cause instanceof Error ? u.cause.message : ""

/**
 * Worth running again shortly: another SQLite connection holds the lock, or PostgreSQL chose
 * this transaction as a deadlock's victim (another instance's batch took the same rows in
 * another order), a serialization failure, or a cancelled statement (a timed-out statement's
 * cancel can reach the connection's next statement).
 */
export const isRetryable = (u: unknown): boolean =>
  /^(SQLITE_(BUSY|LOCKED)|(40P01|40001|57014)$)/.test(driverCode(u) ?? "")

/**
 * The database is there but cannot be used right now: the caller may retry (503, not 500).
 * For PostgreSQL: the server unreachable or restarting (SQLSTATE classes 08, 57P and 58), out of
 * resources (class 53: disk full, too many connections), a lock or an idle transaction timed out
 * (55P03, 25P03), a read-only server (25006: a standby after a failover), a cancelled statement,
 * a connection lost mid-statement, or no connection to be had from the pool.
 */
export const isDatabaseUnavailable = (u: unknown): boolean => {
  if (isRetryable(u)) return true
  const code = driverCode(u) ?? ""
  if (/^SQLITE_(CANTOPEN|IOERR|FULL|READONLY|PROTOCOL|NOTADB|CORRUPT)/.test(code)) return true
  if (
    /^(08|53|57P|58|55P03|25P03|25006|E(CONN|PIPE|TIMEDOUT|HOSTUNREACH|NETUNREACH|AI_AGAIN|NOTFOUND)|ERR_SOCKET)/.test(
      code
    )
  ) return true
  if (u instanceof SqlError && /acquire connection|Connection error|Failed to connect|timed out/i.test(u.message)) {
    return true
  }
  return /Connection terminated|timeout exceeded when trying to connect|connection error|not queryable|Connection closed/i
    .test(causeMessage(u))
}

/** A failure with a driver's code, for conditions the driver itself cannot see. */
export const databaseError = (code: string, message: string) =>
  new SqlError({ cause: Object.assign(new Error(message), { code }), message })
