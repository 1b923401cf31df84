import { SqlClient, type Statement } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Context, Effect, Layer, Option } from "effect"
import { type BatchedInsert, insertBatched, noneRefused } from "../Database/BatchedInsert.ts"
import { ReadSql } from "../Database/Sql.ts"
import type { Activation } from "../Domain/Activation.ts"
import { spans } from "../Spans.ts"
import { campaignCounts, type Counts } from "./CampaignCounts.ts"

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

/** A page of a brand's activations: ids below `below` (in any letter case), newest first, at most `limit`. */
export interface Page {
  readonly creatorId: string | undefined
  readonly campaignId: string | undefined
  readonly below: string | undefined
  readonly limit: number
}

/** A bound past every id (lowercase hexadecimal and dashes): a letter above every hexadecimal digit. */
const aboveEveryId = "g"

const columns = (sql: SqlClient.SqlClient) =>
  sql`id, campaign_id, creator_id, status, social_username, planned_post_at, activated_at`

/** The list's reads, one per combination of its filters, each taking the values it compares. */
interface Pages<R> {
  readonly all: (brandId: string, below: string, limit: number) => R
  readonly creator: (brandId: string, creatorId: string, below: string, limit: number) => R
  readonly campaign: (brandId: string, campaignId: string, below: string, limit: number) => R
  readonly both: (brandId: string, creatorId: string, campaignId: string, below: string, limit: number) => R
}

/**
 * One statement per combination of filters, so that each is served by the index that begins with
 * the brand and every filter it has, and walks only the rows of its page (docs/operators.md, Reliability:
 * indexes and counts).
 */
const pageStatements = (sql: SqlClient.SqlClient): Pages<Statement.Statement<Stored>> => {
  const selected = columns(sql)
  return {
    all: (brandId, below, limit) =>
      sql<Stored>`SELECT ${selected} FROM activations
                  WHERE brand_id = ${brandId} AND id < ${below} ORDER BY id DESC LIMIT ${limit}`,
    creator: (brandId, creatorId, below, limit) =>
      sql<Stored>`SELECT ${selected} FROM activations
                  WHERE brand_id = ${brandId} AND lower(creator_id) = ${creatorId} AND id < ${below}
                  ORDER BY id DESC LIMIT ${limit}`,
    campaign: (brandId, campaignId, below, limit) =>
      sql<Stored>`SELECT ${selected} FROM activations
                  WHERE brand_id = ${brandId} AND lower(campaign_id) = ${campaignId} AND id < ${below}
                  ORDER BY id DESC LIMIT ${limit}`,
    both: (brandId, creatorId, campaignId, below, limit) =>
      sql<Stored>`SELECT ${selected} FROM activations
                  WHERE brand_id = ${brandId} AND lower(campaign_id) = ${campaignId}
                    AND lower(creator_id) = ${creatorId} AND id < ${below}
                  ORDER BY id DESC LIMIT ${limit}`
  }
}

/** The read of `pages` that serves `page`, given its values: ids lowercased, as stored and indexed. */
const pageOf = <R>(pages: Pages<R>, brandId: string, { below, campaignId, creatorId, limit }: Page): R => {
  const from = below?.toLowerCase() ?? aboveEveryId
  return creatorId === undefined
    ? campaignId === undefined
      ? pages.all(brandId, from, limit)
      : pages.campaign(brandId, campaignId.toLowerCase(), from, limit)
    : campaignId === undefined
    ? pages.creator(brandId, creatorId.toLowerCase(), from, limit)
    : pages.both(brandId, creatorId.toLowerCase(), campaignId.toLowerCase(), from, limit)
}

/**
 * The statement `list` runs for a page, as it runs it: for reading its plan (the tests hold each
 * combination of filters to its index, docs/operators.md, Reliability: indexes and counts).
 */
export const pageStatement = (
  sql: SqlClient.SqlClient
): (brandId: string, page: Page) => Statement.Statement<Stored> => {
  const statements = pageStatements(sql)
  return (brandId, page) => pageOf(statements, brandId, page)
}

/**
 * Activation records. Writes join the caller's transaction (and its batch, see GroupCommit). Every
 * read takes the brand: there is no query path to another brand's records (docs/integrators.md, Reads). Reads
 * see only what is committed. SQL errors are defects.
 */
export class ActivationsRepo extends Context.Tag("Activations/ActivationsRepo")<ActivationsRepo, {
  readonly insert: (
    activation: Activation,
    owner: { readonly brandId: string; readonly keyId: string }
  ) => Effect.Effect<void>
  readonly findById: (brandId: string, id: string) => Effect.Effect<Option.Option<Activation>>
  readonly list: (brandId: string, page: Page) => Effect.Effect<ReadonlyArray<Activation>>
  /** The activations of a campaign whose `activatedAt` falls on a UTC day from `from` to `to`, both inclusive when given. */
  readonly counts: (
    brandId: string,
    campaignId: string,
    from: string | undefined,
    to: string | undefined
  ) => Effect.Effect<Counts>
}>() {
  static readonly Live = Layer.effect(
    ActivationsRepo,
    Effect.gen(function*() {
      const span = yield* spans
      const sql = yield* SqlClient.SqlClient
      const read = yield* ReadSql
      const byId = read.prepare((brandId: string, id: string) =>
        sql<Stored>`SELECT ${columns(sql)} FROM activations WHERE id = ${id} AND brand_id = ${brandId}`
      )
      const statements = pageStatements(sql)
      const pages: Pages<Effect.Effect<ReadonlyArray<Stored>, SqlError>> = {
        all: read.prepare(statements.all),
        creator: read.prepare(statements.creator),
        campaign: read.prepare(statements.campaign),
        both: read.prepare(statements.both)
      }
      const campaign = campaignCounts(sql, read)
      const into: BatchedInsert<Row> = {
        table: "activations",
        keyOf: (row) => row.id,
        refuses: false,
        one: (row) => Effect.orDie(Effect.as(sql`INSERT INTO activations ${sql.insert(row)}`, true)),
        many: (rows) => Effect.as(sql`INSERT INTO activations ${sql.insert(rows)}`, noneRefused)
      }
      return {
        // The record and its campaign's counts, in the caller's transaction: all of them or none.
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
            Effect.zipRight(campaign.add(a, owner.brandId)),
            span("ActivationsRepo.insert")
          ),
        findById: (brandId, id) =>
          byId(brandId, id.toLowerCase()).pipe(
            Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), fromStored)),
            Effect.orDie,
            span("ActivationsRepo.findById")
          ),
        list: (brandId, page) =>
          pageOf(pages, brandId, page).pipe(
            Effect.map((rows) => rows.map(fromStored)),
            Effect.orDie,
            span("ActivationsRepo.list")
          ),
        counts: (brandId, campaignId, from, to) =>
          campaign.read(brandId, campaignId, from, to).pipe(
            Effect.orDie,
            span("ActivationsRepo.counts")
          )
      }
    })
  )
}
