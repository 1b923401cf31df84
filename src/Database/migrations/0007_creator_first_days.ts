import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * The distinct creators of a range of days, from a few rows per day (docs/operators.md, Reliability: indexes
 * and counts). Before, a range counted `DISTINCT creator_key` over every creator-day in it: a
 * million creators were a million rows read and sorted, on SQLite on the event loop, and every
 * other brand's requests waited behind it.
 *
 * `campaign_day_pairs` counts, per campaign and day, the creators active that day by the day each
 * was last active before it (`previous_day`, empty for a creator's first day). A creator is active
 * in `from`…`to` exactly when one of its days in the range has its previous day before `from` (its
 * first day in the range), so the range's creators are the sum of its days' counts whose previous
 * day is before `from`: at most one row per pair of days, however many creators. A campaign's
 * creators are the counts whose previous day is empty.
 *
 * A trigger on `campaign_creator_days` keeps the counts, in the transaction that writes the
 * creator-day, whichever instance or release writes it (an instance of the release before, during
 * a rolling deploy, included): a new day of a creator between its previous day `p` and next day
 * `n` takes one from (`n`, `p`) and adds one to (day, `p`) and (`n`, day). On PostgreSQL a
 * statement's new creator-days are counted together, under a transaction lock per creator taken
 * in one order, so two instances writing days of one creator count one after the other, and rows
 * change in key order, as the other counts' do; each creator's days are read from the new index
 * (a join per creator: the statement's new rows have no statistics to plan a join over them, and
 * one planned over them cost 140 µs per new creator-day against 20 µs so). The counts of the
 * creator-days already stored are filled here.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE campaign_day_pairs (
      brand_id VARCHAR(36) NOT NULL,
      campaign_key VARCHAR(36) NOT NULL,
      day CHAR(10) NOT NULL,
      previous_day VARCHAR(10) NOT NULL,
      creators BIGINT NOT NULL,
      PRIMARY KEY (brand_id, campaign_key, day, previous_day)
    )`
  yield* sql`CREATE INDEX campaign_creator_days_by_creator
               ON campaign_creator_days (brand_id, campaign_key, creator_key, day)`
  yield* sql`
    INSERT INTO campaign_day_pairs (brand_id, campaign_key, day, previous_day, creators)
    SELECT brand_id, campaign_key, day, previous_day, COUNT(*) FROM (
      SELECT brand_id, campaign_key, day,
        COALESCE(CAST(LAG(day) OVER (PARTITION BY brand_id, campaign_key, creator_key ORDER BY day) AS VARCHAR(10)), '')
          AS previous_day
      FROM campaign_creator_days
    ) days GROUP BY brand_id, campaign_key, day, previous_day`
  yield* sql.onDialectOrElse({
    pg: () =>
      Effect.zipRight(
        sql.unsafe(`
          CREATE FUNCTION campaign_day_pairs_count() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN
            PERFORM pg_advisory_xact_lock(creator) FROM (
              SELECT DISTINCT hashtextextended(brand_id || ' ' || campaign_key || ' ' || creator_key, 0) AS creator
              FROM added
            ) creators ORDER BY creator;
            INSERT INTO campaign_day_pairs (brand_id, campaign_key, day, previous_day, creators)
            SELECT creator.brand_id, creator.campaign_key, changes.day, changes.previous_day, SUM(changes.change)
            FROM (SELECT DISTINCT brand_id, campaign_key, creator_key FROM added) creator
            CROSS JOIN LATERAL (
              SELECT day, COALESCE(CAST(LAG(day) OVER (ORDER BY day) AS VARCHAR(10)), '') AS previous_day, 1 AS change
              FROM campaign_creator_days days
              WHERE days.brand_id = creator.brand_id AND days.campaign_key = creator.campaign_key
                AND days.creator_key = creator.creator_key
              UNION ALL
              SELECT day, COALESCE(CAST(LAG(day) OVER (ORDER BY day) AS VARCHAR(10)), '') AS previous_day, -1 AS change
              FROM campaign_creator_days days
              WHERE days.brand_id = creator.brand_id AND days.campaign_key = creator.campaign_key
                AND days.creator_key = creator.creator_key
                AND NOT EXISTS (SELECT FROM added WHERE added.brand_id = days.brand_id
                  AND added.campaign_key = days.campaign_key AND added.creator_key = days.creator_key AND added.day = days.day)
            ) changes
            GROUP BY creator.brand_id, creator.campaign_key, changes.day, changes.previous_day HAVING SUM(changes.change) <> 0
            ORDER BY creator.brand_id, creator.campaign_key, changes.day, changes.previous_day
            ON CONFLICT (brand_id, campaign_key, day, previous_day)
            DO UPDATE SET creators = campaign_day_pairs.creators + excluded.creators;
            RETURN NULL;
          END $$`),
        sql`CREATE TRIGGER campaign_day_pairs_count AFTER INSERT ON campaign_creator_days
              REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION campaign_day_pairs_count()`
      ),
    orElse: () =>
      sql`
        CREATE TRIGGER campaign_day_pairs_count AFTER INSERT ON campaign_creator_days
        BEGIN
          UPDATE campaign_day_pairs SET creators = creators - 1
          WHERE brand_id = NEW.brand_id AND campaign_key = NEW.campaign_key
            AND day = (SELECT MIN(day) FROM campaign_creator_days WHERE brand_id = NEW.brand_id
                         AND campaign_key = NEW.campaign_key AND creator_key = NEW.creator_key AND day > NEW.day)
            AND previous_day = COALESCE((SELECT MAX(day) FROM campaign_creator_days WHERE brand_id = NEW.brand_id
                         AND campaign_key = NEW.campaign_key AND creator_key = NEW.creator_key AND day < NEW.day), '');
          INSERT INTO campaign_day_pairs (brand_id, campaign_key, day, previous_day, creators)
          SELECT NEW.brand_id, NEW.campaign_key, NEW.day,
            COALESCE((SELECT MAX(day) FROM campaign_creator_days WHERE brand_id = NEW.brand_id
                        AND campaign_key = NEW.campaign_key AND creator_key = NEW.creator_key AND day < NEW.day), ''), 1
          WHERE true
          ON CONFLICT (brand_id, campaign_key, day, previous_day) DO UPDATE SET creators = creators + 1;
          INSERT INTO campaign_day_pairs (brand_id, campaign_key, day, previous_day, creators)
          SELECT NEW.brand_id, NEW.campaign_key, next_day, NEW.day, 1 FROM (
            SELECT MIN(day) AS next_day FROM campaign_creator_days WHERE brand_id = NEW.brand_id
              AND campaign_key = NEW.campaign_key AND creator_key = NEW.creator_key AND day > NEW.day
          ) later WHERE next_day IS NOT NULL
          ON CONFLICT (brand_id, campaign_key, day, previous_day) DO UPDATE SET creators = creators + 1;
        END`
  })
})
