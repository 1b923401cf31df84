import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer, Option } from "effect"
import type { Activation } from "../Domain/Activation.ts"
import { type BatchedInsert, insertBatched } from "../Database/GroupCommit.ts"
import { ReadSql } from "../Database/Sql.ts"
import { spans } from "../Spans.ts"

type Stored = {
  readonly id: string
  readonly campaign_id: string
  readonly creator_id: string
  readonly status: "ACTIVE"
  readonly social_username: string
  readonly planned_post_at: string | null
  readonly activated_at: string
}

type Row = Stored & { readonly brand_id: string; readonly key_id: string }

const fromStored = (row: Stored): Activation => ({
  id: row.id,
  campaignId: row.campaign_id,
  creatorId: row.creator_id,
  status: row.status,
  socialUsername: row.social_username,
  plannedPostAt: row.planned_post_at,
  activatedAt: row.activated_at
})

/** A page of a brand's activations: ids below `below` (a lowercase id), newest first, at most `limit`. */
export interface Page {
  readonly creatorId: string | undefined
  readonly campaignId: string | undefined
  readonly below: string | undefined
  readonly limit: number
}

/** One campaign's activations of one brand, counted (README, Analytics). */
export interface Counts {
  readonly byDay: ReadonlyArray<{ readonly date: string; readonly activations: number }>
  /** By planned day, ascending; `date` null for the unscheduled. */
  readonly byPlannedDay: ReadonlyArray<{ readonly date: string | null; readonly posts: number }>
  readonly creators: number
}

/**
 * Bounds past every id (lowercase hexadecimal and dashes) and every timestamp (an ISO date first):
 * letters and digits, which every collation orders the same way (PostgreSQL's may skip punctuation).
 */
const aboveEveryId = "g"
const afterEveryTimestamp = "99999"

/**
 * Activation records. Writes join the caller's transaction (and its batch, see GroupCommit). Every
 * read takes the brand: there is no query path to another brand's records (README, Reads). Reads
 * see only what is committed. SQL errors are defects.
 */
export class ActivationsRepo extends Context.Tag("Activations/ActivationsRepo")<ActivationsRepo, {
  readonly insert: (activation: Activation, owner: { readonly brandId: string; readonly keyId: string }) => Effect.Effect<void>
  readonly findById: (brandId: string, id: string) => Effect.Effect<Option.Option<Activation>>
  readonly list: (brandId: string, page: Page) => Effect.Effect<ReadonlyArray<Activation>>
  /** Activations whose `activatedAt` is on or after `from` and before `until` (timestamps or day prefixes). */
  readonly counts: (brandId: string, campaignId: string, from: string | undefined, until: string | undefined) => Effect.Effect<Counts>
}>() {
  static readonly Live = Layer.effect(
    ActivationsRepo,
    Effect.gen(function*() {
      const span = yield* spans
      const sql = yield* SqlClient.SqlClient
      const read = yield* ReadSql
      const columns = sql`id, campaign_id, creator_id, status, social_username, planned_post_at, activated_at`
      const byId = read.prepare((brandId: string, id: string) =>
        sql<Stored>`SELECT ${columns} FROM activations WHERE id = ${id} AND brand_id = ${brandId}`
      )
      // One statement per combination of filters, each served by its own index (README, Reads).
      const pages = {
        all: read.prepare((brandId: string, below: string, limit: number) =>
          sql<Stored>`SELECT ${columns} FROM activations
                      WHERE brand_id = ${brandId} AND id < ${below} ORDER BY id DESC LIMIT ${limit}`
        ),
        creator: read.prepare((brandId: string, creatorId: string, below: string, limit: number) =>
          sql<Stored>`SELECT ${columns} FROM activations
                      WHERE brand_id = ${brandId} AND lower(creator_id) = ${creatorId} AND id < ${below}
                      ORDER BY id DESC LIMIT ${limit}`
        ),
        campaign: read.prepare((brandId: string, campaignId: string, below: string, limit: number) =>
          sql<Stored>`SELECT ${columns} FROM activations
                      WHERE brand_id = ${brandId} AND lower(campaign_id) = ${campaignId} AND id < ${below}
                      ORDER BY id DESC LIMIT ${limit}`
        ),
        both: read.prepare((brandId: string, creatorId: string, campaignId: string, below: string, limit: number) =>
          sql<Stored>`SELECT ${columns} FROM activations
                      WHERE brand_id = ${brandId} AND lower(campaign_id) = ${campaignId}
                        AND lower(creator_id) = ${creatorId} AND id < ${below}
                      ORDER BY id DESC LIMIT ${limit}`
        )
      }
      // The campaign's rows in the range, read from one covering index (README, Analytics).
      const inRange = (brandId: string, campaignId: string, from: string, until: string) =>
        sql`brand_id = ${brandId} AND lower(campaign_id) = ${campaignId} AND activated_at >= ${from} AND activated_at < ${until}`
      const activatedByDay = read.prepare((brandId: string, campaignId: string, from: string, until: string) =>
        sql<{ day: string; n: number | string }>`SELECT substr(activated_at, 1, 10) AS day, COUNT(*) AS n FROM activations
          WHERE ${inRange(brandId, campaignId, from, until)} GROUP BY substr(activated_at, 1, 10) ORDER BY day`
      )
      const plannedByDay = read.prepare((brandId: string, campaignId: string, from: string, until: string) =>
        sql<{ day: string | null; n: number | string }>`SELECT planned_post_at AS day, COUNT(*) AS n FROM activations
          WHERE ${inRange(brandId, campaignId, from, until)} GROUP BY planned_post_at ORDER BY planned_post_at`
      )
      const distinctCreators = read.prepare((brandId: string, campaignId: string, from: string, until: string) =>
        sql<{ n: number | string }>`SELECT COUNT(DISTINCT lower(creator_id)) AS n FROM activations
          WHERE ${inRange(brandId, campaignId, from, until)}`
      )
      const into: BatchedInsert<Row> = {
        one: (row) => Effect.orDie(Effect.as(sql`INSERT INTO activations ${sql.insert(row)}`, true)),
        many: (rows) => Effect.as(sql`INSERT INTO activations ${sql.insert(rows)}`, rows.length)
      }
      return {
        insert: (a, owner) =>
          insertBatched(into, {
            id: a.id,
            brand_id: owner.brandId,
            key_id: owner.keyId,
            creator_id: a.creatorId,
            campaign_id: a.campaignId,
            status: a.status,
            social_username: a.socialUsername,
            planned_post_at: a.plannedPostAt,
            activated_at: a.activatedAt
          }).pipe(
            Effect.asVoid,
            span("ActivationsRepo.insert")
          ),
        findById: (brandId, id) =>
          byId(brandId, id.toLowerCase()).pipe(
            Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), fromStored)),
            Effect.orDie,
            span("ActivationsRepo.findById")
          ),
        list: (brandId, { below, campaignId, creatorId, limit }) => {
          const from = below?.toLowerCase() ?? aboveEveryId
          const rows = creatorId === undefined
            ? campaignId === undefined
              ? pages.all(brandId, from, limit)
              : pages.campaign(brandId, campaignId.toLowerCase(), from, limit)
            : campaignId === undefined
            ? pages.creator(brandId, creatorId.toLowerCase(), from, limit)
            : pages.both(brandId, creatorId.toLowerCase(), campaignId.toLowerCase(), from, limit)
          return rows.pipe(Effect.map((rows) => rows.map(fromStored)), Effect.orDie, span("ActivationsRepo.list"))
        },
        counts: (brandId, campaignId, from, until) => {
          const args = [brandId, campaignId.toLowerCase(), from ?? "", until ?? afterEveryTimestamp] as const
          return Effect.all([activatedByDay(...args), plannedByDay(...args), distinctCreators(...args)]).pipe(
            Effect.map(([days, planned, creators]) => ({
              byDay: days.map((row) => ({ date: row.day, activations: Number(row.n) })),
              byPlannedDay: planned.map((row) => ({ date: row.day, posts: Number(row.n) })),
              creators: Number(creators[0]?.n ?? 0)
            })),
            Effect.orDie,
            span("ActivationsRepo.counts")
          )
        }
      }
    })
  )
}
