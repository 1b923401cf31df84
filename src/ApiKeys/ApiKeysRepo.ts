import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer } from "effect"
import { type KeyChanges, keyChanges } from "../Database/KeyChanges.ts"
import { inKeyOrder } from "../Database/WriteOrder.ts"
import type { RateLimitPolicy } from "../Domain/ApiKey.ts"
import { spans } from "../Spans.ts"

export interface ApiKeyRow {
  readonly keyId: string
  readonly brandId: string
  readonly name: string | null
  readonly scopes: ReadonlyArray<string>
  readonly secretSha256: string
  readonly createdAt: number
  readonly expiresAt: number | null
  readonly revokedAt: number | null
  /** The secret before the last roll, while it may still work, and when it stops. */
  readonly previousSecretSha256: string | null
  readonly previousSecretEndsAt: number | null
  /** The key's own limit; null: the server's. */
  readonly rateLimit: RateLimitPolicy | null
}

/** A secret of a key, by its digest, last used at `at`. */
export interface SecretUse {
  readonly keyId: string
  readonly secretSha256: string
  readonly at: number
}

/** What `keys update` may change; an absent field stays as it is. */
export interface KeyChangesRequested {
  readonly scopes?: ReadonlyArray<string>
  readonly name?: string | null
  readonly rateLimit?: RateLimitPolicy | null
  /** null: the key no longer expires. */
  readonly expiresAt?: number | null
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
  readonly previous_secret_sha256: string | null
  readonly previous_secret_ends_at: number | null
  readonly rate_limit_max: number | null
  readonly rate_limit_window_seconds: number | null
}

const numberOrNull = (value: number | string | null) => value === null ? null : Number(value)

const fromStored = (row: Stored): ApiKeyRow => ({
  keyId: row.key_id,
  brandId: row.brand_id,
  name: row.name,
  scopes: row.scopes === "" ? [] : row.scopes.split(" "),
  secretSha256: row.secret_sha256,
  createdAt: Number(row.created_at),
  expiresAt: numberOrNull(row.expires_at),
  revokedAt: numberOrNull(row.revoked_at),
  previousSecretSha256: row.previous_secret_sha256,
  previousSecretEndsAt: numberOrNull(row.previous_secret_ends_at),
  rateLimit: row.rate_limit_max === null || row.rate_limit_window_seconds === null
    ? null
    : { max: Number(row.rate_limit_max), windowSeconds: Number(row.rate_limit_window_seconds) }
})

/** Rows per statement when last uses are written: far below either database's limit on parameters. */
const usageBatch = 500

/** A use's row's primary key, key id then digest (a key id has 16 characters, so the pair reads back unambiguously). */
const usageKey = (use: SecretUse) => `${use.keyId} ${use.secretSha256}`

/** API keys as stored: only the SHA-256 digest of each secret. SQL errors are defects. */
export class ApiKeysRepo extends Context.Tag("ApiKeys/ApiKeysRepo")<ApiKeysRepo, {
  readonly insert: (row: ApiKeyRow) => Effect.Effect<void>
  readonly list: Effect.Effect<ReadonlyArray<ApiKeyRow>>
  /** The keys of these ids as stored now, in one statement however many there are; an id without a key is absent. */
  readonly find: (keyIds: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<ApiKeyRow>>
  /**
   * A number that changes whenever any process adds, changes or deletes a key: cheap
   * enough to read on every request, so that a cache of `list` knows when to load again. Exact on
   * SQLite; on PostgreSQL the last poll's, at most a second old (docs/operators.md, Running several instances).
   */
  readonly generation: Effect.Effect<number>
  /**
   * On PostgreSQL, each key change as announced when it commits, for a cache to apply at once;
   * undefined on SQLite, where `generation` is exact (Database/KeyChanges.ts).
   */
  readonly announcements: KeyChanges["announcements"]
  /** Marks the key revoked; false when there is no such key or it was revoked already. */
  readonly revoke: (keyId: string, at: number) => Effect.Effect<boolean>
  /**
   * Gives an active key (neither revoked nor expired at `now`) the secret `secretSha256`; the one
   * it had works until `graceEndsAt` or the key's expiry, the earlier, and the one before that
   * stops at once. The previous secret's end as stored, or undefined when there is no such key.
   */
  readonly roll: (
    keyId: string,
    secretSha256: string,
    graceEndsAt: number,
    now: number
  ) => Effect.Effect<number | undefined>
  /**
   * Changes an active key (not revoked, not expired at `now`); an earlier expiry also ends its
   * previous secret then, as a roll does. The key as changed, or undefined when there is no such key.
   */
  readonly update: (keyId: string, changes: KeyChangesRequested, now: number) => Effect.Effect<ApiKeyRow | undefined>
  /** When each secret was last used, by its digest: a secret never used is absent. */
  readonly lastUsed: Effect.Effect<ReadonlyArray<SecretUse>>
  /** Records last uses; a time older than the one stored (another instance's, later) is kept out. */
  readonly recordUsage: (uses: ReadonlyArray<SecretUse>) => Effect.Effect<void>
}>() {
  static readonly Live = Layer.scoped(
    ApiKeysRepo,
    Effect.gen(function*() {
      const span = yield* spans
      const sql = yield* SqlClient.SqlClient
      const { announcements, generation } = yield* keyChanges
      const active = (keyId: string, now: number) =>
        sql`key_id = ${keyId} AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ${now})`
      // The latest time wins, whichever instance writes last.
      const later = sql.onDialectOrElse({
        pg: () => sql.literal("GREATEST(api_key_usage.last_used_at, excluded.last_used_at)"),
        orElse: () => sql.literal("max(api_key_usage.last_used_at, excluded.last_used_at)")
      })
      // One parameter whatever the number of ids (PostgreSQL takes an array, SQLite a JSON text).
      const amongIds = (keyIds: ReadonlyArray<string>) =>
        sql.onDialectOrElse({
          pg: () => sql`key_id = ANY(${keyIds})`,
          orElse: () => sql`key_id IN (SELECT value FROM json_each(${JSON.stringify(keyIds)}))`
        })
      return {
        generation,
        announcements,
        insert: (row) =>
          sql`INSERT INTO api_keys (key_id, brand_id, name, scopes, secret_sha256, created_at, expires_at, revoked_at,
                                    rate_limit_max, rate_limit_window_seconds)
              VALUES (${row.keyId}, ${row.brandId}, ${row.name}, ${row.scopes.join(" ")}, ${row.secretSha256},
                      ${row.createdAt}, ${row.expiresAt}, ${row.revokedAt},
                      ${row.rateLimit?.max ?? null}, ${row.rateLimit?.windowSeconds ?? null})`.pipe(
            Effect.asVoid,
            Effect.orDie,
            span("ApiKeysRepo.insert")
          ),
        list: sql<Stored>`SELECT * FROM api_keys ORDER BY created_at, key_id`.pipe(
          Effect.map((rows) => rows.map(fromStored)),
          Effect.orDie,
          span("ApiKeysRepo.list")
        ),
        find: (keyIds) =>
          sql<Stored>`SELECT * FROM api_keys WHERE ${amongIds(keyIds)}`.pipe(
            Effect.map((rows) => rows.map(fromStored)),
            Effect.orDie,
            span("ApiKeysRepo.find")
          ),
        revoke: (keyId, at) =>
          sql<{ key_id: string }>`UPDATE api_keys SET revoked_at = ${at}
              WHERE key_id = ${keyId} AND revoked_at IS NULL RETURNING key_id`.pipe(
            Effect.map((rows) => rows.length > 0),
            Effect.orDie,
            span("ApiKeysRepo.revoke")
          ),
        // One statement: the right-hand sides read the row as it was, so the current secret
        // becomes the previous one and the one before it is gone, whatever else runs.
        roll: (keyId, secretSha256, graceEndsAt, now) =>
          sql<{ previous_secret_ends_at: number | string }>`UPDATE api_keys SET
                previous_secret_sha256 = secret_sha256,
                previous_secret_ends_at = CASE WHEN expires_at IS NOT NULL AND expires_at < ${graceEndsAt}
                                               THEN expires_at ELSE ${graceEndsAt} END,
                secret_sha256 = ${secretSha256}
              WHERE ${active(keyId, now)} RETURNING previous_secret_ends_at`.pipe(
            Effect.map((rows) => rows.length === 0 ? undefined : Number(rows[0]!.previous_secret_ends_at)),
            Effect.orDie,
            span("ApiKeysRepo.roll")
          ),
        update: (keyId, changes, now) => {
          const columns: Record<string, string | number | null> = {}
          if (changes.scopes !== undefined) columns["scopes"] = changes.scopes.join(" ")
          if (changes.name !== undefined) columns["name"] = changes.name
          if (changes.rateLimit !== undefined) {
            columns["rate_limit_max"] = changes.rateLimit?.max ?? null
            columns["rate_limit_window_seconds"] = changes.rateLimit?.windowSeconds ?? null
          }
          if (changes.expiresAt !== undefined) columns["expires_at"] = changes.expiresAt
          // In the same statement, as a roll caps the previous secret's end at the key's expiry.
          const previousEnds = typeof changes.expiresAt === "number"
            ? sql`, previous_secret_ends_at = CASE WHEN previous_secret_ends_at > ${changes.expiresAt}
                                                   THEN ${changes.expiresAt} ELSE previous_secret_ends_at END`
            : sql.literal("")
          return (Object.keys(columns).length === 0
            ? sql<Stored>`SELECT * FROM api_keys WHERE ${active(keyId, now)}`
            : sql<Stored>`UPDATE api_keys SET ${sql.update(columns)}${previousEnds} WHERE ${
              active(keyId, now)
            } RETURNING *`)
            .pipe(
              Effect.map((rows) => rows.length === 0 ? undefined : fromStored(rows[0]!)),
              Effect.orDie,
              span("ApiKeysRepo.update")
            )
        },
        lastUsed: sql<{ key_id: string; secret_sha256: string; last_used_at: number | string }>`
            SELECT key_id, secret_sha256, last_used_at FROM api_key_usage`.pipe(
          Effect.map((rows) =>
            rows.map((row) => ({ keyId: row.key_id, secretSha256: row.secret_sha256, at: Number(row.last_used_at) }))
          ),
          Effect.orDie,
          span("ApiKeysRepo.lastUsed")
        ),
        // In key order, as every table is written (Database/WriteOrder.ts), each statement a
        // transaction of its own: two instances writing the same keys at once take their rows' locks
        // in the same order, so PostgreSQL never finds a deadlock.
        recordUsage: (unsorted) => {
          const uses = inKeyOrder(unsorted, usageKey)
          return Effect.forEach(
            Array.from(
              { length: Math.ceil(uses.length / usageBatch) },
              (_, i) => uses.slice(i * usageBatch, (i + 1) * usageBatch)
            ),
            (batch) =>
              sql`INSERT INTO api_key_usage ${
                sql.insert(
                  batch.map((use) => ({ key_id: use.keyId, secret_sha256: use.secretSha256, last_used_at: use.at }))
                )
              }
                  ON CONFLICT (key_id, secret_sha256) DO UPDATE SET last_used_at = ${later}`,
            { discard: true }
          ).pipe(Effect.orDie, span("ApiKeysRepo.recordUsage"))
        }
      }
    })
  )
}
