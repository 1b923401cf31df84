import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer, Option } from "effect"
import type { Activation } from "../Domain/Activation.ts"
import { span } from "../Edge/Span.ts"

interface Stored {
  readonly id: string
  readonly campaign_id: string
  readonly creator_id: string
  readonly status: "ACTIVE"
  readonly social_username: string
  readonly planned_post_at: string | null
  readonly activated_at: string
}

const fromStored = (row: Stored): Activation => ({
  id: row.id,
  campaignId: row.campaign_id,
  creatorId: row.creator_id,
  status: row.status,
  socialUsername: row.social_username,
  plannedPostAt: row.planned_post_at,
  activatedAt: row.activated_at
})

/** Activation records. Writes join the caller's transaction. SQL errors are defects. */
export class ActivationsRepo extends Context.Tag("Activations/ActivationsRepo")<ActivationsRepo, {
  readonly insert: (activation: Activation, owner: { readonly brandId: string; readonly keyId: string }) => Effect.Effect<void>
  readonly findById: (id: string) => Effect.Effect<Option.Option<Activation>>
}>() {
  static readonly Live = Layer.effect(
    ActivationsRepo,
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      return {
        insert: (a, owner) =>
          sql`INSERT INTO activations
                (id, brand_id, key_id, creator_id, campaign_id, status, social_username, planned_post_at, activated_at)
              VALUES (${a.id}, ${owner.brandId}, ${owner.keyId}, ${a.creatorId}, ${a.campaignId}, ${a.status},
                      ${a.socialUsername}, ${a.plannedPostAt}, ${a.activatedAt})`.pipe(
            Effect.asVoid,
            Effect.orDie,
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
