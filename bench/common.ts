/**
 * What the benchmarks share (`run.ts` on SQLite, `shared.ts` on PostgreSQL + Redis, and the
 * request of `inprocess.ts` and `hostile.ts`): the request they make, how a key is created for it,
 * the first request of a replay run, whether a server is up or ready, a free port, how the binary
 * is built, and wrk's result as `scenario.lua` prints it.
 */
import { SQL } from "bun"
import { Database } from "bun:sqlite"
import { mkdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"

const luaScript = join(import.meta.dir, "scenario.lua")
export const brandId = "0b6f8c1e-4f5a-4c2b-9d7e-1a2b3c4d5e6f"
export const activatePath =
  "/v1/creators/5d2a7c3e-1b4f-4e6a-8c9d-0e1f2a3b4c5d/campaigns/9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d/activate"
/** As in scenario.lua. */
export const activateBody = JSON.stringify({ socialUsername: "@bench", plannedPostAt: "2026-12-01" })

/**
 * Activates once with `idempotencyKey`, so that a replay run then asks for a stored activation
 * again and again; throws unless it got a 200.
 */
export const storeReplayed = async (url: string, apiKey: string, idempotencyKey: string, name: string) => {
  const first = await fetch(`${url}${activatePath}`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${apiKey}`,
      "content-type": "application/json",
      "idempotency-key": idempotencyKey
    },
    body: activateBody
  })
  if (first.status !== 200) {
    throw new Error(`${name}: the first replay request got ${first.status}: ${await first.text()}`)
  }
}

/** Whether whoami answers 200 with `apiKey` within a second: the server is up and knows the key. */
export const whoamiOk = async (url: string, apiKey: string): Promise<boolean> => {
  try {
    const response = await fetch(`${url}/v1/whoami`, {
      headers: { authorization: `Bearer ${apiKey}` },
      signal: AbortSignal.timeout(1000)
    })
    await response.arrayBuffer()
    return response.status === 200
  } catch {
    return false
  }
}

/**
 * Polls `/readyz` every `intervalMs` until it answers 200; throws once `timeoutMs` have passed
 * since `startedAt` (by default: now, and never).
 */
export const waitForReady = async (
  url: string,
  options: { readonly intervalMs: number; readonly startedAt?: number; readonly timeoutMs?: number }
): Promise<void> => {
  const { intervalMs, startedAt = performance.now(), timeoutMs = Infinity } = options
  while ((await fetch(`${url}/readyz`).then((answer) => answer.status, () => 0)) !== 200) {
    if (performance.now() - startedAt > timeoutMs) {
      throw new Error(`${url}/readyz did not answer 200 within ${timeoutMs / 1000} s`)
    }
    await Bun.sleep(intervalMs)
  }
}

/** The service's single binary built into `outfile` as `bun run build` builds it; run by `bun`. */
export const buildArgs = (outfile: string, bun: string) => [bun, join(import.meta.dir, "../deploy/build.ts"), outfile]

/** `bun build --compile --bytecode` of `entry` into `outfile`, as the service is compiled; run by `bun`. */
export const compileArgs = (entry: string, outfile: string, bun: string) => [
  bun,
  "build",
  entry,
  "--compile",
  "--bytecode",
  "--outfile",
  outfile
]

/** A port nothing listens on right now. */
export const freePort = (): number => {
  const listener = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } })
  const port = listener.port
  listener.stop(true)
  return port
}

/** The arguments after the program for `keys create` of the benchmark's key. */
export const keysCreateArgs = [
  "keys",
  "create",
  "--brand",
  brandId,
  "--scopes",
  "campaigns:write",
  "--name",
  "bench",
  "--json"
]

/** The plaintext key from what `keys create --json` printed. */
export const apiKeyOf = (stdout: string): string =>
  (JSON.parse(stdout.trim().split("\n").at(-1)!) as { apiKey: string }).apiKey

/** wrk drives all its connections from one thread (on a core of its own where the bench pins it). */
export const wrkThreads = 1

/** wrk's command line for one run of a scenario against `url`. */
export const wrkArgs = (
  url: string,
  scenario: string,
  apiKey: string,
  keyPrefix: string,
  connections: number,
  seconds: number
) => [
  "wrk",
  `-t${wrkThreads}`,
  `-c${connections}`,
  `-d${seconds}s`,
  "--timeout",
  "5s",
  "-s",
  luaScript,
  url,
  scenario,
  apiKey,
  activatePath,
  keyPrefix
]

/** What a wrk run of `scenario` passes as its key prefix: a read's path goes there instead (scenario.lua). */
export const wrkKeyPrefix = (scenario: string, prefix: string): string =>
  scenario === "get" || scenario === "list"
    ? readPaths[scenario]
    : scenario in pagePaths
    ? pagePaths[scenario as PageScenario]
    : prefix

/** What `scenario.lua` prints on its "BENCH_RESULT {json}" line. */
interface WrkResult {
  readonly requests: number
  readonly durationMicros: number
  readonly bytes: number
  readonly non2xx: number
  readonly statuses: Record<string, number>
  readonly errors: {
    readonly connect: number
    readonly read: number
    readonly write: number
    readonly status: number
    readonly timeout: number
  }
  readonly latencyMicros: {
    readonly mean: number
    readonly p50: number
    readonly p90: number
    readonly p99: number
    readonly max: number
  }
}

/** The JSON after `marker` on a line of a tool's output, or undefined when no line has it. */
export const resultLineOf = <A>(stdout: string, marker: string): A | undefined => {
  const line = stdout.split("\n").find((l) => l.startsWith(`${marker} `))
  return line === undefined ? undefined : JSON.parse(line.slice(marker.length + 1)) as A
}

/** The result line of wrk's output, or undefined when there is none. */
export const wrkResultOf = (stdout: string): WrkResult | undefined => resultLineOf<WrkResult>(stdout, "BENCH_RESULT")

/**
 * Writes a run's record to `bench/results/<kind-><date>.json` (not committed), its date first,
 * and says where.
 */
export const writeResults = (kind: string | undefined, record: Record<string, unknown>): string => {
  const date = new Date().toISOString()
  const directory = join(import.meta.dir, "results")
  mkdirSync(directory, { recursive: true })
  const file = join(directory, `${kind === undefined ? "" : `${kind}-`}${date.replace(/[:.]/g, "-")}.json`)
  writeFileSync(file, `${JSON.stringify({ date, ...record }, null, 2)}\n`)
  console.log(`\nresults written to ${file}`)
  return file
}

/**
 * What the read scenarios read: `seededActivations` records of the bench's brand over
 * `seededCampaigns` campaigns, written straight into a database (`seedReads`), the same in every
 * server's; `get` asks for one of them by id, `list` for a page of 20 of one campaign.
 */
export const seededActivations = 10_000
const seededCampaigns = 20
const seededCampaign = (n: number) => `9a8b7c6d-5e4f-4a3b-9c2d-${String(n).padStart(12, "0")}`
const seededId = (n: number) => `01a00000-0000-7000-8000-${String(n).padStart(12, "0")}`
export const readPaths = {
  get: `/v1/activations/${seededId(seededActivations / 2)}`,
  list: `/v1/activations?limit=20&campaignId=${seededCampaign(3).toUpperCase()}`
} as const

const seededInsert =
  "INSERT INTO activations (id, brand_id, key_id, creator_id, campaign_id, status, social_username, planned_post_at, activated_at)"

/** The seeded records' values: id, brand, key id, creator, campaign, planned post day, activation time. */
const seededRows = () =>
  Array.from({ length: seededActivations }, (_, n) => {
    const at = new Date(Date.UTC(2026, 0, 1) + n * 60_000).toISOString()
    return [
      seededId(n),
      brandId,
      "seeded0000000000",
      `5d2a7c3e-1b4f-4e6a-8c9d-${String(n % 500).padStart(12, "0")}`,
      seededCampaign(n % seededCampaigns),
      n % 4 === 0 ? null : at.slice(0, 10),
      at
    ] as const
  })

/** Writes the seeded records into the SQLite database `file`, migrated already, in one transaction. */
export const seedReads = (file: string) => {
  const db = new Database(file)
  try {
    const insert = db.query(`${seededInsert} VALUES (?, ?, ?, ?, ?, 'ACTIVE', '@seeded', ?, ?)`)
    db.transaction(() => {
      for (const row of seededRows()) insert.run(...row)
    })()
  } finally {
    db.close()
  }
}

/**
 * The same records into the PostgreSQL database at `url`, migrated already, in one transaction
 * (`bench:shared`'s reads). Only the records: the counts the service keeps for analytics are not
 * read by these scenarios.
 */
export const seedReadsPostgres = async (url: string) => {
  const sql = new SQL(url, { max: 1 })
  try {
    const rows = seededRows()
    await sql.begin(async (tx) => {
      for (let from = 0; from < rows.length; from += 1_000) {
        const batch = rows.slice(from, from + 1_000)
        const values = batch.map((_, i) =>
          `($${i * 7 + 1}, $${i * 7 + 2}, $${i * 7 + 3}, $${i * 7 + 4}, $${i * 7 + 5}, 'ACTIVE', '@seeded', $${
            i * 7 + 6
          }, $${i * 7 + 7})`
        )
        await tx.unsafe(`${seededInsert} VALUES ${values.join(", ")}`, batch.flat())
      }
    })
  } finally {
    await sql.close()
  }
}

/**
 * What the page scenarios read: `pagedActivations` activations of one campaign of the bench's
 * brand (`seedPages`), 3,000 creators of 100 each and the creator they ask for, whose 20 are the
 * campaign's oldest, so that a plan that walked the campaign to find that creator's would walk all
 * of it. A page of 20 for each combination of the list's filters, from the top and from the
 * middle of the campaign (`startingAfter`): docs/operators.md, Reliability (indexes and counts).
 */
export const pagedActivations = 300_000
const pagedCampaign = "0c1a2b3c-4d5e-4f60-8a7b-300000000000"
const askedCreator = "7f4c9e5a-3d6b-4a8c-9e1f-000000000020"
const pagedId = (n: number) => `01b00000-0000-7000-8000-${String(n).padStart(12, "0")}`
const pageQueries = {
  all: "",
  creator: `&creatorId=${askedCreator}`,
  campaign: `&campaignId=${pagedCampaign}`,
  both: `&campaignId=${pagedCampaign}&creatorId=${askedCreator}`
} as const
const pageFrom = { "": "", "-after": `&startingAfter=${pagedId(pagedActivations / 2)}` } as const
export type PageScenario = `page-${keyof typeof pageQueries}${keyof typeof pageFrom}`
export const pagePaths = Object.fromEntries(
  Object.entries(pageQueries).flatMap(([filters, query]) =>
    Object.entries(pageFrom).map((
      [from, cursor]
    ) => [`page-${filters}${from}`, `/v1/activations?limit=20${query}${cursor}`])
  )
) as Record<PageScenario, string>

/** Writes the paged campaign's records into the SQLite database `file`, migrated already, in one transaction. */
export const seedPages = (file: string) => {
  const db = new Database(file)
  try {
    const insert = db.query(
      "INSERT INTO activations (id, brand_id, key_id, creator_id, campaign_id, status, social_username, planned_post_at, activated_at) VALUES (?, ?, ?, ?, ?, 'ACTIVE', '@paged', NULL, ?)"
    )
    db.transaction(() => {
      for (let n = 0; n < pagedActivations; n++) {
        const creator = n < 20 ? askedCreator : `6e3b8d4f-2c5a-4f7b-9d0e-${String(n % 3000).padStart(12, "0")}`
        insert.run(
          pagedId(n),
          brandId,
          "seeded0000000000",
          creator,
          pagedCampaign,
          new Date(Date.UTC(2026, 0, 1) + n * 1000).toISOString()
        )
      }
    })()
  } finally {
    db.close()
  }
}
