import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * A campaign's numbers kept as it is activated (docs/integrators.md, Analytics), so that its analytics read a
 * few rows per day instead of every activation: activations per (activated day, planned day),
 * which creators activated on which day (the distinct creators of a range of days), and which
 * creators activated at all (those of the whole campaign, without a scan of every day). Written in each activation's own transaction (an answered
 * activation is counted, an unanswered one is not), and filled here from the activations already
 * stored, so a database of an earlier release counts them too. Ids are kept lowercased: they are
 * taken in any letter case. The covering index the analytics read before is no longer needed.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE campaign_days (
      brand_id VARCHAR(36) NOT NULL,
      campaign_key VARCHAR(36) NOT NULL,
      day CHAR(10) NOT NULL,
      planned_day VARCHAR(10) NOT NULL,
      activations BIGINT NOT NULL,
      PRIMARY KEY (brand_id, campaign_key, day, planned_day)
    )`
  yield* sql`
    CREATE TABLE campaign_creator_days (
      brand_id VARCHAR(36) NOT NULL,
      campaign_key VARCHAR(36) NOT NULL,
      day CHAR(10) NOT NULL,
      creator_key VARCHAR(36) NOT NULL,
      PRIMARY KEY (brand_id, campaign_key, day, creator_key)
    )`
  yield* sql`
    CREATE TABLE campaign_creators (
      brand_id VARCHAR(36) NOT NULL,
      campaign_key VARCHAR(36) NOT NULL,
      creator_key VARCHAR(36) NOT NULL,
      PRIMARY KEY (brand_id, campaign_key, creator_key)
    )`
  yield* sql`
    INSERT INTO campaign_days (brand_id, campaign_key, day, planned_day, activations)
    SELECT brand_id, lower(campaign_id), substr(activated_at, 1, 10), COALESCE(planned_post_at, ''), COUNT(*)
    FROM activations GROUP BY brand_id, lower(campaign_id), substr(activated_at, 1, 10), COALESCE(planned_post_at, '')`
  yield* sql`
    INSERT INTO campaign_creator_days (brand_id, campaign_key, day, creator_key)
    SELECT DISTINCT brand_id, lower(campaign_id), substr(activated_at, 1, 10), lower(creator_id) FROM activations`
  yield* sql`
    INSERT INTO campaign_creators (brand_id, campaign_key, creator_key)
    SELECT DISTINCT brand_id, lower(campaign_id), lower(creator_id) FROM activations`
  yield* sql`DROP INDEX activations_for_analytics`
})
