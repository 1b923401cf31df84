import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * The indexes of the reads (docs/integrators.md, Reads and Analytics), each beginning with the brand, so that
 * every read is a range of one brand's entries. Ids are compared as stored (lowercase); path ids are
 * stored as sent, in any letter case, so the filters compare them lowercased, and so do the
 * indexes. SQL both SQLite and PostgreSQL accept.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // A brand's records, newest first (ids are UUIDv7), from a cursor.
  yield* sql`CREATE INDEX activations_by_brand ON activations (brand_id, id)`
  yield* sql`CREATE INDEX activations_by_brand_creator ON activations (brand_id, lower(creator_id), id)`
  yield* sql`CREATE INDEX activations_by_brand_campaign ON activations (brand_id, lower(campaign_id), id)`
  // A campaign's analytics in a range of days, read from this index alone.
  yield* sql`CREATE INDEX activations_for_analytics
               ON activations (brand_id, lower(campaign_id), activated_at, planned_post_at, lower(creator_id))`
})
