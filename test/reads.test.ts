/**
 * The reads (docs/integrators.md, Reads and Analytics), on both backends, against a server built in process:
 * the raw wire of each answer, brand isolation tried with every read, paging walked while
 * activations keep arriving, and analytics against an oracle computed from the records.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, FastCheck as fc, Layer } from "effect"
import { ActivationsRepo } from "../src/Activations/ActivationsRepo.ts"
import { SqlLive } from "../src/Database/Sql.ts"
import { backends } from "./support/backends.ts"
import { activatePath, type Answer, call, uniqueKey } from "./support/client.ts"
import { expectEnvelope } from "./support/contract.ts"
import { type InProcessServer, serveInProcess } from "./support/inProcess.ts"
import { type CreatedTestKey, createKey } from "./support/server.ts"

const uuid = () => crypto.randomUUID()

/** `text` with its letters in random case: ids are taken in any letter case. */
const anyCase = (text: string) => [...text].map((c) => (Math.random() < 0.5 ? c.toUpperCase() : c)).join("")

const activationKeys = ["id", "campaignId", "creatorId", "status", "socialUsername", "plannedPostAt", "activatedAt"]

describe.each(backends)("reads on $name", (backend) => {
  let database: string
  let server: InProcessServer
  /** Brand A's writer, reader and analyst; brand B's writer. */
  let writer: CreatedTestKey
  let reader: CreatedTestKey
  let analyst: CreatedTestKey
  let other: CreatedTestKey

  beforeAll(async () => {
    database = await backend.database()
    server = await serveInProcess(database, { ...backend.env, RATE_LIMIT_MAX: "1000000" })
    writer = await createKey(database, { scopes: ["campaigns:write"] })
    reader = await createKey(database, { brandId: writer.brandId, scopes: ["campaigns:read"] })
    analyst = await createKey(database, { brandId: writer.brandId, scopes: ["analytics:read"] })
    other = await createKey(database, { scopes: ["campaigns:write", "analytics:read"] })
  })
  afterAll(async () => {
    await server?.stop()
  })

  const activateAs = async (
    key: CreatedTestKey,
    creator = uuid(),
    campaign = uuid(),
    body: object = { socialUsername: "@reader" }
  ) => {
    const answer = await call(server.url, {
      method: "POST",
      path: activatePath(creator, campaign),
      apiKey: key.apiKey,
      headers: { "idempotency-key": uniqueKey(), "content-type": "application/json" },
      body: JSON.stringify(body)
    })
    expect(answer.status).toBe(200)
    return answer
  }
  const get = (key: CreatedTestKey, id: string, headers: Record<string, string> = {}) =>
    call(server.url, { path: `/v1/activations/${id}`, apiKey: key.apiKey, headers })
  const list = (key: CreatedTestKey, query = "") =>
    call(server.url, { path: `/v1/activations${query}`, apiKey: key.apiKey })
  const analytics = (key: CreatedTestKey, campaign: string, query = "") =>
    call(server.url, { path: `/v1/campaigns/${campaign}/analytics${query}`, apiKey: key.apiKey })

  describe("GET /v1/activations/{activationId}", () => {
    it("answers the record exactly as activate answered it, with a strong ETag, to a reader and to a writer", async () => {
      const made = await activateAs(writer, uuid(), uuid(), { socialUsername: "@exact", plannedPostAt: "2026-12-24" })
      for (const key of [reader, writer]) {
        const read = await get(key, made.json.activation.id)
        expect(read.status).toBe(200)
        expect(read.text).toBe(made.text)
        expect(Object.keys(read.json.activation)).toEqual(activationKeys)
        expect(read.headers.get("content-type")).toBe("application/json")
        expect(read.headers.get("etag")).toMatch(/^"[A-Za-z0-9_-]{27}"$/)
        expect(read.headers.get("ratelimit")).not.toBeNull()
      }
      expect((await get(reader, made.json.activation.id.toUpperCase())).text).toBe(made.text)
    })

    it("answers 304 without a body or a type to If-None-Match with its ETag (weak or strong, in a list, or *), and 200 to another", async () => {
      const made = await activateAs(writer)
      const { headers } = await get(reader, made.json.activation.id)
      const etag = headers.get("etag")!
      for (const ifNoneMatch of [etag, `W/${etag}`, `"other", ${etag}`, "*"]) {
        const unchanged = await get(reader, made.json.activation.id, { "if-none-match": ifNoneMatch })
        expect({ ifNoneMatch, status: unchanged.status, text: unchanged.text }).toEqual({
          ifNoneMatch,
          status: 304,
          text: ""
        })
        expect(unchanged.headers.get("etag")).toBe(etag)
        expect(unchanged.headers.get("content-type")).toBeNull()
      }
      expect((await get(reader, made.json.activation.id, { "if-none-match": `"stale"` })).status).toBe(200)
    })

    it("answers another brand's activation exactly as an id that exists nowhere: 404 NOT_FOUND", async () => {
      const theirs = await activateAs(other)
      const id = theirs.json.activation.id
      const nowhere = uuid()
      const foreign = await get(reader, id)
      const missing = await get(reader, nowhere)
      expectEnvelope(foreign, 404, "NOT_FOUND")
      expectEnvelope(missing, 404, "NOT_FOUND")
      expect(foreign.json.message.replace(id, "<id>")).toBe(missing.json.message.replace(nowhere, "<id>"))
      const names = (answer: Answer) => Object.keys(answer.headers.toJSON()).sort()
      expect(names(foreign)).toEqual(names(missing))
    })

    it("is 400 for a malformed id, 401 without a key, 403 naming campaigns:read for a key without it", async () => {
      expectEnvelope(await get(reader, "not-a-uuid"), 400, "VALIDATION_ERROR")
      expect((await get(reader, "not-a-uuid")).json.message).toContain("activationId")
      expectEnvelope(await call(server.url, { path: `/v1/activations/${uuid()}` }), 401, "UNAUTHORIZED")
      const refused = await get(analyst, uuid())
      expectEnvelope(refused, 403, "FORBIDDEN")
      expect(refused.headers.get("www-authenticate")).toBe(`Bearer error="insufficient_scope", scope="campaigns:read"`)
    })
  })

  describe("GET /v1/activations", () => {
    it("pages the brand's records newest first with hasMore and a Link to the next page, and filters in any letter case", async () => {
      const brand = await createKey(database, { scopes: ["campaigns:write"] })
      const creator = uuid()
      const campaign = uuid()
      const made: Array<string> = []
      for (let i = 0; i < 5; i++) {
        made.push((await activateAs(brand, i % 2 === 0 ? creator : uuid(), campaign)).json.activation.id)
      }
      await activateAs(brand, creator, uuid())
      const first = await list(brand, `?campaignId=${anyCase(campaign)}&limit=2`)
      expect(first.status).toBe(200)
      expect(Object.keys(first.json)).toEqual(["ok", "activations", "hasMore"])
      expect(first.json.activations.map((a: any) => a.id)).toEqual([made[4], made[3]])
      expect(first.json.activations.map((a: object) => Object.keys(a))).toEqual([activationKeys, activationKeys])
      expect(first.json.hasMore).toBe(true)
      const link = first.headers.get("link")!
      expect(link).toMatch(/^<\/v1\/activations\?[^>]+>; rel="next"$/)
      const second = await call(server.url, { path: link.slice(1, link.indexOf(">")), apiKey: brand.apiKey })
      expect(second.json.activations.map((a: any) => a.id)).toEqual([made[2], made[1]])
      const last = await call(server.url, {
        path: second.headers.get("link")!.slice(1, second.headers.get("link")!.indexOf(">")),
        apiKey: brand.apiKey
      })
      expect(last.json).toEqual({ ok: true, activations: [expect.objectContaining({ id: made[0] })], hasMore: false })
      expect(last.headers.get("link")).toBeNull()
      const byCreator = await list(brand, `?creatorId=${creator.toUpperCase()}&campaignId=${campaign}`)
      expect(byCreator.json.activations.map((a: any) => a.id)).toEqual([made[4], made[2], made[0]])
      // A position need not be a record: any UUID is a place in the order.
      const fromTop = await list(brand, `?campaignId=${campaign}&startingAfter=ffffffff-ffff-7fff-bfff-ffffffffffff`)
      expect(fromTop.json.activations).toHaveLength(5)
    })

    it("never shows another brand's records, whatever the filters", async () => {
      const theirs = await activateAs(other)
      const { activation } = theirs.json
      for (
        const query of ["", `?campaignId=${activation.campaignId}`, `?creatorId=${activation.creatorId}`, `?limit=100`]
      ) {
        const answer = await list(reader, query)
        expect(answer.status).toBe(200)
        expect(answer.json.activations.map((a: any) => a.id)).not.toContain(activation.id)
      }
      const filtered = await list(reader, `?campaignId=${activation.campaignId}&creatorId=${activation.creatorId}`)
      expect(filtered.json).toEqual({ ok: true, activations: [], hasMore: false })
    })

    it.each([
      ["?limit=0", "limit"],
      ["?limit=101", "limit"],
      ["?limit=x", "limit"],
      ["?limit=1&limit=2", "limit"],
      ["?creatorId=nope", "creatorId"],
      ["?campaignId=1234", "campaignId"],
      ["?startingAfter=last", "startingAfter"],
      ["?sort=asc", "sort"],
      // A name that an object's prototype has is a parameter like any other.
      ["?__proto__=x", "__proto__"],
      ["?constructor=x", "constructor"]
    ])("is 400 VALIDATION_ERROR naming the parameter for %s", async (query, named) => {
      const answer = await list(reader, query)
      expectEnvelope(answer, 400, "VALIDATION_ERROR")
      expect(answer.json.message).toContain(named)
    })

    it("is 403 naming campaigns:read for an analytics key, and 401 without a key", async () => {
      const refused = await list(analyst)
      expectEnvelope(refused, 403, "FORBIDDEN")
      expect(refused.headers.get("www-authenticate")).toContain(`scope="campaigns:read"`)
      expectEnvelope(await call(server.url, { path: "/v1/activations" }), 401, "UNAUTHORIZED")
    })

    it("sees every record that existed when a walk began exactly once, in order, while new ones arrive (property)", async () => {
      const brand = await createKey(database, { scopes: ["campaigns:write"] })
      const creators = [uuid(), uuid()]
      const campaigns = [uuid(), uuid()]
      const made: Array<{ id: string; creatorId: string; campaignId: string }> = []
      const make = async (creator: number, campaign: number) => {
        const { activation } = (await activateAs(brand, creators[creator], campaigns[campaign])).json
        made.push({ id: activation.id, creatorId: creators[creator]!, campaignId: campaigns[campaign]! })
      }
      for (let i = 0; i < 12; i++) await make(i % 2, Math.floor(i / 2) % 2)
      await fc.assert(
        fc.asyncProperty(
          fc.integer({ min: 1, max: 5 }),
          fc.option(fc.integer({ min: 0, max: 1 })),
          fc.option(fc.integer({ min: 0, max: 1 })),
          fc.array(fc.tuple(fc.integer({ min: 0, max: 1 }), fc.integer({ min: 0, max: 1 })), { maxLength: 4 }),
          async (limit, creator, campaign, arrivals) => {
            const matches = (record: (typeof made)[number]) =>
              (creator === null || record.creatorId === creators[creator]) &&
              (campaign === null || record.campaignId === campaigns[campaign])
            const existing = made.filter(matches).map(({ id }) => id).sort().reverse()
            const query = new URLSearchParams({ limit: String(limit) })
            if (creator !== null) query.set("creatorId", anyCase(creators[creator]!))
            if (campaign !== null) query.set("campaignId", anyCase(campaigns[campaign]!))
            let path: string | undefined = `/v1/activations?${query}`
            const seen: Array<string> = []
            let pages = 0
            while (path !== undefined) {
              const page: Answer = await call(server.url, { path, apiKey: brand.apiKey })
              expect(page.status).toBe(200)
              seen.push(...page.json.activations.map((a: any) => a.id))
              const link = page.headers.get("link")
              expect(link !== null).toBe(page.json.hasMore)
              path = link === null ? undefined : link.slice(1, link.indexOf(">"))
              // New activations arrive between pages: they are newer than every cursor, never on a later page.
              const arrival = arrivals[pages++]
              if (arrival !== undefined) await make(arrival[0], arrival[1])
            }
            expect(seen).toEqual(existing)
          }
        ),
        { numRuns: 12 }
      )
    })
  })

  describe("GET /v1/campaigns/{campaignId}/analytics", () => {
    interface Seeded {
      readonly brandId: string
      readonly creatorId: string
      readonly campaignId: string
      readonly activatedAt: string
      readonly plannedPostAt: string | null
    }
    const day = (n: number) => new Date(Date.UTC(2026, 0, 1) + n * 86_400_000).toISOString().slice(0, 10)
    /**
     * Records written as activate writes them (the repository's insert: the record and its
     * campaign's counts), with the dates and plans the test draws, which a request cannot choose.
     */
    const seed = (records: ReadonlyArray<Seeded>) =>
      Effect.flatMap(ActivationsRepo, (repo) =>
        Effect.forEach(records, (r) =>
          repo.insert(
            {
              id: uuid(),
              campaignId: r.campaignId,
              creatorId: r.creatorId,
              status: "ACTIVE",
              socialUsername: "@seeded",
              plannedPostAt: r.plannedPostAt,
              activatedAt: r.activatedAt
            },
            { brandId: r.brandId, keyId: "seeded0000000000" }
          ), { discard: true })).pipe(
          Effect.provide(ActivationsRepo.Live.pipe(Layer.provide(SqlLive))),
          Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["DATABASE_URL", database]]))),
          Effect.runPromise
        )

    /** What docs/integrators.md says the answer is, computed from the records. */
    const oracle = (
      records: ReadonlyArray<Seeded>,
      brandId: string,
      campaignId: string,
      from?: string,
      to?: string
    ) => {
      const counted = records.filter((r) =>
        r.brandId === brandId && r.campaignId.toLowerCase() === campaignId.toLowerCase() &&
        (from === undefined || r.activatedAt.slice(0, 10) >= from) &&
        (to === undefined || r.activatedAt.slice(0, 10) <= to)
      )
      const tally = (days: Array<string>) =>
        [...new Set(days)].sort().map((date) => [date, days.filter((d) => d === date).length] as const)
      return {
        campaignId,
        from: from ?? null,
        to: to ?? null,
        activations: counted.length,
        creators: new Set(counted.map((r) => r.creatorId.toLowerCase())).size,
        activationsByDay: tally(counted.map((r) => r.activatedAt.slice(0, 10))).map(([date, activations]) => ({
          date,
          activations
        })),
        plannedPostsByDay: tally(counted.flatMap((r) => (r.plannedPostAt === null ? [] : [r.plannedPostAt]))).map((
          [date, posts]
        ) => ({ date, posts })),
        unscheduled: counted.filter((r) => r.plannedPostAt === null).length
      }
    }

    it("counts the brand's activations of the campaign as the oracle does, for random records and ranges (property)", async () => {
      const creators = [uuid(), uuid(), uuid()]
      await fc.assert(
        fc.asyncProperty(
          fc.array(
            fc.record({
              ours: fc.boolean(),
              campaign: fc.boolean(),
              creator: fc.integer({ min: 0, max: 2 }),
              activated: fc.integer({ min: 0, max: 9 }),
              at: fc.integer({ min: 0, max: 86_399_999 }),
              planned: fc.option(fc.integer({ min: 0, max: 12 }))
            }),
            { maxLength: 30 }
          ),
          // Each kind of range as often as the others: the whole campaign is read another way.
          fc.constantFrom("whole campaign", "from", "to", "between"),
          fc.integer({ min: 0, max: 9 }),
          fc.integer({ min: 0, max: 9 }),
          async (drawn, range, firstDay, secondDay) => {
            const campaign = uuid()
            const records: Array<Seeded> = drawn.map((r) => ({
              brandId: r.ours ? writer.brandId : other.brandId,
              creatorId: anyCase(creators[r.creator]!),
              campaignId: r.campaign ? anyCase(campaign) : uuid(),
              activatedAt: new Date(Date.parse(`${day(r.activated)}T00:00:00Z`) + r.at).toISOString(),
              plannedPostAt: r.planned === null ? null : day(r.planned)
            }))
            await seed(records)
            const [low, high] = [Math.min(firstDay, secondDay), Math.max(firstDay, secondDay)]
            const from = range === "from" || range === "between" ? day(low) : undefined
            const to = range === "to" || range === "between" ? day(high) : undefined
            const query = new URLSearchParams({
              ...(from === undefined ? {} : { from }),
              ...(to === undefined ? {} : { to })
            })
            const answer = await analytics(analyst, campaign, `?${query}`)
            expect(answer.status).toBe(200)
            expect(answer.json).toStrictEqual({
              ok: true,
              analytics: oracle(records, writer.brandId, campaign, from, to)
            })
          }
        ),
        { numRuns: 20 }
      )
    })

    it("is all zeros and empty lists for a campaign the brand has no activation of, another brand's included", async () => {
      const theirs = await activateAs(other)
      const campaign = theirs.json.activation.campaignId
      expect((await analytics(analyst, campaign)).json).toStrictEqual({
        ok: true,
        analytics: {
          campaignId: campaign,
          from: null,
          to: null,
          activations: 0,
          creators: 0,
          activationsByDay: [],
          plannedPostsByDay: [],
          unscheduled: 0
        }
      })
      expect((await analytics(other, campaign)).json.analytics.activations).toBe(1)
    })

    it.each([
      ["?from=2026-02-30", "from"],
      ["?to=2026-1-5", "to"],
      ["?from=2026-03-02&to=2026-03-01", "from"],
      ["?granularity=day", "granularity"]
    ])("is 400 VALIDATION_ERROR naming the parameter for %s", async (query, named) => {
      const answer = await analytics(analyst, uuid(), query)
      expectEnvelope(answer, 400, "VALIDATION_ERROR")
      expect(answer.json.message).toContain(named)
    })

    it("is 400 for a malformed campaign id and 403 naming analytics:read for a key with campaigns scopes only", async () => {
      expectEnvelope(await analytics(analyst, "campaign-1"), 400, "VALIDATION_ERROR")
      const refused = await analytics(writer, uuid())
      expectEnvelope(refused, 403, "FORBIDDEN")
      expect(refused.headers.get("www-authenticate")).toBe(`Bearer error="insufficient_scope", scope="analytics:read"`)
    })
  })
})
