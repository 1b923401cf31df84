import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer, Option } from "effect"
import { span } from "../Span.ts"

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
  /** A live (unexpired) entry, read in a transaction of its own so it sees only committed writes. */
  readonly find: (brandId: string, key: string, now: number) => Effect.Effect<Option.Option<IdempotencyRow>>
  /** A live (unexpired) entry, inside the caller's write transaction; an expired one of the same key is deleted. */
  readonly claim: (brandId: string, key: string, now: number) => Effect.Effect<Option.Option<IdempotencyRow>>
  /** False when another writer stored the same key first (possible once several instances share a database). */
  readonly insert: (row: IdempotencyRow) => Effect.Effect<boolean>
  readonly purgeExpired: (now: number) => Effect.Effect<number>
}>() {
  static readonly Live = Layer.effect(
    IdempotencyRepo,
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const select = (brandId: string, key: string, now: number) =>
        sql<Stored>`
          SELECT fingerprint, resource_id, status_code, response_body, created_at, expires_at
          FROM idempotency_keys
          WHERE brand_id = ${brandId} AND idempotency_key = ${key} AND expires_at > ${now}`.pipe(
          Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), (row) => fromStored(brandId, key, row)))
        )
      return {
        find: (brandId, key, now) =>
          select(brandId, key, now).pipe(sql.withTransaction, Effect.orDie, span("IdempotencyRepo.find")),
        claim: (brandId, key, now) =>
          Effect.gen(function*() {
            // A write first: inside a transaction it takes the write lock at once, so a
            // concurrent writer in another process cannot turn this read into SQLITE_BUSY later.
            yield* sql`DELETE FROM idempotency_keys
                       WHERE brand_id = ${brandId} AND idempotency_key = ${key} AND expires_at <= ${now}`
            return yield* select(brandId, key, now)
          }).pipe(Effect.orDie, span("IdempotencyRepo.claim")),
        insert: (row) =>
          sql`INSERT INTO idempotency_keys
                (brand_id, idempotency_key, fingerprint, resource_id, status_code, response_body, created_at, expires_at)
              VALUES (${row.brandId}, ${row.key}, ${row.fingerprint}, ${row.resourceId}, ${row.statusCode},
                      ${row.responseBody}, ${row.createdAt}, ${row.expiresAt})
              ON CONFLICT (brand_id, idempotency_key) DO NOTHING
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
