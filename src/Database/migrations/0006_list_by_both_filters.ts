import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * A page of one creator's activations of one campaign (docs/integrators.md, Reads) from an index of its own:
 * with the campaign's index (0003), every activation of the campaign was read to find the
 * creator's, so one large campaign made each such page, and every request waiting behind it,
 * slow (docs/operators.md, Reliability: indexes and counts). The index 0001 made on the two ids as sent
 * serves no statement (every read begins with the brand and compares ids lowercased): it goes, so
 * an activation still writes as many indexes as before. SQL both SQLite and PostgreSQL accept;
 * on a database of an earlier release the index is built at the first start, from the activations
 * stored.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE INDEX activations_by_brand_campaign_creator
               ON activations (brand_id, lower(campaign_id), lower(creator_id), id)`
  yield* sql`DROP INDEX activations_by_creator_campaign`
})
