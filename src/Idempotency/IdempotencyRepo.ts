import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer, Option } from "effect"
import { span } from "../Edge/Span.ts"

export interface IdempotencyRow {
  readonly brandId: string
  readonly key: string
  readonly fingerprint: string
  readonly resourceId: string | null
  readonly statusCode: number
  readonly responseBody: string
  readonly createdAt: number
  readonly expiresAt: number
}

interface Stored {
  readonly fingerprint: string
  readonly resource_id: string | null
  readonly status_code: number
  readonly response_body: string
  readonly created_at: number
  readonly expires_at: number
}

const fromStored = (brandId: string, key: string, row: Stored): IdempotencyRow => ({
  brandId,
  key,
  fingerprint: row.fingerprint,
  resourceId: row.resource_id,
  statusCode: Number(row.status_code),
  responseBody: row.response_body,
  createdAt: Number(row.created_at),
  expiresAt: Number(row.expires_at)
})

/** Stored responses by (brand, Idempotency-Key). SQL errors are defects. */
export class IdempotencyRepo extends Context.Tag("Idempotency/IdempotencyRepo")<IdempotencyRepo, {
  /** The live (unexpired) entry, if any, read in a transaction of its own so it sees only committed writes. */
  readonly find: (brandId: string, key: string, now: number) => Effect.Effect<Option.Option<IdempotencyRow>>
  /**
   * Stores the entry, replacing an expired one of the same brand and key; false when a live
   * one is there (another instance stored it first), which is left as it was.
   */
  readonly insert: (row: IdempotencyRow) => Effect.Effect<boolean>
  readonly purgeExpired: (now: number) => Effect.Effect<number>
}>() {
  static readonly Live = Layer.effect(
    IdempotencyRepo,
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      return {
        find: (brandId, key, now) =>
          sql<Stored>`
            SELECT fingerprint, resource_id, status_code, response_body, created_at, expires_at
            FROM idempotency_keys
            WHERE brand_id = ${brandId} AND idempotency_key = ${key} AND expires_at > ${now}`.pipe(
            Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), (row) => fromStored(brandId, key, row))),
            // The SQLite client's lock covers taking the shared connection, not running the statement:
            // a plain read could run inside a group-commit batch opened meanwhile and see its writes.
            sql.withTransaction,
            Effect.orDie,
            span("IdempotencyRepo.find")
          ),
        // One statement: a write takes the write lock at once, and an expired entry is replaced in place.
        insert: (row) =>
          sql`INSERT INTO idempotency_keys
                (brand_id, idempotency_key, fingerprint, resource_id, status_code, response_body, created_at, expires_at)
              VALUES (${row.brandId}, ${row.key}, ${row.fingerprint}, ${row.resourceId}, ${row.statusCode},
                      ${row.responseBody}, ${row.createdAt}, ${row.expiresAt})
              ON CONFLICT (brand_id, idempotency_key) DO UPDATE SET
                fingerprint = excluded.fingerprint, resource_id = excluded.resource_id,
                status_code = excluded.status_code, response_body = excluded.response_body,
                created_at = excluded.created_at, expires_at = excluded.expires_at
              WHERE idempotency_keys.expires_at <= excluded.created_at
              RETURNING brand_id`.pipe(
            Effect.map((rows) => rows.length === 1),
            Effect.orDie,
            span("IdempotencyRepo.insert")
          ),
        purgeExpired: (now) =>
          sql<{ n: number }>`DELETE FROM idempotency_keys WHERE expires_at <= ${now} RETURNING 1 AS n`.pipe(
            Effect.map((rows) => rows.length),
            Effect.orDie,
            span("IdempotencyRepo.purgeExpired")
          )
      }
    })
  )
}
