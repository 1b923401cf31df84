import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * On PostgreSQL, every change to a key is announced to the instances that listen (docs/operators.md, Running
 * several instances): the trigger of migration 0002, now for each row, also sends
 * `pg_notify('api_keys_changed', '{"keyId":…,"generation":…}')` with the key's id and the
 * generation it moved to (a TRUNCATE: `keyId` null, every key). A notification is sent when its
 * transaction commits and never when it rolls back, so an instance cannot hear of a key before
 * the key is there. (`NOTIFY` from another connection, as `PgClient.notify` sends it, would be
 * outside the change's transaction.) Counting each row, as SQLite's triggers already do, also leaves
 * the generation where it was for a statement that changes none. SQLite has nothing to announce
 * to: every process sees a commit at its next request (Database/KeyChanges.ts).
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql.onDialectOrElse({
    pg: () =>
      Effect.all([
        sql.unsafe(`CREATE OR REPLACE FUNCTION api_keys_generation_bump() RETURNS trigger LANGUAGE plpgsql AS $$
          DECLARE
            moved BIGINT;
          BEGIN
            UPDATE api_keys_generation SET generation = generation + 1 WHERE id = 1 RETURNING generation INTO moved;
            PERFORM pg_notify('api_keys_changed', json_build_object(
              'keyId', CASE TG_OP WHEN 'INSERT' THEN NEW.key_id WHEN 'UPDATE' THEN NEW.key_id
                                  WHEN 'DELETE' THEN OLD.key_id END,
              'generation', moved)::text);
            RETURN NULL;
          END $$`),
        sql.unsafe(`DROP TRIGGER api_keys_generation_bump ON api_keys`),
        sql.unsafe(`CREATE TRIGGER api_keys_generation_bump AFTER INSERT OR UPDATE OR DELETE ON api_keys
          FOR EACH ROW EXECUTE FUNCTION api_keys_generation_bump()`),
        sql.unsafe(`CREATE TRIGGER api_keys_generation_truncate AFTER TRUNCATE ON api_keys
          FOR EACH STATEMENT EXECUTE FUNCTION api_keys_generation_bump()`)
      ], { discard: true }),
    orElse: () => Effect.void
  })
})
