import type { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"
import { type BatchedInsert, insertBatched, noneRefused } from "../Database/BatchedInsert.ts"
import type { ReadSql } from "../Database/Sql.ts"
import type { Table } from "../Database/WriteOrder.ts"
import type { Activation } from "../Domain/Activation.ts"

/** One campaign's activations of one brand, counted (docs/integrators.md, Analytics). */
export interface Counts {
  readonly byDay: ReadonlyArray<{ readonly date: string; readonly activations: number }>
  readonly byPlannedDay: ReadonlyArray<{ readonly date: string; readonly posts: number }>
  readonly unscheduled: number
  readonly creators: number
}

/**
 * A bound past every day (`YYYY-MM-DD`): the last day there is, which orders after every other day
 * in every collation, as both have the same shape.
 */
const lastDay = "9999-12-31"
/** A bound after the empty previous day of a creator's first day, and before every day. */
const beforeEveryDay = "0"

/**
 * Rows in a page of the analytics' reads, a campaign's longest answer read in many: on SQLite, which
 * reads on the event loop, as many as it reads in about a millisecond; on PostgreSQL, which reads
 * off it, ten times as many, a round trip per page being most of a page's time there.
 */
export const pageRows = (sql: SqlClient.SqlClient): number =>
  sql.onDialectOrElse({ pg: () => 10_000, orElse: () => 1_000 })

/** Hands the event loop back (a macrotask, not a fiber's yield): the other requests run between pages. */
const yieldToEventLoop = Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))

/**
 * Reads a statement to its end a page at a time, in key order, each page after the last row of the
 * one before: a large read on SQLite, which runs on the event loop, holds it for a page at most.
 */
const eachPage = <A>(
  rowsInPage: number,
  first: Effect.Effect<ReadonlyArray<A>, SqlError>,
  after: (last: A) => Effect.Effect<ReadonlyArray<A>, SqlError>,
  onRow: (row: A) => void
): Effect.Effect<void, SqlError> =>
  Effect.flatMap(first, function next(rows): Effect.Effect<void, SqlError> {
    rows.forEach(onRow)
    return rows.length < rowsInPage
      ? Effect.void
      : Effect.flatMap(Effect.zipRight(yieldToEventLoop, after(rows[rows.length - 1]!)), next)
  })

type DayCount = { readonly day: string; readonly planned_day: string; readonly activations: number | string }
type FirstDayCount = { readonly day: string; readonly previous_day: string; readonly creators: number | string }

type DayRow = {
  readonly brand_id: string
  readonly campaign_key: string
  readonly day: string
  readonly planned_day: string
  readonly activations: number
}
type CreatorDayRow = {
  readonly brand_id: string
  readonly campaign_key: string
  readonly day: string
  readonly creator_key: string
}
type CreatorRow = { readonly brand_id: string; readonly campaign_key: string; readonly creator_key: string }

/**
 * A batch's rows of a table of counts, one per key: counts of the same key added up (PostgreSQL
 * refuses an `ON CONFLICT DO UPDATE` that reaches one row twice in a statement), in the order given.
 */
const mergedByKey = <Row>(rows: ReadonlyArray<Row>, keyOf: (row: Row) => string, merge: (a: Row, b: Row) => Row) => {
  const merged = new Map<string, Row>()
  for (const row of rows) {
    const key = keyOf(row)
    const seen = merged.get(key)
    merged.set(key, seen === undefined ? row : merge(seen, row))
  }
  return [...merged.values()]
}
const dayKey = (row: DayRow) => `${row.brand_id} ${row.campaign_key} ${row.day} ${row.planned_day}`
const creatorDayKey = (row: CreatorDayRow) => `${row.brand_id} ${row.campaign_key} ${row.day} ${row.creator_key}`
const creatorKey = (row: CreatorRow) => `${row.brand_id} ${row.campaign_key} ${row.creator_key}`

/**
 * A campaign's numbers in a range of days, from the counts kept as it is activated (docs/integrators.md,
 * Analytics), each read a page at a time in key order from its table's primary key (the tests read
 * their plans): the pairs of activated day and planned day, and the creators of each day counted
 * by the day each was active before it (0007), of which a range counts those from before it.
 */
export const countStatements = (sql: SqlClient.SqlClient, limit: number = pageRows(sql)) => ({
  daysFrom: (brandId: string, campaignKey: string, from: string, to: string) =>
    sql<DayCount>`SELECT day, planned_day, activations FROM campaign_days
      WHERE brand_id = ${brandId} AND campaign_key = ${campaignKey} AND day >= ${from} AND day <= ${to}
      ORDER BY day, planned_day LIMIT ${limit}`,
  daysAfter: (brandId: string, campaignKey: string, day: string, plannedDay: string, to: string) =>
    sql<DayCount>`SELECT day, planned_day, activations FROM campaign_days
      WHERE brand_id = ${brandId} AND campaign_key = ${campaignKey} AND (day, planned_day) > (${day}, ${plannedDay})
        AND day <= ${to}
      ORDER BY day, planned_day LIMIT ${limit}`,
  firstDaysFrom: (brandId: string, campaignKey: string, from: string, to: string) =>
    sql<FirstDayCount>`SELECT day, previous_day, creators FROM campaign_day_pairs
      WHERE brand_id = ${brandId} AND campaign_key = ${campaignKey} AND day >= ${from} AND day <= ${to}
        AND previous_day < ${from}
      ORDER BY day, previous_day LIMIT ${limit}`,
  firstDaysAfter: (brandId: string, campaignKey: string, day: string, previousDay: string, from: string, to: string) =>
    sql<FirstDayCount>`SELECT day, previous_day, creators FROM campaign_day_pairs
      WHERE brand_id = ${brandId} AND campaign_key = ${campaignKey} AND (day, previous_day) > (${day}, ${previousDay})
        AND day <= ${to} AND previous_day < ${from}
      ORDER BY day, previous_day LIMIT ${limit}`
})

/**
 * A campaign's counts, kept as it is activated (docs/integrators.md, Analytics): `add` gives an activation's
 * rows to the caller's transaction (and its batch, see GroupCommit); `read` reads those of a range
 * of days, a page at a time, as committed.
 */
export const campaignCounts = (sql: SqlClient.SqlClient, read: typeof ReadSql.Service) => {
  const rowsInPage = pageRows(sql)
  const countStatement = countStatements(sql, rowsInPage)
  const daysFrom = read.prepare(countStatement.daysFrom)
  const daysAfter = read.prepare(countStatement.daysAfter)
  const firstDaysFrom = read.prepare(countStatement.firstDaysFrom)
  const firstDaysAfter = read.prepare(countStatement.firstDaysAfter)
  /**
   * A table of counts, written with the batch's rows merged per key (`mergedByKey`), or one row
   * alone. It adds to what is there, so it takes every row.
   */
  const counted = <Row>(
    table: Table,
    write: (rows: ReadonlyArray<Row>) => Effect.Effect<unknown, SqlError>,
    keyOf: (row: Row) => string,
    merge: (a: Row, b: Row) => Row = (a) => a
  ): BatchedInsert<Row> => ({
    table,
    keyOf,
    refuses: false,
    one: (row) => Effect.orDie(Effect.as(write([row]), true)),
    many: (rows) => Effect.as(write(mergedByKey(rows, keyOf, merge)), noneRefused)
  })
  const countDays = counted<DayRow>(
    "campaign_days",
    (rows) =>
      sql`INSERT INTO campaign_days ${sql.insert(rows)}
          ON CONFLICT (brand_id, campaign_key, day, planned_day)
          DO UPDATE SET activations = campaign_days.activations + excluded.activations`,
    dayKey,
    (a, b) => ({ ...a, activations: a.activations + b.activations })
  )
  const noteCreatorDays = counted<CreatorDayRow>(
    "campaign_creator_days",
    (rows) => sql`INSERT INTO campaign_creator_days ${sql.insert(rows)} ON CONFLICT DO NOTHING`,
    creatorDayKey
  )
  // Which creators activated at all: read by instances of the release before 0007 while a rolling
  // deploy runs them beside this one; this release counts them from `campaign_day_pairs`.
  const noteCreators = counted<CreatorRow>(
    "campaign_creators",
    (rows) => sql`INSERT INTO campaign_creators ${sql.insert(rows)} ON CONFLICT DO NOTHING`,
    creatorKey
  )
  return {
    add: (a: Activation, brandId: string): Effect.Effect<void> => {
      const campaignKey = a.campaignId.toLowerCase()
      const day = a.activatedAt.slice(0, 10)
      return insertBatched(countDays, {
        brand_id: brandId,
        campaign_key: campaignKey,
        day,
        planned_day: a.plannedPostAt ?? "",
        activations: 1
      }).pipe(
        Effect.zipRight(insertBatched(noteCreatorDays, {
          brand_id: brandId,
          campaign_key: campaignKey,
          day,
          creator_key: a.creatorId.toLowerCase()
        })),
        Effect.zipRight(insertBatched(noteCreators, {
          brand_id: brandId,
          campaign_key: campaignKey,
          creator_key: a.creatorId.toLowerCase()
        })),
        Effect.asVoid
      )
    },
    read: (
      brandId: string,
      campaignId: string,
      from: string | undefined,
      to: string | undefined
    ): Effect.Effect<Counts, SqlError> =>
      Effect.suspend(() => {
        const campaignKey = campaignId.toLowerCase()
        const first = from ?? beforeEveryDay
        const last = to ?? lastDay
        const byDay = new Map<string, number>()
        const byPlannedDay = new Map<string, number>()
        let creators = 0
        return eachPage(
          rowsInPage,
          daysFrom(brandId, campaignKey, first, last),
          (row) => daysAfter(brandId, campaignKey, row.day, row.planned_day, last),
          (row) => {
            const n = Number(row.activations)
            byDay.set(row.day, (byDay.get(row.day) ?? 0) + n)
            byPlannedDay.set(row.planned_day, (byPlannedDay.get(row.planned_day) ?? 0) + n)
          }
        ).pipe(
          Effect.zipRight(eachPage(
            rowsInPage,
            firstDaysFrom(brandId, campaignKey, first, last),
            (row) => firstDaysAfter(brandId, campaignKey, row.day, row.previous_day, first, last),
            (row) => {
              creators += Number(row.creators)
            }
          )),
          Effect.map(() => {
            // The unscheduled are counted under the empty planned day.
            const unscheduled = byPlannedDay.get("") ?? 0
            byPlannedDay.delete("")
            const ascending = (counts: Map<string, number>) =>
              [...counts].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
            return {
              byDay: ascending(byDay).map(([date, activations]) => ({ date, activations })),
              byPlannedDay: ascending(byPlannedDay).map(([date, posts]) => ({ date, posts })),
              unscheduled,
              creators
            }
          })
        )
      })
  }
}
