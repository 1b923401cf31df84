/**
 * Upgrading in place (docs/integrators.md, Reads): a database the previous release made and filled (its
 * migrations, 0001 and 0002, and its records) is migrated at start, and every old record reads
 * back; its keys keep working.
 */
import { BunContext } from "@effect/platform-bun"
import { PgClient, PgMigrator } from "@effect/sql-pg"
import { SqliteClient, SqliteMigrator } from "@effect/sql-sqlite-bun"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Redacted } from "effect"
import CreateTables from "../src/Database/migrations/0001_create_tables.ts"
import ApiKeysGeneration from "../src/Database/migrations/0002_api_keys_generation.ts"
import ActivationReads from "../src/Database/migrations/0003_activation_reads.ts"
import CampaignCounts from "../src/Database/migrations/0004_campaign_counts.ts"
import KeyLifecycle from "../src/Database/migrations/0005_key_lifecycle.ts"
import ListByBothFilters from "../src/Database/migrations/0006_list_by_both_filters.ts"
import { fingerprintOf } from "../src/Idempotency.ts"
import { backends } from "./support/backends.ts"
import { call } from "./support/client.ts"
import { expectEnvelope } from "./support/contract.ts"
import { serveInProcess } from "./support/inProcess.ts"
import { createKey, listKeys, rollKey } from "./support/server.ts"

/** The request that made an activation, as its Idempotency-Key's fingerprint covers it. */
const requestOf = (
  a: { creatorId: string; campaignId: string; socialUsername: string; plannedPostAt: string | null }
) => ({
  method: "POST",
  path: `/v1/creators/${a.creatorId}/campaigns/${a.campaignId}/activate`,
  body: { socialUsername: a.socialUsername, plannedPostAt: a.plannedPostAt },
  brandId: "",
  key: ""
})

/** The migrations of the release before the reads, as it shipped them. */
const previousRelease = { "0001_create_tables": CreateTables, "0002_api_keys_generation": ApiKeysGeneration }

/** The migrations of the release before keys could be rolled, limited and tracked. */
const releaseBeforeKeyLifecycle = {
  ...previousRelease,
  "0003_activation_reads": ActivationReads,
  "0004_campaign_counts": CampaignCounts
}

/** The migrations of the release before plannedPostAt's window and the list's index for both filters. */
const releaseBeforeDateWindow = { ...releaseBeforeKeyLifecycle, "0005_key_lifecycle": KeyLifecycle }

/** The migrations of the release before the creators of a range were counted from their first days in it. */
const releaseBeforeFirstDays = { ...releaseBeforeDateWindow, "0006_list_by_both_filters": ListByBothFilters }

const migrateAs = (release: Record<string, Effect.Effect<void, unknown, any>>) => (database: string) =>
  (database.startsWith("postgres")
    ? PgMigrator.run({ loader: PgMigrator.fromRecord(release) }).pipe(
      Effect.provide(PgClient.layer({ url: Redacted.make(database) }))
    )
    : SqliteMigrator.run({ loader: SqliteMigrator.fromRecord(release) }).pipe(
      Effect.provide(SqliteClient.layer({ filename: database }))
    )).pipe(Effect.provide(BunContext.layer), Effect.asVoid, Effect.runPromise)

const migrateAsPreviousRelease = migrateAs(previousRelease)

describe.each(backends)("upgrading a database of the previous release on $name", (backend) => {
  it("migrates at start: its keys work, and every activation it stored reads back, replays and is counted", async () => {
    const database = await backend.database()
    await migrateAsPreviousRelease(database)
    const brandId = crypto.randomUUID()
    const keyOfPreviousRelease = "previousrelease0"
    const campaignId = "9A8B7C6D-5E4F-4A3B-9C2D-1E0F9A8B7C6D"
    const stored = [
      {
        id: "01a0b1c2-0000-7000-8000-000000000001",
        creatorId: "5d2a7c3e-1b4f-4e6a-8c9d-0e1f2a3b4c5d",
        plannedPostAt: "2026-12-01",
        activatedAt: "2026-11-20T10:00:00.000Z"
      },
      {
        id: "01a0b1c2-0000-7000-8000-000000000002",
        creatorId: "5D2A7C3E-1B4F-4E6A-8C9D-0E1F2A3B4C5D",
        plannedPostAt: null,
        activatedAt: "2026-11-21T11:30:00.000Z"
      }
    ].map((a) => ({
      // In the order activate answers the fields.
      id: a.id,
      campaignId,
      creatorId: a.creatorId,
      status: "ACTIVE",
      socialUsername: "@before",
      plannedPostAt: a.plannedPostAt,
      activatedAt: a.activatedAt
    }))
    const bodies = stored.map((activation) => JSON.stringify({ ok: true, activation }))
    // What the previous release wrote for each activation: the record and its stored response.
    await backend.exec(
      database,
      `INSERT INTO activations (id, brand_id, key_id, creator_id, campaign_id, status, social_username, planned_post_at, activated_at) VALUES ${
        stored.map((a) =>
          `('${a.id}', '${brandId}', '${keyOfPreviousRelease}', '${a.creatorId}', '${a.campaignId}', 'ACTIVE', '@before', ${
            a.plannedPostAt === null ? "NULL" : `'${a.plannedPostAt}'`
          }, '${a.activatedAt}')`
        ).join(", ")
      }`
    )
    const expiresAt = Date.now() + 86_400_000
    await backend.exec(
      database,
      `INSERT INTO idempotency_keys (brand_id, idempotency_key, fingerprint, resource_id, status_code, response_body, created_at, expires_at) VALUES ${
        stored.map((a, i) =>
          `('${brandId}', 'before-${i}', '${fingerprintOf(requestOf(a))}', '${a.id}', 200, '${
            bodies[i]
          }', ${Date.now()}, ${expiresAt})`
        ).join(", ")
      }`
    )

    // Its key table is as this release has it: a key made now is one the previous release made.
    // Making it runs the migrations, as the server's start would.
    const key = await createKey(database, { brandId, scopes: ["campaigns:write", "analytics:read"] })
    const server = await serveInProcess(database, backend.env)
    try {
      for (const [i, activation] of stored.entries()) {
        const { body, path } = requestOf(activation)
        const replay = await call(server.url, {
          method: "POST",
          path,
          apiKey: key.apiKey,
          headers: { "idempotency-key": `before-${i}`, "content-type": "application/json" },
          body: JSON.stringify(body)
        })
        expect({ status: replay.status, text: replay.text, replayed: replay.headers.get("idempotent-replayed") })
          .toEqual({ status: 200, text: bodies[i], replayed: "true" })
      }
      expect((await call(server.url, { path: "/v1/whoami", apiKey: key.apiKey })).status).toBe(200)
      for (const [i, activation] of stored.entries()) {
        const read = await call(server.url, { path: `/v1/activations/${activation.id}`, apiKey: key.apiKey })
        expect(read.status).toBe(200)
        expect(read.text).toBe(bodies[i])
      }
      const listed = await call(server.url, {
        path: `/v1/activations?campaignId=${campaignId.toLowerCase()}`,
        apiKey: key.apiKey
      })
      expect(listed.json.activations.map((a: { id: string }) => a.id)).toEqual([stored[1]!.id, stored[0]!.id])
      const counted = await call(server.url, { path: `/v1/campaigns/${campaignId}/analytics`, apiKey: key.apiKey })
      expect(counted.json.analytics).toMatchObject({ activations: 2, creators: 1, unscheduled: 1 })
      expect(await backend.count(database, "SELECT 1 FROM idempotency_keys")).toBe(2)
    } finally {
      await server.stop()
    }
  })
})

describe.each(backends)("upgrading a database of the release before the keys' lifecycle on $name", (backend) => {
  it("migrates at start: every key it stored works with its secret, can be rolled, and has no last use and the server's limit", async () => {
    const database = await backend.database()
    await migrateAs(releaseBeforeKeyLifecycle)(database)
    const brandId = crypto.randomUUID()
    const keyId = "beforelifecycle0"
    const secret = "ab".repeat(32)
    const digest = new Bun.CryptoHasher("sha256").update(secret).digest("hex")
    // The row as that release wrote it: none of the new columns.
    await backend.exec(
      database,
      `INSERT INTO api_keys (key_id, brand_id, name, scopes, secret_sha256, created_at, expires_at, revoked_at)
       VALUES ('${keyId}', '${brandId}', 'old', 'campaigns:read', '${digest}', ${Date.now()}, NULL, NULL)`
    )
    const apiKey = `cak_${keyId}_${secret}`
    const server = await serveInProcess(database, backend.env)
    try {
      const answer = await call(server.url, { path: "/v1/whoami", apiKey })
      expect(answer.json).toEqual({ ok: true, keyId, brandId, scopes: ["campaigns:read"] })
      expect(answer.headers.get("ratelimit-policy")).toBe(`"default";q=120;w=60`)
      expect(answer.headers.get("api-key-expires")).toBeNull()
      const listed = await listKeys(database)
      expect(listed).toEqual([
        expect.objectContaining({ keyId, lastUsedAt: null, rateLimit: null, previousSecretEndsAt: null })
      ])
      const rolled = await rollKey(database, keyId)
      await backend.afterKeyChange()
      expect((await call(server.url, { path: "/v1/whoami", apiKey: rolled })).status).toBe(200)
      expect((await call(server.url, { path: "/v1/whoami", apiKey })).status).toBe(200)
    } finally {
      await server.stop()
    }
  })
})

describe.each(backends)("upgrading a database of the release before plannedPostAt's window on $name", (backend) => {
  it("migrates at start: one creator's activations of a campaign page as before, planned days stored outside the window are counted, and a retry of a request with one is refused (400), not replayed", async () => {
    const database = await backend.database()
    // Its activations stored before the counts' migration, which counts them as that release did.
    await migrateAsPreviousRelease(database)
    const brandId = crypto.randomUUID()
    const campaignId = "C0FFEE00-AAAA-4BBB-8CCC-DDDDEEEEFFFF"
    const [creator, otherCreator] = ["5d2a7c3e-1b4f-4e6a-8c9d-0e1f2a3b4c5d", "6e3b8d4f-2c5a-4f7b-9d0e-1f2a3b4c5d6e"]
    const stored = [
      { creatorId: creator, plannedPostAt: "1999-12-31" },
      { creatorId: otherCreator, plannedPostAt: "2026-12-01" },
      { creatorId: creator.toUpperCase(), plannedPostAt: "9999-12-31" },
      { creatorId: creator, plannedPostAt: null }
    ].map((a, i) => ({
      id: `01a0b1c2-0000-7000-8000-00000000000${i + 1}`,
      campaignId,
      creatorId: a.creatorId,
      status: "ACTIVE",
      socialUsername: "@before",
      plannedPostAt: a.plannedPostAt,
      activatedAt: `2026-11-2${i}T10:00:00.000Z`
    }))
    await backend.exec(
      database,
      `INSERT INTO activations (id, brand_id, key_id, creator_id, campaign_id, status, social_username, planned_post_at, activated_at) VALUES ${
        stored.map((a) =>
          `('${a.id}', '${brandId}', 'beforewindow0000', '${a.creatorId}', '${a.campaignId}', 'ACTIVE', '@before', ${
            a.plannedPostAt === null ? "NULL" : `'${a.plannedPostAt}'`
          }, '${a.activatedAt}')`
        ).join(", ")
      }`
    )
    // The answers stored for the two requests whose day is now outside the window.
    const outside = [stored[0]!, stored[2]!]
    await backend.exec(
      database,
      `INSERT INTO idempotency_keys (brand_id, idempotency_key, fingerprint, resource_id, status_code, response_body, created_at, expires_at) VALUES ${
        outside.map((a, i) =>
          `('${brandId}', 'outside-${i}', '${fingerprintOf(requestOf(a))}', '${a.id}', 200, '${
            JSON.stringify({ ok: true, activation: a })
          }', ${Date.now()}, ${Date.now() + 86_400_000})`
        ).join(", ")
      }`
    )
    await migrateAs(releaseBeforeDateWindow)(database)

    const key = await createKey(database, { brandId, scopes: ["campaigns:write", "analytics:read"] })
    const server = await serveInProcess(database, backend.env)
    try {
      const ids = async (query: string) =>
        (await call(server.url, { path: `/v1/activations?${query}`, apiKey: key.apiKey })).json.activations.map((
          a: { id: string }
        ) => a.id)
      expect(await ids(`campaignId=${campaignId}&creatorId=${creator}`)).toEqual([
        stored[3]!.id,
        stored[2]!.id,
        stored[0]!.id
      ])
      expect(await ids(`campaignId=${campaignId}&creatorId=${creator}&limit=1&startingAfter=${stored[2]!.id}`)).toEqual(
        [stored[0]!.id]
      )
      const counted = await call(server.url, { path: `/v1/campaigns/${campaignId}/analytics`, apiKey: key.apiKey })
      expect(counted.json.analytics).toMatchObject({
        activations: 4,
        creators: 2,
        plannedPostsByDay: [{ date: "1999-12-31", posts: 1 }, { date: "2026-12-01", posts: 1 }, {
          date: "9999-12-31",
          posts: 1
        }],
        unscheduled: 1
      })
      // Validation comes before the idempotency step (docs/integrators.md, Errors): the stored answer is not reached.
      for (const [i, activation] of outside.entries()) {
        const { body, path } = requestOf(activation)
        const retry = await call(server.url, {
          method: "POST",
          path,
          apiKey: key.apiKey,
          headers: { "idempotency-key": `outside-${i}`, "content-type": "application/json" },
          body: JSON.stringify(body)
        })
        expectEnvelope(retry, 400, "VALIDATION_ERROR")
        expect(retry.json.message).toBe("plannedPostAt must be a date from 2000-01-01 to 2099-12-31")
        expect(retry.headers.get("idempotent-replayed")).toBeNull()
        // Its entry stays: the key with a body the window accepts is another request.
        const corrected = await call(server.url, {
          method: "POST",
          path,
          apiKey: key.apiKey,
          headers: { "idempotency-key": `outside-${i}`, "content-type": "application/json" },
          body: JSON.stringify({ ...body, plannedPostAt: "2026-12-01" })
        })
        expectEnvelope(corrected, 409, "IDEMPOTENCY_CONFLICT")
      }
      expect(await backend.count(database, "SELECT 1 FROM activations")).toBe(4)
    } finally {
      await server.stop()
    }
  })
})

describe.each(backends)("upgrading a database of the release before the creators' first days on $name", (backend) => {
  it("migrates at start: every range counts the creators the release before counted, and a creator-day an instance of that release writes meanwhile is counted too", async () => {
    const database = await backend.database()
    await migrateAs(releaseBeforeFirstDays)(database)
    const brandId = crypto.randomUUID()
    const campaignId = crypto.randomUUID()
    const days = ["2026-03-01", "2026-03-02", "2026-03-03", "2026-03-04"]
    const creators = Array.from({ length: 5 }, (_, i) => `5d2a7c3e-1b4f-4e6a-8c9d-00000000000${i}`)
    // Creator i activated on the days whose number shares a bit with i + 1: each creator its own days.
    const written = creators.flatMap((creator, i) =>
      days.filter((_, d) => ((d + 1) & (i + 1)) !== 0).map((day) => ({ creator, day }))
    )
    const insertDays = (rows: ReadonlyArray<{ readonly creator: string; readonly day: string }>) =>
      backend.exec(
        database,
        `INSERT INTO campaign_creator_days (brand_id, campaign_key, day, creator_key) VALUES ${
          rows.map(({ creator, day }) => `('${brandId}', '${campaignId}', '${day}', '${creator}')`).join(", ")
        }`
      )
    // What that release wrote for them, besides the records (which the counts do not read).
    await insertDays(written)
    await backend.exec(
      database,
      `INSERT INTO campaign_days (brand_id, campaign_key, day, planned_day, activations) VALUES ${
        days.map((day) =>
          `('${brandId}', '${campaignId}', '${day}', '', ${written.filter((w) => w.day === day).length})`
        )
          .join(", ")
      }`
    )

    const key = await createKey(database, { brandId, scopes: ["analytics:read"] })
    const server = await serveInProcess(database, backend.env)
    try {
      const everyRange = async (rows: ReadonlyArray<{ readonly creator: string; readonly day: string }>) => {
        const counted: Array<string> = []
        const expected: Array<string> = []
        for (const from of [undefined, ...days]) {
          for (const to of [undefined, ...days]) {
            if (from !== undefined && to !== undefined && from > to) continue
            const query = [from === undefined ? [] : [`from=${from}`], to === undefined ? [] : [`to=${to}`]].flat()
            const answer = await call(server.url, {
              path: `/v1/campaigns/${campaignId}/analytics?${query.join("&")}`,
              apiKey: key.apiKey
            })
            counted.push(`${from}..${to}: ${answer.json.analytics.creators}`)
            expected.push(`${from}..${to}: ${
              new Set(
                rows.filter(({ day }) => (from === undefined || day >= from) && (to === undefined || day <= to)).map((
                  row
                ) => row.creator)
              ).size
            }`)
          }
        }
        expect(counted).toEqual(expected)
      }
      await everyRange(written)
      // During a rolling deploy an instance of the release before writes creator-days as it always did.
      const later = [{ creator: creators[0]!, day: "2026-03-02" }, {
        creator: `${creators[0]!.slice(0, -1)}9`,
        day: "2026-03-03"
      }]
      await insertDays(later)
      await everyRange([...written, ...later])
    } finally {
      await server.stop()
    }
  })
})
