import { SQL } from "bun"
import { mkdtempSync, rmSync } from "node:fs"
import { connect } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { stateDeadlineMs } from "./deadlines.ts"

const postgresServer = process.env["TEST_POSTGRES_URL"] ?? "postgres://postgres@127.0.0.1:5432"
const redisUrl = process.env["TEST_REDIS_URL"] ?? "redis://127.0.0.1:6379"

const reachPostgres = async (): Promise<string | undefined> => {
  const sql = new SQL(`${postgresServer}/postgres`, { max: 1, connectionTimeout: stateDeadlineMs / 1000 })
  try {
    await sql`SELECT 1`
    return undefined
  } catch (error) {
    return `PostgreSQL at ${postgresServer} does not answer (${(error as Error).message})`
  } finally {
    await sql.close().catch(() => undefined)
  }
}

const reachRedis = () =>
  new Promise<string | undefined>((resolve) => {
    const { hostname, port } = new URL(redisUrl)
    const socket = connect(Number(port || 6379), hostname)
    const fail = (why: string) => {
      socket.destroy()
      resolve(`Redis at ${redisUrl} does not answer (${why})`)
    }
    socket.setTimeout(stateDeadlineMs, () => fail("timeout"))
    socket.once("error", (error) => fail(error.message))
    socket.once("connect", () => socket.write("PING\r\n"))
    socket.once("data", (data) => {
      socket.destroy()
      resolve(
        data.toString().startsWith("+PONG") ? undefined : `Redis at ${redisUrl} answered ${data.toString().trim()}`
      )
    })
  })

/**
 * One temporary directory for everything a run of the suite makes (databases, browser profiles,
 * screenshots), removed when the run ends: the test files read it from the environment, which
 * the test fork inherits from here. Likewise the PostgreSQL databases the run creates (each
 * server gets a new one), dropped at the end.
 */
export default async function setup() {
  const root = mkdtempSync(join(tmpdir(), "campaign-api-tests-"))
  process.env["CAMPAIGN_API_TEST_TMP"] = root
  const run = `${Date.now().toString(36)}${process.pid}`
  process.env["CAMPAIGN_API_TEST_RUN"] = run

  // The single binary, built once as `bun run build` builds it: a child started from it is up in
  // a third of the time a child transpiling src/ takes, and the tests exercise what ships (docs/contributing.md,
  // Tests). The tests of the source's own start (its command line after the heap-size restart)
  // still run `bun src/main.ts`.
  const binary = join(root, "campaign-api")
  const built = Bun.spawnSync(["bun", fileURLToPath(new URL("../../deploy/build.ts", import.meta.url)), binary])
  if (built.exitCode !== 0) throw new Error(`building the binary for the child processes failed:\n${built.stderr}`)
  process.env["CAMPAIGN_API_TEST_BINARY"] = binary

  const missing = (await reachPostgres()) ?? (await reachRedis())
  if (missing !== undefined) {
    if (process.env["CI"]) throw new Error(`${missing}: CI must run the PostgreSQL + Redis suites`)
    process.env["CAMPAIGN_API_TEST_SHARED_SKIPPED"] = missing
    console.log(`Skipping the PostgreSQL + Redis suites: ${missing}.`)
  } else {
    process.env["CAMPAIGN_API_TEST_POSTGRES"] = postgresServer
    process.env["CAMPAIGN_API_TEST_REDIS"] = redisUrl
  }

  return async () => {
    rmSync(root, { recursive: true, force: true })
    if (missing !== undefined) return
    const sql = new SQL(`${postgresServer}/postgres`, { max: 1 })
    try {
      const rows = await sql`SELECT datname FROM pg_database WHERE datname LIKE ${`campaign_api_test_${run}_%`}`
      for (const { datname } of rows) await sql.unsafe(`DROP DATABASE IF EXISTS ${datname} WITH (FORCE)`)
    } finally {
      await sql.close()
    }
  }
}
