import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * What a key needs to live as a credential (docs/operators.md, The key command line): the secret it had
 * before its last roll and when that one ends, a rate limit of its own, and when each of its
 * secrets was last used (by the secret's digest, so that a use is told apart from the other
 * secret's, whichever instance writes it and whenever). Last use has a table of its own: it is
 * written every minute a key is used, and a write to `api_keys` moves the keys' generation
 * (migration 0002), which would make every instance load every key again each minute. Plain SQL that SQLite and PostgreSQL both accept; a key of an
 * earlier release has none of it and keeps working as it did.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE api_keys ADD COLUMN previous_secret_sha256 CHAR(64)`
  yield* sql`ALTER TABLE api_keys ADD COLUMN previous_secret_ends_at BIGINT`
  yield* sql`ALTER TABLE api_keys ADD COLUMN rate_limit_max INTEGER`
  yield* sql`ALTER TABLE api_keys ADD COLUMN rate_limit_window_seconds INTEGER`
  yield* sql`
    CREATE TABLE api_key_usage (
      key_id VARCHAR(32) NOT NULL,
      secret_sha256 CHAR(64) NOT NULL,
      last_used_at BIGINT NOT NULL,
      PRIMARY KEY (key_id, secret_sha256)
    )`
})
