import { SqlClient } from "@effect/sql"
import { afterAll, beforeAll, describe, expect, it, layer } from "@effect/vitest"
import {
  Cause,
  ConfigProvider,
  Data,
  Deferred,
  Duration,
  Effect,
  Exit,
  Fiber,
  Layer,
  ManagedRuntime,
  Option,
  Ref,
  TestClock,
  TestServices
} from "effect"
import { chmodSync, statSync, writeFileSync } from "node:fs"
import { Activations } from "../src/Activations.ts"
import { ActivationsRepo, type Page, pageStatement } from "../src/Activations/ActivationsRepo.ts"
import { countStatements, pageRows } from "../src/Activations/CampaignCounts.ts"
import { recordJson } from "../src/Activations/Http.ts"
import { ApiKeys } from "../src/ApiKeys.ts"
import { type ApiKeyRow, ApiKeysRepo } from "../src/ApiKeys/ApiKeysRepo.ts"
import { AppConfig } from "../src/Config.ts"
import { type BatchedInsert, insertBatched, noneRefused } from "../src/Database/BatchedInsert.ts"
import { GroupCommit } from "../src/Database/GroupCommit.ts"
import { ReadSql, SqlLive } from "../src/Database/Sql.ts"
import type { Activation } from "../src/Domain/Activation.ts"
import type { BrandId, KeyId } from "../src/Domain/ApiKey.ts"
import { IdempotencyConflict, IdempotencyInProgress } from "../src/Domain/Errors.ts"
import {
  fingerprintOf,
  Idempotency,
  type IdempotentAnswer,
  type IdempotentRequest,
  type StoredResponse
} from "../src/Idempotency.ts"
import { IdempotencyRepo, type IdempotencyRow } from "../src/Idempotency/IdempotencyRepo.ts"
import { Ids } from "../src/Ids.ts"
import { MetricsOff } from "../src/Metrics.ts"
import { backends, postgres, sharedSkipped, withPostgres } from "./support/backends.ts"
import { inspect } from "./support/database.ts"
import { eventually } from "./support/load.ts"
import { type FaultyLink, faultyLink } from "./support/proxy.ts"
import { createKey, tempDatabase } from "./support/server.ts"
import { annotationOf, captureLogs } from "./support/telemetry.ts"
import { makeTestLayer } from "./support/testLayer.ts"

const configAt = (filename: string) =>
  Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["DATABASE_URL", filename]])))

const SqlLiveAt = (filename: string) => SqlLive.pipe(Layer.provide(configAt(filename)))

const brandId = "6d1e2f3a-4b5c-4d6e-8f7a-9b0c1d2e3f4a"
const otherBrandId = "7e2f3a4b-5c6d-4e7f-9a8b-0c1d2e3f4a5b"

let sequence = 0
const unique = (prefix: string) => `${prefix}${String(++sequence).padStart(16 - prefix.length, "0")}`
const uuidOf = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, "0")}`

const permissionsOf = (file: string) => statSync(file).mode & 0o777

const schemaFile = tempDatabase()

layer(SqlLiveAt(schemaFile))("SQLite database file", (it) => {
  it.effect("migrations create the tables", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const tables = yield* sql<{ name: string }>`SELECT name FROM sqlite_master WHERE type = 'table'`
      expect(tables.map((table) => table.name)).toEqual(
        expect.arrayContaining(["api_keys", "activations", "idempotency_keys"])
      )
    }))

  it.effect("only its owner may read or write it or its write-ahead log (mode 0600)", () =>
    Effect.sync(() => {
      for (const file of [schemaFile, `${schemaFile}-wal`, `${schemaFile}-shm`]) {
        expect(permissionsOf(file)).toBe(0o600)
      }
    }))

  it.effect("an existing file readable by others is tightened to 0600 on open", () => {
    const existingFile = tempDatabase()
    return Effect.gen(function*() {
      writeFileSync(existingFile, "")
      chmodSync(existingFile, 0o644)
      yield* Effect.provide(SqlClient.SqlClient, SqlLiveAt(existingFile))
      expect(permissionsOf(existingFile)).toBe(0o600)
    })
  })
})

const keysFile = tempDatabase()

/** A key as stored, with a new id: never rolled, no limit of its own. */
const keyRowOf = (overrides: Partial<ApiKeyRow> = {}): ApiKeyRow => ({
  keyId: unique("key"),
  brandId,
  name: null,
  scopes: ["campaigns:write", "analytics:read"],
  secretSha256: "ab".repeat(32),
  createdAt: 1_700_000_000_000,
  expiresAt: null,
  revokedAt: null,
  previousSecretSha256: null,
  previousSecretEndsAt: null,
  rateLimit: null,
  ...overrides
})

const find = (keyId: string) =>
  Effect.map(Effect.flatMap(ApiKeysRepo, (repo) => repo.list), (rows) => rows.find((row) => row.keyId === keyId))

layer(ApiKeysRepo.Live.pipe(Layer.provide(SqlLiveAt(keysFile)), Layer.provide(configAt(keysFile))))(
  "ApiKeysRepo",
  (it) => {
    const keyRow = keyRowOf

    it.effect("insert then list returns every field as stored", () =>
      Effect.gen(function*() {
        const repo = yield* ApiKeysRepo
        const named = keyRow({ name: "reporting", expiresAt: 1_700_086_400_000 })
        const withoutScopes = keyRow({ scopes: [] })
        yield* repo.insert(named)
        yield* repo.insert(withoutScopes)
        expect(yield* find(named.keyId)).toEqual(named)
        expect(yield* find(withoutScopes.keyId)).toEqual(withoutScopes)
      }))

    it.effect("list returns the keys oldest first", () =>
      Effect.gen(function*() {
        const repo = yield* ApiKeysRepo
        const newer = keyRow({ createdAt: 1_800_000_000_001 })
        const older = keyRow({ createdAt: 1_800_000_000_000 })
        yield* repo.insert(newer)
        yield* repo.insert(older)
        const listed = (yield* repo.list).filter((row) => row.keyId === newer.keyId || row.keyId === older.keyId)
        expect(listed).toEqual([older, newer])
      }))

    it.effect("revoke marks the key once; again or for an unknown key it reports false", () =>
      Effect.gen(function*() {
        const repo = yield* ApiKeysRepo
        const row = keyRow()
        yield* repo.insert(row)
        expect(yield* repo.revoke(row.keyId, 1_750_000_000_000)).toBe(true)
        expect(yield* repo.revoke(row.keyId, 1_760_000_000_000)).toBe(false)
        expect(yield* find(row.keyId)).toEqual({ ...row, revokedAt: 1_750_000_000_000 })
        expect(yield* repo.revoke(unique("missing"), 1_750_000_000_000)).toBe(false)
      }))

    it.effect("the generation moves with every change to the keys, by this connection or another process's", () =>
      Effect.gen(function*() {
        const repo = yield* ApiKeysRepo
        const row = keyRow()
        const before = yield* repo.generation
        expect(yield* repo.generation).toBe(before)
        yield* repo.insert(row)
        const inserted = yield* repo.generation
        expect(inserted).toBeGreaterThan(before)
        yield* repo.revoke(row.keyId, 1_750_000_000_000)
        const revoked = yield* repo.generation
        expect(revoked).toBeGreaterThan(inserted)
        // Another connection, as the key command line is: its commit is seen at once.
        inspect(keysFile, (db) => db.run("UPDATE api_keys SET name = 'renamed' WHERE key_id = ?", [row.keyId]))
        expect(yield* repo.generation).toBeGreaterThan(revoked)
      }))
  }
)

/** The key lifecycle's statements on each database: SQLite always, PostgreSQL where it runs. */
const lifecycleDatabases: ReadonlyArray<readonly [string, () => Promise<string>]> = [
  ["SQLite", async () => tempDatabase()],
  ...(sharedSkipped === undefined ? [["PostgreSQL", postgres.database] as const] : [])
]

describe.each(lifecycleDatabases)("ApiKeysRepo's key lifecycle on %s", (_, database) => {
  const repoLayer = Layer.unwrapEffect(
    Effect.map(
      Effect.promise(database),
      (url) => ApiKeysRepo.Live.pipe(Layer.provideMerge(SqlLiveAt(url)), Layer.provide(configAt(url)))
    )
  )
  const keyRow = (overrides: Partial<ApiKeyRow> = {}) =>
    keyRowOf({ name: "nightly export", scopes: ["campaigns:read"], ...overrides })
  // The counter as committed now, which every instance's generation follows (on PostgreSQL by its
  // poll, which these tests' clock never runs).
  const committed = Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      Effect.map(
        Effect.orDie(sql<{ generation: number | string }>`SELECT generation FROM api_keys_generation`),
        (rows) => Number(rows[0]!.generation)
      )
  )

  layer(repoLayer)((it) => {
    it.effect("roll keeps the current secret as the previous one, until the grace or the key's expiry, the earlier", () =>
      Effect.gen(function*() {
        const repo = yield* ApiKeysRepo
        const row = keyRow({ rateLimit: { max: 600, windowSeconds: 60 } })
        yield* repo.insert(row)
        expect(yield* repo.roll(row.keyId, "cd".repeat(32), 1_800_000_000_000, 1_750_000_000_000)).toBe(
          1_800_000_000_000
        )
        expect(yield* find(row.keyId)).toEqual({
          ...row,
          secretSha256: "cd".repeat(32),
          previousSecretSha256: "ab".repeat(32),
          previousSecretEndsAt: 1_800_000_000_000
        })
        // Again: the oldest secret is gone.
        expect(yield* repo.roll(row.keyId, "ef".repeat(32), 1_810_000_000_000, 1_750_000_000_000)).toBe(
          1_810_000_000_000
        )
        expect(yield* find(row.keyId)).toMatchObject({
          secretSha256: "ef".repeat(32),
          previousSecretSha256: "cd".repeat(32)
        })

        const trial = keyRow({ expiresAt: 1_760_000_000_000 })
        yield* repo.insert(trial)
        expect(yield* repo.roll(trial.keyId, "cd".repeat(32), 1_800_000_000_000, 1_750_000_000_000)).toBe(
          1_760_000_000_000
        )
      }))

    it.effect("roll and update change only an active key: not a revoked one, an expired one or an unknown id", () =>
      Effect.gen(function*() {
        const repo = yield* ApiKeysRepo
        const revoked = keyRow()
        const expired = keyRow({ expiresAt: 1_750_000_000_000 })
        yield* repo.insert(revoked)
        yield* repo.insert(expired)
        yield* repo.revoke(revoked.keyId, 1_740_000_000_000)
        for (const keyId of [revoked.keyId, expired.keyId, unique("missing")]) {
          expect(yield* repo.roll(keyId, "cd".repeat(32), 1_800_000_000_000, 1_750_000_000_000)).toBeUndefined()
          expect(yield* repo.update(keyId, { name: "changed" }, 1_750_000_000_000)).toBeUndefined()
        }
        expect(yield* find(revoked.keyId)).toEqual({ ...revoked, revokedAt: 1_740_000_000_000 })
        expect(yield* find(expired.keyId)).toEqual(expired)
      }))

    it.effect("update changes what it is given and nothing else; a limit goes back to the server's with null", () =>
      Effect.gen(function*() {
        const repo = yield* ApiKeysRepo
        const row = keyRow()
        yield* repo.insert(row)
        const before = yield* committed
        expect(yield* repo.update(row.keyId, { rateLimit: { max: 5, windowSeconds: 60 } }, 0)).toEqual(
          yield* find(row.keyId)
        )
        expect(yield* find(row.keyId)).toEqual({ ...row, rateLimit: { max: 5, windowSeconds: 60 } })
        expect(yield* repo.update(row.keyId, { scopes: ["campaigns:write", "analytics:read"], name: null }, 0))
          .toBeDefined()
        expect(yield* find(row.keyId)).toEqual({
          ...row,
          scopes: ["campaigns:write", "analytics:read"],
          name: null,
          rateLimit: { max: 5, windowSeconds: 60 }
        })
        expect(yield* repo.update(row.keyId, { rateLimit: null }, 0)).toBeDefined()
        expect((yield* find(row.keyId))?.rateLimit).toBeNull()
        // Every instance learns of it through the generation (docs/operators.md, Running several instances).
        expect(yield* committed).toBeGreaterThan(before)
      }))

    it.effect("update sets and clears an expiry; one before a roll's grace ends ends the previous secret then too", () =>
      Effect.gen(function*() {
        const repo = yield* ApiKeysRepo
        const row = keyRow()
        yield* repo.insert(row)
        const now = 1_750_000_000_000
        expect(yield* repo.roll(row.keyId, "cd".repeat(32), now + 7 * 86_400_000, now)).toBe(now + 7 * 86_400_000)
        // Later than the grace: the grace stays.
        expect(yield* repo.update(row.keyId, { expiresAt: now + 30 * 86_400_000 }, now)).toMatchObject({
          expiresAt: now + 30 * 86_400_000,
          previousSecretEndsAt: now + 7 * 86_400_000
        })
        // Earlier than the grace: both secrets stop at the expiry.
        const cut = yield* repo.update(row.keyId, { expiresAt: now + 2 * 86_400_000 }, now)
        expect(cut).toMatchObject({ expiresAt: now + 2 * 86_400_000, previousSecretEndsAt: now + 2 * 86_400_000 })
        expect(yield* find(row.keyId)).toEqual(cut)
        // No expiry: a grace cut short is not lengthened again.
        expect(yield* repo.update(row.keyId, { expiresAt: null }, now)).toMatchObject({
          expiresAt: null,
          previousSecretEndsAt: now + 2 * 86_400_000
        })
      }))

    it.effect("records last uses by secret in batches, the latest time winning whichever write comes last, without moving the keys' generation", () =>
      Effect.gen(function*() {
        const repo = yield* ApiKeysRepo
        const [a, b] = [keyRow(), keyRow()]
        yield* repo.insert(a)
        yield* repo.insert(b)
        const before = yield* committed
        const use = (key: ApiKeyRow, secretSha256: string, at: number) => ({ keyId: key.keyId, secretSha256, at })
        yield* repo.recordUsage([
          use(a, "ab".repeat(32), 1_750_000_060_000),
          use(b, "ab".repeat(32), 1_750_000_000_000)
        ])
        // Another instance's older note, written after: kept out. Another secret of a: a row of its own.
        yield* repo.recordUsage([
          use(a, "ab".repeat(32), 1_750_000_000_000),
          use(b, "ab".repeat(32), 1_750_000_120_000),
          use(a, "cd".repeat(32), 1_740_000_000_000)
        ])
        const lastUsed = (yield* repo.lastUsed).filter((use) => use.keyId === a.keyId || use.keyId === b.keyId)
        expect(lastUsed).toHaveLength(3)
        expect(lastUsed).toEqual(expect.arrayContaining([
          use(a, "ab".repeat(32), 1_750_000_060_000),
          use(a, "cd".repeat(32), 1_740_000_000_000),
          use(b, "ab".repeat(32), 1_750_000_120_000)
        ]))
        expect(yield* committed).toBe(before)
        // Two instances writing the same keys at once, their notes in opposite orders: on
        // PostgreSQL, rows locked in opposite orders would deadlock one of the two writes.
        const shared = Array.from(
          { length: 400 },
          (_, i) => ({ keyId: unique("both"), secretSha256: "ab".repeat(32), at: 1_750_000_000_000 + i })
        )
        for (let round = 0; round < 5; round++) {
          yield* Effect.all([repo.recordUsage(shared), repo.recordUsage([...shared].reverse())], { concurrency: 2 })
        }
        // More than one statement's worth at once.
        const many = Array.from(
          { length: 1_201 },
          (_, i) => ({ keyId: unique("many"), secretSha256: "ef".repeat(32), at: 1_750_000_000_000 + i })
        )
        yield* repo.recordUsage(many)
        const after = new Map((yield* repo.lastUsed).map((use) => [use.keyId, use.at]))
        expect(many.every((use) => after.get(use.keyId) === use.at)).toBe(true)
      }))
  })
})

/**
 * The key service on the live repository on PostgreSQL, through a link the test can slow and
 * whose traffic it counts; on TestClock, so the generation's poll, and a refused key's read
 * after the one before it, run only when a test moves the clock past them (docs/operators.md, Running
 * several instances).
 */
describe.skipIf(sharedSkipped !== undefined)("ApiKeys on PostgreSQL", () => {
  let database: string
  let link: FaultyLink
  beforeAll(async () => {
    database = await postgres.database()
    link = await faultyLink(database)
  })
  afterAll(() => link?.close())

  const keysLayer = () =>
    ApiKeys.Live.pipe(
      Layer.provide(ApiKeysRepo.Live),
      Layer.provide(SqlLiveAt(link.url)),
      Layer.provide(Ids.Live),
      Layer.provide(configAt(link.url))
    )
  const madeUp = () => `cak_${crypto.randomUUID().replace(/-/g, "").slice(0, 16)}_${"0".repeat(64)}`
  const knownKey = Effect.flatMap(
    ApiKeys,
    (keys) =>
      keys.create({
        brandId: brandId as BrandId,
        scopes: ["campaigns:read"],
        name: Option.none(),
        expiresIn: Option.none()
      })
  )

  it.effect("refuses 2,000 made-up key ids at once in one statement per 50 ms for all of them, however many", () =>
    Effect.gen(function*() {
      const keys = yield* ApiKeys
      const known = yield* knownKey
      // Loads the keys: the one read a generation costs.
      expect((yield* keys.authenticate(known.apiKey)).identity.keyId).toBe(known.info.keyId)
      const before = link.statements()
      const refusing = yield* Effect.fork(Effect.forEach(
        Array.from({ length: 2_000 }, madeUp),
        (token) => Effect.flip(keys.authenticate(token)),
        { concurrency: "unbounded" }
      ))
      // The clock moves 10 ms at a time, each step a few real milliseconds for the database to answer.
      let elapsedMs = 0
      while (refusing.unsafePoll() === null) {
        yield* TestClock.adjust(Duration.millis(10))
        elapsedMs += 10
        yield* TestServices.provideLive(Effect.sleep(Duration.millis(5)))
      }
      const refusals = yield* Fiber.join(refusing)
      expect(new Set(refusals.map((refusal) => refusal.reason))).toEqual(new Set(["unknown key"]))
      // Short of the next poll: every statement is a read of refused ids, at most one per 50 ms.
      expect(elapsedMs).toBeLessThan(200)
      expect(link.statements() - before).toBeGreaterThan(0)
      expect(link.statements() - before).toBeLessThanOrEqual(1 + Math.floor(elapsedMs / 50))
    }).pipe(Effect.provide(keysLayer())))

  it.effect("a database slower than the trusted second: a made-up key id is still refused (401), never left to time out (503)", () =>
    Effect.gen(function*() {
      const keys = yield* ApiKeys
      const known = yield* knownKey
      expect((yield* keys.authenticate(known.apiKey)).identity.keyId).toBe(known.info.keyId)
      const refused = yield* Effect.gen(function*() {
        link.slow(2_000)
        // As between any two requests, some time has passed since the last reading.
        yield* TestClock.adjust(Duration.millis(1))
        const refusing = yield* Effect.fork(keys.authenticate(madeUp()))
        // The database does not answer within the second the last reading is trusted for.
        yield* TestClock.adjust(Duration.seconds(1))
        // Refused, not dead: a defect is the 503 of a database that did not answer.
        return yield* Effect.flip(Fiber.join(refusing))
      }).pipe(Effect.ensuring(Effect.sync(() => link.slow(0))))
      expect(refused.reason).toBe("unknown key")
    }).pipe(Effect.provide(keysLayer())))

  it.effect("a key created by another process is accepted at its first request, the clock standing still: no poll needed", () =>
    Effect.gen(function*() {
      const keys = yield* ApiKeys
      const known = yield* knownKey
      expect((yield* keys.authenticate(known.apiKey)).identity.keyId).toBe(known.info.keyId)
      const created = yield* Effect.promise(() => createKey(database, { scopes: ["campaigns:read"] }))
      expect((yield* keys.authenticate(created.apiKey)).identity.keyId).toBe(created.keyId)
    }).pipe(Effect.provide(keysLayer())))
})

const owner = { brandId, keyId: "k3y1d0000000000a" }

const activationRecord = (overrides: Partial<Activation> = {}): Activation => ({
  id: uuidOf(++sequence),
  campaignId: "1C2D3E4F-5A6B-4C7D-8E9F-0A1B2C3D4E5F",
  creatorId: "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d",
  status: "ACTIVE",
  socialUsername: "@jane.doe",
  plannedPostAt: "2026-06-01",
  activatedAt: "2026-05-04T09:30:15.250Z",
  ...overrides
})

layer(ActivationsRepo.Live.pipe(Layer.provideMerge(SqlLiveAt(tempDatabase()))))("ActivationsRepo", (it) => {
  it.effect("insert then findById round-trips every field", () =>
    Effect.gen(function*() {
      const repo = yield* ActivationsRepo
      const planned = activationRecord()
      const unplanned = activationRecord({ plannedPostAt: null, socialUsername: "@ünïcode_名前" })
      yield* repo.insert(planned, owner)
      yield* repo.insert(unplanned, owner)
      expect(yield* repo.findById(brandId, planned.id)).toEqual(Option.some(planned))
      expect(yield* repo.findById(brandId, unplanned.id)).toEqual(Option.some(unplanned))
      // Another brand's record is not there for it: the brand is part of every read.
      expect(yield* repo.findById(otherBrandId, planned.id)).toEqual(Option.none())
      expect(yield* repo.findById(brandId, planned.id.toUpperCase())).toEqual(Option.some(planned))
    }))

  it.effect("insert records the brand and key that made the activation", () =>
    Effect.gen(function*() {
      const repo = yield* ActivationsRepo
      const sql = yield* SqlClient.SqlClient
      const activation = activationRecord()
      yield* repo.insert(activation, owner)
      const rows = yield* sql`SELECT brand_id AS "brandId", key_id AS "keyId"
                              FROM activations WHERE id = ${activation.id}`
      expect(rows).toEqual([owner])
    }))

  it.effect("findById of an unknown id is none", () =>
    Effect.gen(function*() {
      const repo = yield* ActivationsRepo
      expect(yield* repo.findById(brandId, uuidOf(++sequence))).toEqual(Option.none())
    }))
})

/** What a page's plan does, in the terms of either database's EXPLAIN. */
interface PagePlan {
  /** The columns of the index whose range the plan searches, in the index's order. */
  readonly index: ReadonlyArray<string>
  /** How many of the statement's conditions that search keys on. */
  readonly keyedOn: number
  /** Every other step: a scan, a sort, a condition checked row by row. */
  readonly otherSteps: ReadonlyArray<string>
}

/** An index's columns from its definition, with PostgreSQL's casts of a column to text taken out. */
const indexColumns = (definition: string) =>
  definition.slice(definition.indexOf("(") + 1, definition.lastIndexOf(")")).replace(/\((\w+)\)::text/g, "$1").split(
    /,\s*/
  )

/** SQLite's EXPLAIN QUERY PLAN: a search lists the conditions its index keys on, and nothing else of them. */
const sqlitePlan = (sql: SqlClient.SqlClient, [text, params]: readonly [string, ReadonlyArray<unknown>]) =>
  Effect.gen(function*() {
    const steps = yield* sql.unsafe<{ detail: string }>(`EXPLAIN QUERY PLAN ${text}`, params)
    const searches = steps.flatMap(({ detail }) => {
      const search = /^SEARCH activations USING (?:COVERING )?INDEX (\S+) \((.+)\)$/.exec(detail)
      return search === null ? [] : [{ name: search[1]!, keys: search[2]!.split(" AND ") }]
    })
    const [search] = searches
    const definition = search === undefined
      ? []
      : yield* sql<{ sql: string }>`SELECT sql FROM sqlite_schema WHERE type = 'index' AND name = ${search.name}`
    return {
      index: definition.length === 0 ? [] : indexColumns(definition[0]!.sql),
      keyedOn: search?.keys.length ?? 0,
      otherSteps: steps.map(({ detail }) => detail).filter((detail) => !detail.startsWith("SEARCH activations USING"))
    }
  })

interface PgPlanNode {
  readonly "Node Type": string
  readonly "Index Name"?: string
  readonly "Index Cond"?: string
  readonly Filter?: string
  readonly Plans?: ReadonlyArray<PgPlanNode>
}

/**
 * PostgreSQL's EXPLAIN, as the pool runs the statement (an unnamed statement: planned with its
 * values). An empty table is cheapest read whole, so sequential scans are off: the planner chooses
 * among the indexes as it does once the table is large.
 */
const pgPlan = (sql: SqlClient.SqlClient, [text, params]: readonly [string, ReadonlyArray<unknown>]) =>
  Effect.gen(function*() {
    const [explained] = yield* sql.withTransaction(
      Effect.zipRight(
        sql`SET LOCAL enable_seqscan = off`,
        sql.unsafe<{ "QUERY PLAN": ReadonlyArray<{ Plan: PgPlanNode }> }>(`EXPLAIN (FORMAT JSON) ${text}`, params)
      )
    )
    const nodes: Array<PgPlanNode> = []
    const walk = (node: PgPlanNode): void => {
      nodes.push(node)
      node.Plans?.forEach(walk)
    }
    walk(explained!["QUERY PLAN"][0]!.Plan)
    const search = nodes.find((node) => node["Node Type"] === "Index Scan" || node["Node Type"] === "Index Only Scan")
    const definition = search === undefined
      ? []
      : yield* sql<{ indexdef: string }>`SELECT indexdef FROM pg_indexes WHERE indexname = ${search["Index Name"]!}`
    return {
      index: definition.length === 0 ? [] : indexColumns(definition[0]!.indexdef),
      keyedOn: search?.["Index Cond"]?.split(" AND ").length ?? 0,
      otherSteps: nodes.flatMap((node) => [
        ...(node === search || node["Node Type"] === "Limit" ? [] : [node["Node Type"]]),
        ...(node.Filter === undefined ? [] : [`Filter: ${node.Filter}`])
      ])
    }
  })

describe.each(backends)("ActivationsRepo's pages on $name", (backend) => {
  it("reads each combination of filters, with and without a cursor, from the range of an index that begins with the brand and every filter, in id order: no scan, no row checked after it, no sort", async () => {
    const database = await backend.database()
    const filtered = { creatorId: "lower(creator_id)", campaignId: "lower(campaign_id)" }
    const plans = await Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const statementOf = pageStatement(sql)
      const planOf = sql.onDialectOrElse({ pg: () => pgPlan, orElse: () => sqlitePlan })
      const plans: Array<{ readonly page: Page; readonly plan: PagePlan }> = []
      for (const creatorId of [undefined, uuidOf(++sequence)]) {
        for (const campaignId of [undefined, crypto.randomUUID().toUpperCase()]) {
          for (const below of [undefined, uuidOf(++sequence)]) {
            const page = { creatorId, campaignId, below, limit: 21 }
            plans.push({ page, plan: yield* planOf(sql, statementOf(brandId, page).compile()) })
          }
        }
      }
      return plans
    }).pipe(Effect.provide(SqlLiveAt(database)), Effect.runPromise)
    expect(plans).toHaveLength(8)
    for (const { page, plan } of plans) {
      const filters = (["creatorId", "campaignId"] as const).filter((name) => page[name] !== undefined).map((name) =>
        filtered[name]
      )
      const leading = plan.index.slice(0, filters.length + 2)
      // The brand, then the filters in whichever order the index has them, then the id it pages by.
      expect({
        page,
        brand: leading[0],
        filters: leading.slice(1, -1).sort(),
        then: leading.at(-1),
        keyedOn: plan.keyedOn,
        otherSteps: plan.otherSteps
      })
        .toEqual({
          page,
          brand: "brand_id",
          filters: filters.sort(),
          then: "id",
          keyedOn: filters.length + 2,
          otherSteps: []
        })
    }
  })
})

const analyticsDays = ["2026-03-01", "2026-03-02", "2026-03-03", "2026-03-04", "2026-03-05"]

/** A repeatable sequence of choices below `n`, so that a failing order can be run again. */
const choices = (seed: number) => (n: number) => {
  seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31
  return seed % n
}

describe.each(backends)("ActivationsRepo's counts on $name", (backend) => {
  it("counts every creator active in a range once, whatever order its days are written in, one or several to a statement, and several writers at once", async () => {
    const database = await backend.database()
    const choose = choices(2026)
    const rounds = await Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const repo = yield* ActivationsRepo
      const rounds: Array<{ readonly counted: Array<number>; readonly expected: Array<number> }> = []
      for (let round = 0; round < 6; round++) {
        const campaignKey = crypto.randomUUID()
        // Statements of one to five creator-days, in the order the repository writes them (by key).
        const statements = Array.from({ length: 40 }, () =>
          [
            ...new Map(
              Array.from({ length: 1 + choose(5) }, () => ({
                brand_id: brandId,
                campaign_key: campaignKey,
                day: analyticsDays[choose(analyticsDays.length)]!,
                creator_key: `creator-${choose(12)}`
              })).map((row) => [`${row.day} ${row.creator_key}`, row])
            )
          ].sort(([a], [b]) => (a < b ? -1 : 1)).map(([, row]) => row))
        // Four transactions at once, as several instances write (one at a time on SQLite's one connection).
        yield* Effect.forEach(
          statements,
          (rows) =>
            sql.withTransaction(sql`INSERT INTO campaign_creator_days ${sql.insert(rows)} ON CONFLICT DO NOTHING`),
          { concurrency: 4, discard: true }
        )
        const written = statements.flat()
        const counted: Array<number> = []
        const expected: Array<number> = []
        for (const from of [undefined, ...analyticsDays]) {
          for (const to of [undefined, ...analyticsDays]) {
            if (from !== undefined && to !== undefined && from > to) continue
            counted.push((yield* repo.counts(brandId, campaignKey, from, to)).creators)
            expected.push(
              new Set(
                written.filter(({ day }) => (from === undefined || day >= from) && (to === undefined || day <= to)).map(
                  (
                    row
                  ) => row.creator_key
                )
              ).size
            )
          }
        }
        rounds.push({ counted, expected })
      }
      return rounds
    }).pipe(Effect.provide(ActivationsRepo.Live.pipe(Layer.provideMerge(SqlLiveAt(database)))), Effect.runPromise)
    for (const { counted, expected } of rounds) expect(counted).toEqual(expected)
  })

  it("reads a campaign's numbers from the range of its counts' primary keys, page by page in key order: no scan, no sort, no temporary table", async () => {
    const database = await backend.database()
    const plans = await Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const statements = countStatements(sql)
      const campaignKey = crypto.randomUUID()
      const explain = (statement: { readonly compile: () => readonly [string, ReadonlyArray<unknown>] }) =>
        sql.onDialectOrElse({
          pg: () =>
            Effect.map(
              sql.withTransaction(
                Effect.zipRight(
                  sql`SET LOCAL enable_seqscan = off`,
                  sql.unsafe<{ "QUERY PLAN": ReadonlyArray<{ Plan: PgPlanNode }> }>(
                    `EXPLAIN (FORMAT JSON) ${statement.compile()[0]}`,
                    statement.compile()[1]
                  )
                )
              ),
              ([explained]) => {
                const steps: Array<string> = []
                const walk = (node: PgPlanNode): void => {
                  steps.push(`${node["Node Type"]}${node["Index Name"] === undefined ? "" : ` ${node["Index Name"]}`}`)
                  node.Plans?.forEach(walk)
                }
                walk(explained!["QUERY PLAN"][0]!.Plan)
                return steps.filter((step) => step !== "Limit")
              }
            ),
          orElse: () =>
            Effect.map(
              sql.unsafe<{ detail: string }>(`EXPLAIN QUERY PLAN ${statement.compile()[0]}`, statement.compile()[1]),
              (steps) => steps.map(({ detail }) => detail)
            )
        })
      return [
        yield* explain(statements.daysFrom(brandId, campaignKey, "2026-03-01", "2026-03-05")),
        yield* explain(statements.daysAfter(brandId, campaignKey, "2026-03-02", "2026-03-09", "2026-03-05")),
        yield* explain(statements.firstDaysFrom(brandId, campaignKey, "2026-03-01", "2026-03-05")),
        yield* explain(statements.firstDaysAfter(brandId, campaignKey, "2026-03-02", "", "2026-03-01", "2026-03-05"))
      ]
    }).pipe(Effect.provide(SqlLiveAt(database)), Effect.runPromise)
    if (backend.name === "SQLite") {
      // The primary key of a table with a rowid is its first automatic index; each search keys on the
      // campaign and both ends of its range, the page's start included.
      const search = (table: string, from: string) => [
        `SEARCH ${table} USING INDEX sqlite_autoindex_${table}_1 (brand_id=? AND campaign_key=? AND ${from} AND day<?)`
      ]
      expect(plans).toEqual([
        search("campaign_days", "day>?"),
        search("campaign_days", "(day,planned_day)>(?,?)"),
        search("campaign_day_pairs", "day>?"),
        search("campaign_day_pairs", "(day,previous_day)>(?,?)")
      ])
    } else {
      const search = (table: string) => [expect.stringMatching(new RegExp(`^Index (Only )?Scan ${table}_pkey$`))]
      expect(plans).toEqual([
        search("campaign_days"),
        search("campaign_days"),
        search("campaign_day_pairs"),
        search("campaign_day_pairs")
      ])
    }
  })
})

layer(ActivationsRepo.Live.pipe(Layer.provideMerge(SqlLiveAt(tempDatabase()))))(
  "ActivationsRepo's counts on SQLite",
  (it) => {
    it.effect("a campaign's numbers longer than a page hand the event loop back between pages, so other requests run meanwhile", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const repo = yield* ActivationsRepo
        const campaignKey = crypto.randomUUID()
        const pages = 4
        // One row per pair of activated day and planned day: `pages` pages of them.
        const rows = Array.from({ length: pages * pageRows(sql) - 1 }, (_, i) => ({
          brand_id: brandId,
          campaign_key: campaignKey,
          day: analyticsDays[i % analyticsDays.length]!,
          planned_day: new Date(Date.UTC(2030, 0, 1 + Math.floor(i / analyticsDays.length))).toISOString().slice(0, 10),
          activations: 1
        }))
        yield* sql`INSERT INTO campaign_days ${sql.insert(rows)}`
        let turns = 0
        let reading = true
        const tick = () => {
          turns++
          if (reading) setImmediate(tick)
        }
        setImmediate(tick)
        const counts = yield* Effect.ensuring(
          repo.counts(brandId, campaignKey, undefined, undefined),
          Effect.sync(() => void (reading = false))
        )
        expect(counts.byDay.reduce((sum, day) => sum + day.activations, 0)).toBe(rows.length)
        expect(turns).toBeGreaterThanOrEqual(pages - 1)
      }))
  }
)

layer(SqlLiveAt(tempDatabase()))("ReadSql on SQLite", (it) => {
  it.effect("runs a prepared statement with each call's values, whether its text is kept or built for each call", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const read = yield* ReadSql
      yield* sql`CREATE TABLE pairs (a TEXT NOT NULL, n INTEGER NOT NULL)`
      yield* sql`INSERT INTO pairs VALUES ('x', 1), ('y', 2), ('x', 3)`
      let built = 0
      const kept = read.prepare((a: string, n: number) => {
        built++
        return sql<{ n: number }>`SELECT n FROM pairs WHERE a = ${a} AND n >= ${n} ORDER BY n`
      })
      // One value in two places, or the values in another order: the stand-ins do not come back in
      // their places, so each call builds its statement.
      const twice = read.prepare((a: string) =>
        sql<{ n: number }>`SELECT n FROM pairs WHERE a = ${a} OR (a = ${a} AND n < 0) ORDER BY n`
      )
      const swapped = read.prepare((n: number, a: string) =>
        sql<{ n: number }>`SELECT n FROM pairs WHERE a = ${a} AND n >= ${n} ORDER BY n`
      )
      expect(yield* kept("x", 2)).toEqual([{ n: 3 }])
      expect(yield* kept("y", 0)).toEqual([{ n: 2 }])
      // Built once, with the stand-ins, and never again.
      expect(built).toBe(1)
      expect(yield* twice("x")).toEqual([{ n: 1 }, { n: 3 }])
      expect(yield* twice("y")).toEqual([{ n: 2 }])
      expect(yield* swapped(2, "x")).toEqual([{ n: 3 }])
    }))
})

const idempotencyEntry = (overrides: Partial<IdempotencyRow> = {}): IdempotencyRow => ({
  brandId,
  key: unique("order-"),
  fingerprint: "f".repeat(64),
  resourceId: uuidOf(1),
  statusCode: 200,
  responseBody: "{\"ok\":true}",
  createdAt: 1_000_000,
  expiresAt: 2_000_000,
  ...overrides
})

const IdempotencyRepoOnFreshFile = () => IdempotencyRepo.Live.pipe(Layer.provide(SqlLiveAt(tempDatabase())))

layer(IdempotencyRepoOnFreshFile())("IdempotencyRepo", (it) => {
  it.effect("insert then find returns the entry", () =>
    Effect.gen(function*() {
      const repo = yield* IdempotencyRepo
      const entry = idempotencyEntry({ resourceId: null, statusCode: 201 })
      expect(yield* repo.insert(entry)).toBe(true)
      expect(yield* repo.find(entry.brandId, entry.key, 1_500_000)).toEqual(Option.some(entry))
    }))

  it.effect("a second insert of the same brand and key reports false and keeps the first", () =>
    Effect.gen(function*() {
      const repo = yield* IdempotencyRepo
      const first = idempotencyEntry()
      yield* repo.insert(first)
      expect(yield* repo.insert({ ...first, fingerprint: "e".repeat(64), responseBody: "{}" })).toBe(false)
      expect(yield* repo.find(first.brandId, first.key, 1_500_000)).toEqual(Option.some(first))
    }))

  it.effect("the same key under another brand is independent", () =>
    Effect.gen(function*() {
      const repo = yield* IdempotencyRepo
      const ours = idempotencyEntry()
      const theirs = { ...ours, brandId: otherBrandId, fingerprint: "e".repeat(64) }
      expect(yield* repo.insert(ours)).toBe(true)
      expect(yield* repo.insert(theirs)).toBe(true)
      expect(yield* repo.find(brandId, ours.key, 1_500_000)).toEqual(Option.some(ours))
      expect(yield* repo.find(otherBrandId, ours.key, 1_500_000)).toEqual(Option.some(theirs))
    }))

  it.effect("find after expiry returns none, and an insert replaces the expired entry", () =>
    Effect.gen(function*() {
      const repo = yield* IdempotencyRepo
      const entry = idempotencyEntry()
      yield* repo.insert(entry)
      expect(Option.isSome(yield* repo.find(entry.brandId, entry.key, entry.expiresAt - 1))).toBe(true)
      expect(yield* repo.find(entry.brandId, entry.key, entry.expiresAt)).toEqual(Option.none())
      const next = { ...entry, fingerprint: "e".repeat(64), createdAt: entry.expiresAt, expiresAt: 4_000_000 }
      expect(yield* repo.insert(next)).toBe(true)
      expect(yield* repo.find(entry.brandId, entry.key, entry.expiresAt)).toEqual(Option.some(next))
    }))

  it.effect("an insert over a live entry reports false and changes nothing, up to the last millisecond", () =>
    Effect.gen(function*() {
      const repo = yield* IdempotencyRepo
      const entry = idempotencyEntry()
      yield* repo.insert(entry)
      const early = { ...entry, fingerprint: "e".repeat(64), createdAt: entry.expiresAt - 1, expiresAt: 9_000_000 }
      expect(yield* repo.insert(early)).toBe(false)
      expect(yield* repo.find(entry.brandId, entry.key, entry.expiresAt - 1)).toEqual(Option.some(entry))
    }))
})

layer(IdempotencyRepoOnFreshFile())("IdempotencyRepo.purgeExpired", (it) => {
  it.effect("deletes only the expired entries and counts them", () =>
    Effect.gen(function*() {
      const repo = yield* IdempotencyRepo
      const expired = [idempotencyEntry({ expiresAt: 2_000_000 }), idempotencyEntry({ expiresAt: 2_500_000 })]
      const live = idempotencyEntry({ expiresAt: 2_500_001 })
      yield* Effect.forEach([...expired, live], repo.insert)
      expect(yield* repo.purgeExpired(2_500_000, 100)).toBe(2)
      expect(yield* repo.purgeExpired(2_500_000, 100)).toBe(0)
      expect(yield* repo.find(live.brandId, live.key, 0)).toEqual(Option.some(live))
      for (const entry of expired) {
        expect(yield* repo.find(entry.brandId, entry.key, 0)).toEqual(Option.none())
      }
    }))

  it.effect("deletes at most the batch it is given, the oldest first", () =>
    Effect.gen(function*() {
      const repo = yield* IdempotencyRepo
      const entries = [1_000_003, 1_000_001, 1_000_002].map((expiresAt) => idempotencyEntry({ expiresAt }))
      yield* Effect.forEach(entries, repo.insert)
      expect(yield* repo.purgeExpired(1_000_003, 2)).toBe(2)
      const left = entries.filter((entry) => entry.expiresAt === 1_000_003)[0]!
      expect(yield* repo.find(left.brandId, left.key, 0)).toEqual(Option.some(left))
      expect(yield* repo.purgeExpired(1_000_003, 2)).toBe(1)
    }))
})

const ttl = Duration.hours(24)
const AppConfigTest = makeTestLayer(AppConfig)({ idempotencyTtl: ttl })

const IdempotencyOnFreshFile = Idempotency.Live.pipe(
  Layer.provideMerge(Layer.merge(IdempotencyRepo.Live, GroupCommit.Live)),
  Layer.provideMerge(ActivationsRepo.Live),
  Layer.provideMerge(SqlLiveAt(tempDatabase())),
  Layer.provide([AppConfigTest, MetricsOff])
)

class DownstreamFailure extends Data.TaggedError("DownstreamFailure") {}

const request = (): IdempotentRequest => ({
  brandId,
  key: unique("order-"),
  method: "POST",
  path: "/v1/creators/9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d/campaigns/1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f/activate",
  body: { socialUsername: "@jane", plannedPostAt: "2026-06-01" }
})

const created = (body: unknown): StoredResponse => ({ status: 201, body: JSON.stringify(body), resourceId: null })

const bodyOf = (answer: IdempotentAnswer) => Effect.succeed(answer.body)

const isReplay = (answer: IdempotentAnswer) => answer.replayed

layer(IdempotencyOnFreshFile)("Idempotency on SQLite", (it) => {
  /** An operation that counts its runs and answers with the run number. */
  const countedOperation = Effect.gen(function*() {
    const runs = yield* Ref.make(0)
    const operation = Ref.updateAndGet(runs, (n) => n + 1).pipe(Effect.map((run) => created({ ok: true, run })))
    return { runs, operation }
  })

  it.effect("stores the first response and replays it, marked, for the same request", () =>
    Effect.gen(function*() {
      const idempotency = yield* Idempotency
      const { operation, runs } = yield* countedOperation
      const first = request()
      const original = yield* idempotency.run(first, operation)
      const sameBodyReordered = { plannedPostAt: "2026-06-01", socialUsername: "@jane" }
      const replay = yield* idempotency.run({ ...first, body: sameBodyReordered }, operation)
      expect(isReplay(original)).toBe(false)
      expect(isReplay(replay)).toBe(true)
      expect(replay.status).toBe(201)
      expect(yield* bodyOf(replay)).toBe(yield* bodyOf(original))
      expect(yield* Ref.get(runs)).toBe(1)
    }))

  it.effect("the same key with another body or path is a conflict and does not run", () =>
    Effect.gen(function*() {
      const idempotency = yield* Idempotency
      const { operation, runs } = yield* countedOperation
      const first = request()
      yield* idempotency.run(first, operation)
      const otherBody = yield* Effect.flip(idempotency.run({ ...first, body: { socialUsername: "@john" } }, operation))
      const otherPath = yield* Effect.flip(idempotency.run({ ...first, path: `${first.path}/again` }, operation))
      expect(otherBody).toBeInstanceOf(IdempotencyConflict)
      expect(otherPath).toBeInstanceOf(IdempotencyConflict)
      expect(yield* Ref.get(runs)).toBe(1)
    }))

  it.effect("a repeat within the TTL replays without running; once the entry expires the key starts afresh", () =>
    Effect.gen(function*() {
      const idempotency = yield* Idempotency
      const { operation, runs } = yield* countedOperation
      const first = request()
      yield* idempotency.run(first, operation)
      yield* TestClock.adjust(Duration.subtract(ttl, Duration.millis(1)))
      expect(isReplay(yield* idempotency.run(first, operation))).toBe(true)
      yield* TestClock.adjust(Duration.millis(1))
      // The process still remembers the entry, but an expired one is never answered from.
      const afresh = yield* idempotency.run({ ...first, body: { socialUsername: "@other" } }, operation)
      expect(isReplay(afresh)).toBe(false)
      expect(yield* Ref.get(runs)).toBe(2)
    }))

  it.effect("the same key under another brand is a new request", () =>
    Effect.gen(function*() {
      const idempotency = yield* Idempotency
      const { operation, runs } = yield* countedOperation
      const first = request()
      yield* idempotency.run(first, operation)
      const otherBrand = yield* idempotency.run(
        { ...first, brandId: otherBrandId, body: { socialUsername: "@john" } },
        operation
      )
      expect(isReplay(otherBrand)).toBe(false)
      expect(yield* Ref.get(runs)).toBe(2)
    }))

  it.effect("a duplicate waits for the original: after 5 s it is told to retry, before that it gets the replay", () =>
    Effect.gen(function*() {
      const idempotency = yield* Idempotency
      const started = yield* Deferred.make<void>()
      const runs = yield* Ref.make(0)
      const slowOperation = Effect.gen(function*() {
        yield* Ref.update(runs, (n) => n + 1)
        yield* Deferred.succeed(started, undefined)
        yield* Effect.sleep("10 seconds")
        return created({ ok: true, slow: true })
      })
      const first = request()

      const original = yield* Effect.fork(idempotency.run(first, slowOperation))
      yield* Deferred.await(started)
      const impatient = yield* Effect.fork(idempotency.run(first, slowOperation))
      yield* TestClock.adjust("6 seconds")
      expect(yield* Effect.flip(Fiber.join(impatient))).toBeInstanceOf(IdempotencyInProgress)

      const patient = yield* Effect.fork(idempotency.run(first, slowOperation))
      yield* TestClock.adjust("4 seconds")
      const originalResponse = yield* Fiber.join(original)
      const patientResponse = yield* Fiber.join(patient)
      expect(isReplay(patientResponse)).toBe(true)
      expect(yield* bodyOf(patientResponse)).toBe(yield* bodyOf(originalResponse))
      expect(yield* Ref.get(runs)).toBe(1)
    }))

  it.effect("a failed operation leaves nothing behind: its writes roll back and a retry runs it again", () =>
    Effect.gen(function*() {
      const idempotency = yield* Idempotency
      const activations = yield* ActivationsRepo
      const activation = activationRecord()
      const first = request()
      const insertThenFail = activations.insert(activation, owner).pipe(
        Effect.zipRight(Effect.fail(new DownstreamFailure()))
      )
      expect(yield* Effect.flip(idempotency.run(first, insertThenFail))).toBeInstanceOf(DownstreamFailure)
      expect(yield* activations.findById(brandId, activation.id)).toEqual(Option.none())

      const { operation, runs } = yield* countedOperation
      const retry = yield* idempotency.run(first, operation)
      expect(isReplay(retry)).toBe(false)
      expect(yield* Ref.get(runs)).toBe(1)
    }))

  it.effect("a successful operation's writes are kept with its stored response", () =>
    Effect.gen(function*() {
      const idempotency = yield* Idempotency
      const activations = yield* ActivationsRepo
      const activation = activationRecord()
      const first = request()
      const insert = activations.insert(activation, owner).pipe(Effect.as(created({ ok: true, activation })))
      yield* idempotency.run(first, insert)
      expect(yield* activations.findById(brandId, activation.id)).toEqual(Option.some(activation))
      expect(isReplay(yield* idempotency.run(first, insert))).toBe(true)
    }))
})

/** Another instance stores the same key between this one's read and its write: the read misses it once. */
const racedKeys = new Set<string>()

const IdempotencyRepoRaced = Layer.effect(
  IdempotencyRepo,
  Effect.map(IdempotencyRepo, (repo) => ({
    ...repo,
    find: (brandId: string, key: string, now: number) =>
      racedKeys.delete(key) ? Effect.succeed(Option.none()) : repo.find(brandId, key, now)
  }))
).pipe(Layer.provide(IdempotencyRepo.Live))

const IdempotencyRacedOnFreshFile = Idempotency.Live.pipe(
  Layer.provideMerge(Layer.merge(IdempotencyRepoRaced, GroupCommit.Live)),
  Layer.provideMerge(ActivationsRepo.Live),
  Layer.provideMerge(SqlLiveAt(tempDatabase())),
  Layer.provide([AppConfigTest, MetricsOff])
)

layer(IdempotencyRacedOnFreshFile)("Idempotency against another instance's write", (it) => {
  const storedByTheOther = (request: IdempotentRequest, body: string) =>
    Effect.flatMap(IdempotencyRepo, (repo) =>
      repo.insert({
        brandId: request.brandId,
        key: request.key,
        fingerprint: fingerprintOf(request),
        resourceId: null,
        statusCode: 201,
        responseBody: body,
        createdAt: 0,
        expiresAt: Duration.toMillis("24 hours")
      }))

  it.effect("losing the race rolls back this request's writes and replays the other's response", () =>
    Effect.gen(function*() {
      const idempotency = yield* Idempotency
      const activations = yield* ActivationsRepo
      const first = request()
      expect(yield* storedByTheOther(first, "{\"ok\":true,\"by\":\"the other\"}")).toBe(true)
      racedKeys.add(first.key)
      const activation = activationRecord()
      const ours = activations.insert(activation, owner).pipe(Effect.as(created({ ok: true, by: "this one" })))
      const response = yield* idempotency.run(first, ours)
      expect(isReplay(response)).toBe(true)
      expect(yield* bodyOf(response)).toBe("{\"ok\":true,\"by\":\"the other\"}")
      expect(yield* activations.findById(brandId, activation.id)).toEqual(Option.none())
    }))

  it.effect("losing the race to a different request is a conflict, and nothing of this one is kept", () =>
    Effect.gen(function*() {
      const idempotency = yield* Idempotency
      const activations = yield* ActivationsRepo
      const first = request()
      yield* storedByTheOther({ ...first, body: { socialUsername: "@other" } }, "{}")
      racedKeys.add(first.key)
      const activation = activationRecord()
      const ours = activations.insert(activation, owner).pipe(Effect.as(created({ ok: true })))
      expect(yield* Effect.flip(idempotency.run(first, ours))).toBeInstanceOf(IdempotencyConflict)
      expect(yield* activations.findById(brandId, activation.id)).toEqual(Option.none())
    }))
})

/** Group commit and the activations repository on a database file of their own. */
const groupCommitOnFreshFile = () =>
  Layer.merge(GroupCommit.Live, ActivationsRepo.Live).pipe(
    Layer.provideMerge(SqlLiveAt(tempDatabase())),
    Layer.provide(MetricsOff)
  )
const GroupCommitOnFreshFile = groupCommitOnFreshFile()

layer(GroupCommitOnFreshFile)("GroupCommit", (it) => {
  /** Five transactions started together, so they share a batch; the third fails after its write. */
  const fiveTogether = (third: (activation: Activation) => Effect.Effect<Activation, DownstreamFailure>) =>
    Effect.gen(function*() {
      const groupCommit = yield* GroupCommit
      const activations = yield* ActivationsRepo
      const records = Array.from({ length: 5 }, () => activationRecord({ id: uuidOf(++sequence) }))
      const outcomes = yield* Effect.all(
        records.map((activation, i) =>
          activations.insert(activation, owner).pipe(
            Effect.zipRight(i === 2 ? third(activation) : Effect.succeed(activation)),
            groupCommit.transaction,
            Effect.exit
          )
        ),
        { concurrency: "unbounded" }
      )
      const stored = yield* Effect.forEach(records, (activation) => activations.findById(brandId, activation.id))
      return { records, outcomes, stored }
    })

  it.effect("a failing piece of work undoes only its own writes; the others in its batch are kept", () =>
    Effect.gen(function*() {
      const { outcomes, records, stored } = yield* fiveTogether(() => Effect.fail(new DownstreamFailure()))
      expect(outcomes.map(Exit.isSuccess)).toEqual([true, true, false, true, true])
      expect(outcomes[2]).toEqual(Exit.fail(new DownstreamFailure()))
      expect(stored).toEqual(records.map((record, i) => i === 2 ? Option.none() : Option.some(record)))
    }))

  it.effect("a defect in one piece of work rolls back the whole batch, and every piece of it dies", () =>
    Effect.gen(function*() {
      const { outcomes, stored } = yield* fiveTogether(() => Effect.die("a bug"))
      expect(outcomes.every(Exit.isFailure)).toBe(true)
      expect(outcomes.every((exit) => Exit.isFailure(exit) && Cause.isDie(exit.cause))).toBe(true)
      expect(stored.every(Option.isNone)).toBe(true)
    }))

  it.effect("with nothing failing, every piece of work is answered and kept", () =>
    Effect.gen(function*() {
      const { outcomes, records, stored } = yield* fiveTogether(Effect.succeed)
      expect(outcomes).toEqual(records.map(Exit.succeed))
      expect(stored).toEqual(records.map(Option.some))
    }))
})

/** Group commit with both repositories that write in batches, on a database file of their own. */
const GroupCommitWithIdempotencyOnFreshFile = Layer.mergeAll(
  GroupCommit.Live,
  ActivationsRepo.Live,
  IdempotencyRepo.Live
)
  .pipe(Layer.provideMerge(SqlLiveAt(tempDatabase())), Layer.provide(MetricsOff))

layer(GroupCommitWithIdempotencyOnFreshFile)("GroupCommit and a refused row", (it) => {
  it.effect("a piece whose row the batch's statement refuses runs again, answered false, and nothing of it is kept; the others run once", () =>
    Effect.gen(function*() {
      const groupCommit = yield* GroupCommit
      const activations = yield* ActivationsRepo
      const idempotency = yield* IdempotencyRepo
      // Stored by "another instance" before the batch writes: the third piece's key is taken.
      const taken = idempotencyEntry()
      expect(yield* idempotency.insert(taken)).toBe(true)
      const records = Array.from({ length: 5 }, () => activationRecord({ id: uuidOf(++sequence) }))
      const runs = records.map(() => 0)
      const outcomes = yield* Effect.all(
        records.map((activation, i) =>
          Effect.suspend(() => {
            runs[i]!++
            return activations.insert(activation, owner).pipe(
              Effect.zipRight(idempotency.insert(i === 2 ? taken : idempotencyEntry({ resourceId: activation.id }))),
              Effect.flatMap((inserted) => inserted ? Effect.succeed(activation) : Effect.fail("refused"))
            )
          }).pipe(groupCommit.transaction, Effect.exit)
        ),
        { concurrency: "unbounded" }
      )
      const stored = yield* Effect.forEach(records, (activation) => activations.findById(brandId, activation.id))
      expect(outcomes).toEqual(records.map((record, i) => i === 2 ? Exit.fail("refused") : Exit.succeed(record)))
      expect(runs).toEqual([1, 1, 2, 1, 1])
      expect(stored).toEqual(records.map((record, i) => i === 2 ? Option.none() : Option.some(record)))
      expect(yield* idempotency.find(taken.brandId, taken.key, 0)).toEqual(Option.some(taken))
    }))
})

describe("GroupCommit's order of writes", () => {
  type Written = readonly [table: string, how: "one" | "many", keys: ReadonlyArray<string>]
  /** Inserts that write nothing and note each statement they would run. */
  const noting = (written: Array<Written>) => {
    const insertInto = (table: "idempotency_keys" | "campaign_days", refuses: boolean): BatchedInsert<string> => ({
      table,
      keyOf: (key) => key,
      refuses,
      one: (key) => Effect.sync(() => written.push([table, "one", [key]])).pipe(Effect.as(true)),
      many: (keys) => Effect.sync(() => written.push([table, "many", keys])).pipe(Effect.as(noneRefused))
    })
    return { keys: insertInto("idempotency_keys", true), counts: insertInto("campaign_days", false) }
  }
  /**
   * Five pieces started together, so they share a batch, each writing a count before its key, in
   * no order of either; the fourth runs a statement itself and then fails when `fourthFails`.
   */
  const fivePieces = (fourthFails: boolean) =>
    Effect.gen(function*() {
      const groupCommit = yield* GroupCommit
      const sql = yield* SqlClient.SqlClient
      const written: Array<Written> = []
      const { counts, keys } = noting(written)
      const pieces = [
        { count: "count-c", key: "key-d" },
        { count: "count-a", key: "key-b" },
        { count: "count-e", key: "key-a" },
        { count: "count-b", key: "key-e" },
        { count: "count-d", key: "key-c" }
      ]
      const outcomes = yield* Effect.all(
        pieces.map(({ count, key }, i) =>
          insertBatched(counts, count).pipe(
            Effect.zipRight(insertBatched(keys, key)),
            Effect.zipRight(
              i === 3 && fourthFails ? Effect.zipRight(Effect.orDie(sql`SELECT 1`), Effect.fail("failed")) : Effect.void
            ),
            groupCommit.transaction,
            Effect.exit
          )
        ),
        { concurrency: "unbounded" }
      )
      return { outcomes, written }
    }).pipe(
      Effect.provide(GroupCommit.Live.pipe(Layer.provideMerge(SqlLiveAt(tempDatabase())), Layer.provide(MetricsOff)))
    )

  it.effect("a batch writes its tables in one order, whichever its pieces wrote first, each in one statement in key order", () =>
    Effect.gen(function*() {
      const { outcomes, written } = yield* fivePieces(false)
      expect(outcomes.every(Exit.isSuccess)).toBe(true)
      expect(written).toEqual([
        ["idempotency_keys", "many", ["key-a", "key-b", "key-c", "key-d", "key-e"]],
        ["campaign_days", "many", ["count-a", "count-b", "count-c", "count-d", "count-e"]]
      ])
    }))

  it.effect("in the savepoint fallback the pieces take their keys at once, in key order, and the counts come after, in key order", () =>
    Effect.gen(function*() {
      const { outcomes, written } = yield* fivePieces(true)
      expect(outcomes.map(Exit.isSuccess)).toEqual([true, true, true, false, true])
      expect(written).toEqual([
        ...["key-a", "key-b", "key-c", "key-d", "key-e"].map((key) => ["idempotency_keys", "one", [key]]),
        // The fourth piece's count is left out with its savepoint; its key's insert was undone there.
        ["campaign_days", "many", ["count-a", "count-c", "count-d", "count-e"]]
      ])
    }))
})

/** Lines logged by the batches' fiber, with their requestId annotation. */
const logged = captureLogs(({ annotations, message }) => ({
  message: [message].flat().join(" "),
  requestId: annotationOf(annotations, "requestId")
}))

layer(
  GroupCommit.Live.pipe(Layer.provideMerge(SqlLiveAt(tempDatabase())), Layer.provide([logged.layer, MetricsOff]))
)(
  "GroupCommit's log lines",
  (it) => {
    it.effect("a piece of work logs with its own request's annotations, never with another piece's, in both of a batch's runs", () =>
      Effect.gen(function*() {
        const groupCommit = yield* GroupCommit
        const sql = yield* SqlClient.SqlClient
        const piece = (n: number) =>
          groupCommit.transaction(
            Effect.zipRight(
              Effect.logInfo(`piece ${n}`),
              n === 4 ? Effect.zipRight(Effect.orDie(sql`SELECT 1`), Effect.fail("refused")) : Effect.void
            )
          )
        // Started together, so they share a batch. The fourth comes from a request without an id; the
        // fifth runs a statement itself and fails, so the batch runs again with a savepoint per piece.
        yield* Effect.all([
          ...[0, 1, 2].map((n) => Effect.annotateLogs(piece(n), "requestId", `request-${n}`)),
          piece(3),
          Effect.annotateLogs(Effect.exit(piece(4)), "requestId", "request-4")
        ], { concurrency: "unbounded" })
        const lines = logged.lines.filter((line) => line.message.startsWith("piece"))
        const requestIdsOf = (n: number) =>
          lines.filter((line) => line.message === `piece ${n}`).map((line) => line.requestId)
        expect([0, 1, 2, 3, 4].map(requestIdsOf)).toEqual([
          ["request-0", "request-0"],
          ["request-1", "request-1"],
          ["request-2", "request-2"],
          [undefined, undefined],
          ["request-4", "request-4"]
        ])
      }))
  }
)

/**
 * The deadlocks PostgreSQL found in `database`, once no other connection to it is left: a backend's
 * counters reach pg_stat_database by the time it has exited (its last flush).
 */
const deadlocksIn = async (database: string): Promise<number> => {
  const name = new URL(database).pathname.slice(1)
  await eventually("every connection to the database to close", async () =>
    (await postgres.count(
      database,
      "SELECT 1 FROM pg_stat_activity WHERE datname = ? AND pid <> pg_backend_pid()",
      name
    )) === 0)
  return withPostgres(
    database,
    async (sql) => Number((await sql`SELECT deadlocks FROM pg_stat_database WHERE datname = ${name}`)[0].deadlocks)
  )
}

/**
 * Two instances' idempotency and group commit on one PostgreSQL database, each with a pool of its
 * own, as two processes of the service are; `lostRaces` counts the stored responses each found
 * another had stored first, when its own insert was refused.
 */
describe.skipIf(sharedSkipped !== undefined)("GroupCommit on PostgreSQL, two instances", () => {
  const by = { brandId: brandId as BrandId, keyId: "k3y1d0000000000a" as KeyId, scopes: [] }
  const campaigns = ["1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e51", "1C2D3E4F-5A6B-4C7D-8E9F-0A1B2C3D4E52"]
  const creators = [1, 2, 3].map((n) => `9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6${n}`)
  const plannedDays = ["2026-06-01", "2026-06-02", null]
  const pick = <A>(items: ReadonlyArray<A>) => items[Math.floor(Math.random() * items.length)]!

  let lostRaces = 0
  const IdempotencyRepoCounted = Layer.effect(
    IdempotencyRepo,
    Effect.map(IdempotencyRepo, (repo) => ({
      ...repo,
      insert: (row: IdempotencyRow) =>
        Effect.tap(repo.insert(row), (inserted) => Effect.sync(() => inserted ? undefined : lostRaces++))
    }))
  ).pipe(Layer.provide(IdempotencyRepo.Live))
  const instanceOn = (database: string) =>
    ManagedRuntime.make(
      Layer.merge(Idempotency.Live, Activations.Live).pipe(
        Layer.provideMerge(Layer.merge(IdempotencyRepoCounted, GroupCommit.Live)),
        Layer.provideMerge(ActivationsRepo.Live),
        Layer.provide(Ids.Live),
        Layer.provide(SqlLiveAt(database)),
        Layer.provide([AppConfigTest, MetricsOff])
      )
    )
  type Instance = ReturnType<typeof instanceOn>

  /** An activation under `key`, as the handler runs it. */
  const activate = (
    instance: Instance,
    key: string,
    path: { readonly creatorId: string; readonly campaignId: string },
    body: { readonly socialUsername: string; readonly plannedPostAt: string | null }
  ) =>
    instance.runPromiseExit(Effect.gen(function*() {
      const idempotency = yield* Idempotency
      const activations = yield* Activations
      const operation = Effect.map(activations.activate({ ...path, request: body, by }), (activation) => ({
        status: 200,
        body: recordJson(activation),
        resourceId: activation.id
      }))
      return yield* idempotency.run({
        brandId,
        key,
        method: "POST",
        path: `/v1/creators/${path.creatorId}/campaigns/${path.campaignId}/activate`,
        body
      }, operation)
    }))

  /** Rows of `query` that `expected` lacks, and rows of `expected` that `query` lacks. */
  const difference = (query: string, expected: string) =>
    `(${query} EXCEPT ${expected}) UNION ALL (${expected} EXCEPT ${query})`

  it("a key sent to both at once, among other activations, never deadlocks; every answer is the original's bytes, and every count is kept", async () => {
    const database = await postgres.database()
    const instances = [instanceOn(database), instanceOn(database)] as const
    lostRaces = 0
    // Loops on both instances, a quarter of their requests sent to both at once with the same key
    // and body (a client's retry through a balancer), all of them on a few campaigns' counts.
    const answers = new Map<string, Array<Exit.Exit<IdempotentAnswer, unknown>>>()
    await Promise.all(Array.from({ length: 16 }, async (_, loop) => {
      for (let n = 0; n < 40; n++) {
        const key = `order-${loop}-${n}`
        const path = { creatorId: pick(creators), campaignId: pick(campaigns) }
        const body = { socialUsername: "@jane", plannedPostAt: pick(plannedDays) }
        const to = Math.random() < 0.25 ? instances : [instances[loop % 2]!]
        answers.set(key, await Promise.all(to.map((instance) => activate(instance, key, path, body))))
      }
    }))
    await Promise.all(instances.map((instance) => instance.dispose()))

    expect(lostRaces).toBeGreaterThan(0)
    for (const exits of answers.values()) {
      const answered = exits.filter(Exit.isSuccess).map((exit) => exit.value)
      // A duplicate that waited longer than the bound for the original is the contract's 409.
      for (const exit of exits) {
        if (Exit.isFailure(exit)) expect(Cause.squash(exit.cause)).toBeInstanceOf(IdempotencyInProgress)
      }
      expect(answered.filter((answer) => !answer.replayed).length).toBeLessThanOrEqual(1)
      expect(new Set(answered.map((answer) => answer.body)).size).toBeLessThanOrEqual(1)
    }
    const count = (query: string) => postgres.count(database, query)
    expect(await count("SELECT 1 FROM activations")).toBe(answers.size)
    expect(await count("SELECT 1 FROM idempotency_keys i JOIN activations a ON a.id = i.resource_id")).toBe(
      answers.size
    )
    const activated = "FROM activations GROUP BY brand_id, lower(campaign_id), substr(activated_at, 1, 10)"
    expect(
      await count(difference(
        "SELECT brand_id, campaign_key, day, planned_day, activations FROM campaign_days",
        `SELECT brand_id, lower(campaign_id), substr(activated_at, 1, 10), COALESCE(planned_post_at, ''), COUNT(*)
         ${activated}, COALESCE(planned_post_at, '')`
      ))
    ).toBe(0)
    expect(
      await count(difference(
        "SELECT brand_id, campaign_key, day, creator_key FROM campaign_creator_days",
        `SELECT brand_id, lower(campaign_id), substr(activated_at, 1, 10), lower(creator_id) ${activated}, lower(creator_id)`
      ))
    ).toBe(0)
    expect(
      await count(difference(
        "SELECT brand_id, campaign_key, creator_key FROM campaign_creators",
        "SELECT brand_id, lower(campaign_id), lower(creator_id) FROM activations GROUP BY 1, 2, 3"
      ))
    ).toBe(0)
    // The creators counted by their previous day (0007), against the same counts made afresh.
    expect(
      await count(difference(
        "SELECT brand_id, campaign_key, day, previous_day, creators FROM campaign_day_pairs WHERE creators <> 0",
        `SELECT brand_id, campaign_key, day, previous_day, COUNT(*) FROM (
           SELECT brand_id, campaign_key, day, COALESCE(CAST(LAG(day) OVER (
             PARTITION BY brand_id, campaign_key, creator_key ORDER BY day) AS VARCHAR(10)), '') AS previous_day
           FROM campaign_creator_days) days GROUP BY 1, 2, 3, 4`
      ))
    ).toBe(0)

    expect(await deadlocksIn(database)).toBe(0)
  })
})

describe.skipIf(sharedSkipped !== undefined)("IdempotencyRepo.purgeExpired on PostgreSQL", () => {
  const purgeOn = (database: string) => (now: number) =>
    Effect.flatMap(IdempotencyRepo, (repo) => repo.purgeExpired(now, 100)).pipe(
      Effect.provide(IdempotencyRepo.Live.pipe(Layer.provide(SqlLiveAt(database)))),
      Effect.runPromise
    )
  const entry = (key: string, createdAt: number, expiresAt: number) =>
    `('${brandId}', '${key}', '${"0".repeat(64)}', NULL, 200, '{}', ${createdAt}, ${expiresAt})`
  const purgeWaitsForALock = (database: string) =>
    eventually("the purge to wait for a row's lock", async () =>
      (await postgres.count(
        database,
        "SELECT 1 FROM pg_stat_activity WHERE datname = ? AND wait_event_type = 'Lock' AND query LIKE 'DELETE FROM idempotency_keys%'",
        new URL(database).pathname.slice(1)
      )) === 1)

  it("leaves an entry that was replaced while the purge waited for its row", async () => {
    const database = await postgres.database()
    const purge = purgeOn(database)
    await purge(0) // migrates the new database
    await postgres.exec(database, `INSERT INTO idempotency_keys VALUES ${entry("reused", 1, 1000)}`)
    // Another instance replaces the expired entry with a live one and has not committed yet,
    // while the purge, which chose that row as expired, waits for it.
    let purged: Promise<number> | undefined
    await withPostgres(database, (sql) =>
      sql.begin(async (tx) => {
        await tx`UPDATE idempotency_keys SET created_at = 2000, expires_at = 999999 WHERE idempotency_key = 'reused'`
        purged = purge(5000)
        await purgeWaitsForALock(database)
      }))
    expect(await purged).toBe(0)
    expect(await postgres.count(database, "SELECT 1 FROM idempotency_keys WHERE expires_at = 999999")).toBe(1)
  })

  it("takes its rows in key order, as a batch does: a batch replacing two expired entries while it runs never deadlocks with it", async () => {
    const database = await postgres.database()
    const purge = purgeOn(database)
    await purge(0)
    // The first to expire is the last in key order.
    await postgres.exec(
      database,
      `INSERT INTO idempotency_keys VALUES ${entry("z-expired-first", 1, 1000)}, ${entry("a-expired-next", 1, 1001)}`
    )
    let purged: Promise<number> | undefined
    await withPostgres(database, (sql) =>
      sql.begin(async (tx) => {
        // As a batch replaces expired entries (IdempotencyRepo's upsert): in key order.
        const replace = (key: string) =>
          tx.unsafe(`INSERT INTO idempotency_keys VALUES ${entry(key, 2000, 999999)}
            ON CONFLICT (brand_id, idempotency_key) DO UPDATE SET created_at = excluded.created_at,
              expires_at = excluded.expires_at WHERE idempotency_keys.expires_at <= excluded.created_at`)
        await replace("a-expired-next")
        purged = purge(5000)
        // Awaited below, where its failure (a deadlock's victim) is reported.
        purged.catch(() => undefined)
        await purgeWaitsForALock(database)
        await replace("z-expired-first")
      }))
    expect(await purged).toBe(0)
    expect(await postgres.count(database, "SELECT 1 FROM idempotency_keys WHERE expires_at = 999999")).toBe(2)
    expect(await deadlocksIn(database)).toBe(0)
  })
})

describe("GroupCommit's gathering", () => {
  it.live("a batch stops taking in work shortly after its first piece, however steadily more arrives", () =>
    Effect.gen(function*() {
      const groupCommit = yield* GroupCommit
      const activations = yield* ActivationsRepo
      let submitted = 0
      let submittedWhenFirstAnswered: number | undefined
      const pieces: Array<Fiber.RuntimeFiber<void>> = []
      // One more piece on every turn of the event loop, as a forming batch looks for them: a batch
      // that gathered for as long as something new came would close only at its size limit (256).
      for (let n = 1; n <= 200; n++) {
        submitted = n
        pieces.push(
          yield* activations.insert(activationRecord({ id: uuidOf(++sequence) }), owner).pipe(
            groupCommit.transaction,
            Effect.tap(() => Effect.sync(() => (submittedWhenFirstAnswered ??= submitted))),
            Effect.fork
          )
        )
        yield* Effect.sleep(Duration.zero)
      }
      yield* Fiber.joinAll(pieces)
      expect(submittedWhenFirstAnswered).toBeLessThan(100)
      // Built here, under the live clock: a layer of `layer(...)` would read the TestClock, which never moves.
    }).pipe(Effect.provide(groupCommitOnFreshFile())))
})
