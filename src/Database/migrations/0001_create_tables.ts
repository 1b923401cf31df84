import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/** Plain SQL that SQLite and PostgreSQL both accept. */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE api_keys (
      key_id VARCHAR(32) PRIMARY KEY,
      brand_id VARCHAR(36) NOT NULL,
      name VARCHAR(200),
      scopes VARCHAR(200) NOT NULL,
      secret_sha256 CHAR(64) NOT NULL,
      created_at BIGINT NOT NULL,
      expires_at BIGINT,
      revoked_at BIGINT
    )`
  yield* sql`
    CREATE TABLE activations (
      id VARCHAR(36) PRIMARY KEY,
      brand_id VARCHAR(36) NOT NULL,
      key_id VARCHAR(32) NOT NULL,
      creator_id VARCHAR(36) NOT NULL,
      campaign_id VARCHAR(36) NOT NULL,
      status VARCHAR(16) NOT NULL,
      social_username VARCHAR(400) NOT NULL,
      planned_post_at VARCHAR(10),
      activated_at VARCHAR(32) NOT NULL
    )`
  yield* sql`CREATE INDEX activations_by_creator_campaign ON activations (creator_id, campaign_id)`
  yield* sql`
    CREATE TABLE idempotency_keys (
      brand_id VARCHAR(36) NOT NULL,
      idempotency_key VARCHAR(255) NOT NULL,
      fingerprint CHAR(64) NOT NULL,
      resource_id VARCHAR(36),
      status_code INTEGER NOT NULL,
      response_body TEXT NOT NULL,
      created_at BIGINT NOT NULL,
      expires_at BIGINT NOT NULL,
      PRIMARY KEY (brand_id, idempotency_key)
    )`
  yield* sql`CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at)`
})
