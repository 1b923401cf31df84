import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * A counter that every change to `api_keys` bumps, whichever process makes it: the server keeps
 * the keys in memory and reads this one row to know when to load them again. The triggers are
 * the one part each dialect spells its own way.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE api_keys_generation (id INTEGER PRIMARY KEY CHECK (id = 1), generation BIGINT NOT NULL)`
  yield* sql`INSERT INTO api_keys_generation (id, generation) VALUES (1, 0)`
  const bump = "UPDATE api_keys_generation SET generation = generation + 1 WHERE id = 1"
  yield* sql.onDialectOrElse({
    pg: () =>
      Effect.zipRight(
        sql.unsafe(`CREATE FUNCTION api_keys_generation_bump() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN ${bump}; RETURN NULL; END $$`),
        sql.unsafe(`CREATE TRIGGER api_keys_generation_bump AFTER INSERT OR UPDATE OR DELETE ON api_keys
          FOR EACH STATEMENT EXECUTE FUNCTION api_keys_generation_bump()`)
      ),
    orElse: () =>
      Effect.forEach(["INSERT", "UPDATE", "DELETE"], (event) =>
        sql.unsafe(`
          CREATE TRIGGER api_keys_generation_on_${event.toLowerCase()} AFTER ${event} ON api_keys
          BEGIN ${bump}; END`), { discard: true })
  })
})
