/**
 * The tables this service writes, in the one order every transaction writes them, and each table's
 * rows in the order of their keys (`inKeyOrder`). Two transactions (two instances' batches) then
 * take their rows' locks in the same order: one waits for the other's commit, and PostgreSQL never
 * finds them waiting on each other, which cost both instances' writes a `deadlock_timeout` each time.
 *
 * - `idempotency_keys` first: the one table whose rows may be refused (another instance stored the
 *   key first), so that a batch knows which of its pieces were refused before it writes anything
 *   else of theirs (Batch.ts). Its purge, which writes nothing else, locks its rows in key order
 *   too (`IdempotencyRepo.purgeExpired`).
 * - `activations`, then the counts kept as they come (migration 0004). `campaign_creator_days`'
 *   statement trigger (0007) then takes its creators' advisory locks in one order and writes
 *   `campaign_day_pairs` in key order, within that one statement.
 * - `api_key_usage`, in transactions of its own (`ApiKeysRepo.recordUsage`).
 */
export const writeOrder = [
  "idempotency_keys",
  "activations",
  "campaign_days",
  "campaign_creator_days",
  "campaign_creators",
  "api_key_usage"
] as const

export type Table = (typeof writeOrder)[number]

/** Where `table` comes in `writeOrder`. */
export const positionOf = (table: Table): number => writeOrder.indexOf(table)

/** The order of keys within a table: by their UTF-16 code units, as every instance compares them. */
export const byKeyOrder = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0)

/** `rows` in the order a transaction writes them into their table: by their keys. */
export const inKeyOrder = <Row>(rows: ReadonlyArray<Row>, keyOf: (row: Row) => string): Array<Row> =>
  rows.map((row) => ({ key: keyOf(row), row })).sort((a, b) => byKeyOrder(a.key, b.key)).map(({ row }) => row)
