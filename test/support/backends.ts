import { SQL } from "bun"
import { count as countSqlite, inspect } from "./database.ts"
import { type Environment, keyPropagationBound, tempDatabase } from "./server.ts"

export { keyPropagationBound }

/**
 * The two ways to run the service: SQLite alone (the embedded default), and PostgreSQL with
 * Redis (several instances). globalSetup.ts finds out whether the second is reachable here and
 * says so; with CI set it is required.
 */
export interface Backend {
  readonly name: string
  /** A database of its own for one server (a new file, or a new PostgreSQL database), as DATABASE_URL. */
  readonly database: () => Promise<string>
  /** What every server on this backend is started with besides DATABASE_URL. */
  readonly env: Environment
  /** How many rows `sql` (with `?` placeholders) returns. */
  readonly count: (database: string, sql: string, ...params: Array<string>) => Promise<number>
  /** Runs one statement, as an operator (or an accident) would from outside. */
  readonly exec: (database: string, sql: string) => Promise<void>
  /** When docs/operators.md promises that a created, revoked or expired key is seen. */
  readonly keysSeen: string
  /** Waits as long as that promise allows: nothing on SQLite, the whole second on PostgreSQL. */
  readonly afterKeyChange: () => Promise<void>
}

export const sqlite: Backend = {
  name: "SQLite",
  database: async () => tempDatabase(),
  env: {},
  count: async (database, sql, ...params) => countSqlite(database, sql, ...params),
  exec: async (database, sql) => inspect(database, (db) => void db.run(sql)),
  keysSeen: "on the very next request",
  afterKeyChange: async () => {}
}

const postgresServer = process.env["CAMPAIGN_API_TEST_POSTGRES"]
const redisUrl = process.env["CAMPAIGN_API_TEST_REDIS"]

/** Why the PostgreSQL + Redis runs are skipped here, or undefined when they run. */
export const sharedSkipped: string | undefined = process.env["CAMPAIGN_API_TEST_SHARED_SKIPPED"]

/** The prefix of every database this run creates: globalSetup drops them when the run ends. */
export const runDatabasePrefix = (): string => `campaign_api_test_${process.env["CAMPAIGN_API_TEST_RUN"] ?? "local"}_`

let created = 0

/** Runs `use` on a connection to `url`, closed right after. */
export const withPostgres = async <A>(url: string, use: (sql: SQL) => Promise<A>): Promise<A> => {
  const sql = new SQL(url, { max: 1 })
  try {
    return await use(sql)
  } finally {
    await sql.close()
  }
}

const databaseUrl = (name: string) => `${postgresServer}/${name}`
const numbered = (sql: string) => {
  let n = 0
  return sql.replace(/\?/g, () => `$${++n}`)
}

export const postgres: Backend = {
  name: "PostgreSQL + Redis",
  database: async () => {
    // Each test file loads this module afresh: a counter alone would repeat across files.
    const name = `${runDatabasePrefix()}${++created}_${crypto.randomUUID().slice(0, 8)}`
    await withPostgres(databaseUrl("postgres"), (sql) => sql.unsafe(`CREATE DATABASE ${name}`))
    return databaseUrl(name)
  },
  env: { REDIS_URL: redisUrl },
  count: (database, sql, ...params) =>
    withPostgres(database, async (db) => {
      const rows = await db.unsafe(`SELECT COUNT(*) AS n FROM (${numbered(sql)}) AS counted`, params)
      return Number(rows[0].n)
    }),
  exec: (database, sql) => withPostgres(database, async (db) => void (await db.unsafe(sql))),
  keysSeen: "within 1 second",
  afterKeyChange: () => Bun.sleep(keyPropagationBound)
}

/** Every backend this machine can run: SQLite always, PostgreSQL + Redis when reachable. */
export const backends: ReadonlyArray<Backend> = sharedSkipped === undefined ? [sqlite, postgres] : [sqlite]
