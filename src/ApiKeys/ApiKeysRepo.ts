import { SqlClient } from "@effect/sql"
import { Database } from "bun:sqlite"
import { Context, Effect, Layer } from "effect"
import { DatabaseConfig } from "../Config.ts"
import { DatabaseFile } from "../Database/Sql.ts"
import { sqliteError } from "../Database/SqlErrors.ts"
import { span } from "../Edge/Span.ts"

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
  /** Marks the key revoked; false when there is no such key or it was revoked already. */
  readonly revoke: (keyId: string, at: number) => Effect.Effect<boolean>
}>() {
  static readonly Live = Layer.scoped(
    ApiKeysRepo,
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const generation = yield* generationProbe
      return {
        generation,
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

/**
 * The generation counter (kept by triggers, see migration 0002), read on a read-only connection
 * of its own: `PRAGMA data_version` on it changes only when another connection commits, and
 * costs about a microsecond, so the counter itself is read only then. Through @effect/sql each
 * read would cost tens of microseconds and queue behind the server's writes on the shared
 * connection. An in-memory database has no other connection: its counter is read through it.
 */
const generationProbe = Effect.gen(function*() {
  const { filename } = yield* DatabaseConfig
  const file = yield* DatabaseFile
  if (filename === ":memory:") {
    const sql = yield* SqlClient.SqlClient
    return sql<{ generation: number }>`SELECT generation FROM api_keys_generation`.pipe(
      Effect.map((rows) => Number(rows[0]!.generation)),
      Effect.orDie
    )
  }
  const db = yield* Effect.acquireRelease(
    Effect.sync(() => new Database(filename, { readonly: true })),
    (db) => Effect.sync(() => db.close())
  )
  // Never wait for a lock on the event loop: a busy database is a 503, as for every other read.
  db.run("PRAGMA busy_timeout = 0")
  const dataVersion = db.query<{ data_version: number }, []>("PRAGMA data_version")
  const counter = db.query<{ generation: number }, []>("SELECT generation FROM api_keys_generation")
  let seenVersion = -1
  let generation = -1
  return Effect.suspend(() => {
    // With a file of the database gone or replaced, a key revoked since may never show here:
    // refuse to vouch for any key (503) rather than answer from what may be stale.
    if (file.changed()) return Effect.die(sqliteError("SQLITE_CANTOPEN", "the database files changed under the server"))
    try {
      const version = dataVersion.get()!.data_version
      if (version !== seenVersion) {
        generation = Number(counter.get()!.generation)
        seenVersion = version
      }
      return Effect.succeed(generation)
    } catch (error) {
      const code = typeof error === "object" && error !== null && "code" in error ? String(error.code) : "SQLITE_ERROR"
      return Effect.die(sqliteError(code, `reading the API keys' generation: ${String(error)}`))
    }
  })
})
