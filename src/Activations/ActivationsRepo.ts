import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer, Option } from "effect"
import type { Activation } from "../Domain/Activation.ts"
import { type BatchedInsert, insertBatched } from "../Database/GroupCommit.ts"
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

/** Activation records. Writes join the caller's transaction (and its batch, see GroupCommit). SQL errors are defects. */
export class ActivationsRepo extends Context.Tag("Activations/ActivationsRepo")<ActivationsRepo, {
  readonly insert: (activation: Activation, owner: { readonly brandId: string; readonly keyId: string }) => Effect.Effect<void>
  readonly findById: (id: string) => Effect.Effect<Option.Option<Activation>>
}>() {
  static readonly Live = Layer.effect(
    ActivationsRepo,
    Effect.gen(function*() {
      const span = yield* spans
      const sql = yield* SqlClient.SqlClient
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
        findById: (id) =>
          sql<Stored>`SELECT id, campaign_id, creator_id, status, social_username, planned_post_at, activated_at
                      FROM activations WHERE id = ${id}`.pipe(
            Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), fromStored)),
            Effect.orDie,
            span("ActivationsRepo.findById")
          )
      }
    })
  )
}
