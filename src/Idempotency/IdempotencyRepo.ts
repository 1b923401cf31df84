import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer, Option } from "effect"
import { type BatchedInsert, insertBatched, noneRefused } from "../Database/BatchedInsert.ts"
import { ReadSql } from "../Database/Sql.ts"
import { spans } from "../Spans.ts"

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

type Stored = {
  readonly fingerprint: string
  readonly resource_id: string | null
  readonly status_code: number
  readonly response_body: string
  readonly created_at: number
  readonly expires_at: number
}

type Row = Stored & {
  readonly brand_id: string
  readonly idempotency_key: string
}

/** The row's primary key (brand, Idempotency-Key): the brand is a UUID, so the pair reads back unambiguously. */
const keyOf = (row: { readonly brand_id: string; readonly idempotency_key: string }) =>
  `${row.brand_id} ${row.idempotency_key}`

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
  /** The live (unexpired) entry, if any, as committed (read on the read-only connection). */
  readonly find: (brandId: string, key: string, now: number) => Effect.Effect<Option.Option<IdempotencyRow>>
  /**
   * Stores the entry, replacing an expired one of the same brand and key; false when a live
   * one is there (another instance stored it first), which is left as it was.
   */
  readonly insert: (row: IdempotencyRow) => Effect.Effect<boolean>
  /** Deletes at most `limit` expired entries, the oldest first, and says how many it deleted. */
  readonly purgeExpired: (now: number, limit: number) => Effect.Effect<number>
}>() {
  static readonly Live = Layer.effect(
    IdempotencyRepo,
    Effect.gen(function*() {
      const span = yield* spans
      const sql = yield* SqlClient.SqlClient
      const read = yield* ReadSql
      // Replaces only an expired entry: a live one (another instance stored it first) is left as
      // it was, and the row is missing from what the statement returns.
      const upsert = (rows: ReadonlyArray<Row>) =>
        sql<{ brand_id: string; idempotency_key: string }>`INSERT INTO idempotency_keys ${sql.insert(rows)}
          ON CONFLICT (brand_id, idempotency_key) DO UPDATE SET
            fingerprint = excluded.fingerprint, resource_id = excluded.resource_id,
            status_code = excluded.status_code, response_body = excluded.response_body,
            created_at = excluded.created_at, expires_at = excluded.expires_at
          WHERE idempotency_keys.expires_at <= excluded.created_at
          RETURNING brand_id, idempotency_key`
      const into: BatchedInsert<Row> = {
        table: "idempotency_keys",
        keyOf,
        refuses: true,
        one: (row) => Effect.orDie(Effect.map(upsert([row]), (written) => written.length === 1)),
        many: (rows) =>
          Effect.map(upsert(rows), (written) => {
            if (written.length === rows.length) return noneRefused
            const stored = new Set(written.map(keyOf))
            return rows.map(keyOf).filter((key) => !stored.has(key))
          })
      }
      const select = read.prepare((brandId: string, key: string, now: number) =>
        sql<Stored>`
          SELECT fingerprint, resource_id, status_code, response_body, created_at, expires_at
          FROM idempotency_keys
          WHERE brand_id = ${brandId} AND idempotency_key = ${key} AND expires_at > ${now}`
      )
      return {
        find: (brandId, key, now) =>
          select(brandId, key, now).pipe(
            Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), (row) => fromStored(brandId, key, row))),
            Effect.orDie,
            span("IdempotencyRepo.find")
          ),
        // One statement: a write takes the write lock at once, and an expired entry is replaced in place.
        insert: (row) =>
          insertBatched(into, {
            brand_id: row.brandId,
            idempotency_key: row.key,
            fingerprint: row.fingerprint,
            resource_id: row.resourceId,
            status_code: row.statusCode,
            response_body: row.responseBody,
            created_at: row.createdAt,
            expires_at: row.expiresAt
          }).pipe(span("IdempotencyRepo.insert")),
        // Row values in IN: one statement that SQLite and PostgreSQL both accept. The expiry is
        // checked again on the row itself: on PostgreSQL a row replaced by a new entry while the
        // purge waited for its lock is re-checked against the outer condition only. There the rows
        // are locked first in key order ("C": by code unit, as batches sort them, WriteOrder.ts),
        // not in the order of expiry that picked them: a batch replacing two of them while the
        // purge runs would otherwise wait on the purge as it waits on the batch.
        purgeExpired: (now, limit) => {
          const expired = sql`SELECT brand_id, idempotency_key FROM idempotency_keys
            WHERE expires_at <= ${now} ORDER BY expires_at LIMIT ${limit}`
          const chosen = sql.onDialectOrElse({
            pg: () =>
              sql`SELECT brand_id, idempotency_key FROM idempotency_keys WHERE (brand_id, idempotency_key) IN (${expired})
                ORDER BY brand_id COLLATE "C", idempotency_key COLLATE "C" FOR UPDATE`,
            orElse: () => expired
          })
          return sql<{ n: number }>`DELETE FROM idempotency_keys WHERE (brand_id, idempotency_key) IN (${chosen})
            AND expires_at <= ${now}
            RETURNING 1 AS n`.pipe(
            Effect.map((rows) => rows.length),
            Effect.orDie,
            span("IdempotencyRepo.purgeExpired")
          )
        }
      }
    })
  )
}
