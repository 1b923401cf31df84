import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer } from "effect"
import { spans } from "../Spans.ts"
import { keyChanges } from "./KeyChanges.ts"

export interface ApiKeyRow {
  readonly keyId: string
  readonly brandId: string
  readonly name: string | null
  readonly scopes: ReadonlyArray<string>
  readonly secretSha256: string
  readonly createdAt: number
  readonly expiresAt: number | null
  readonly revokedAt: number | null
}

interface Stored {
  readonly key_id: string
  readonly brand_id: string
  readonly name: string | null
  readonly scopes: string
  readonly secret_sha256: string
  readonly created_at: number
  readonly expires_at: number | null
  readonly revoked_at: number | null
}

const fromStored = (row: Stored): ApiKeyRow => ({
  keyId: row.key_id,
  brandId: row.brand_id,
  name: row.name,
  scopes: row.scopes === "" ? [] : row.scopes.split(" "),
  secretSha256: row.secret_sha256,
  createdAt: Number(row.created_at),
  expiresAt: row.expires_at === null ? null : Number(row.expires_at),
  revokedAt: row.revoked_at === null ? null : Number(row.revoked_at)
})

/** API keys as stored: only the SHA-256 digest of each secret. SQL errors are defects. */
export class ApiKeysRepo extends Context.Tag("ApiKeys/ApiKeysRepo")<ApiKeysRepo, {
  readonly insert: (row: ApiKeyRow) => Effect.Effect<void>
  readonly list: Effect.Effect<ReadonlyArray<ApiKeyRow>>
  /**
   * A number that changes whenever any process creates, revokes or deletes a key: cheap
   * enough to read on every request, so that a cache of `list` knows when to load again.
   */
  readonly generation: Effect.Effect<number>
  /**
   * Where `generation` may lag (PostgreSQL, polled): the same number as committed now, read from
   * the database, for a key id the cache does not know (created a moment ago, perhaps). Absent
   * where `generation` is already exact (SQLite).
   */
  readonly freshGeneration: Effect.Effect<number> | undefined
  /** Marks the key revoked; false when there is no such key or it was revoked already. */
  readonly revoke: (keyId: string, at: number) => Effect.Effect<boolean>
}>() {
  static readonly Live = Layer.scoped(
    ApiKeysRepo,
    Effect.gen(function*() {
      const span = yield* spans
      const sql = yield* SqlClient.SqlClient
      const { current, fresh } = yield* keyChanges
      return {
        generation: current,
        freshGeneration: fresh,
        insert: (row) =>
          sql`INSERT INTO api_keys (key_id, brand_id, name, scopes, secret_sha256, created_at, expires_at, revoked_at)
              VALUES (${row.keyId}, ${row.brandId}, ${row.name}, ${row.scopes.join(" ")}, ${row.secretSha256},
                      ${row.createdAt}, ${row.expiresAt}, ${row.revokedAt})`.pipe(
            Effect.asVoid,
            Effect.orDie,
            span("ApiKeysRepo.insert")
          ),
        list: sql<Stored>`SELECT * FROM api_keys ORDER BY created_at, key_id`.pipe(
          Effect.map((rows) => rows.map(fromStored)),
          Effect.orDie,
          span("ApiKeysRepo.list")
        ),
        revoke: (keyId, at) =>
          sql<{ key_id: string }>`UPDATE api_keys SET revoked_at = ${at}
              WHERE key_id = ${keyId} AND revoked_at IS NULL RETURNING key_id`.pipe(
            Effect.map((rows) => rows.length > 0),
            Effect.orDie,
            span("ApiKeysRepo.revoke")
          )
      }
    })
  )
}
