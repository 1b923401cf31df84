import { Clock, Context, Deferred, Duration, Effect, FiberId, Layer, Option, Schedule } from "effect"
import { AppConfig } from "./Config.ts"
import { GroupCommit } from "./Database/GroupCommit.ts"
import { IdempotencyConflict, IdempotencyInProgress } from "./Domain/Errors.ts"
import { IdempotencyRepo, type IdempotencyRow } from "./Idempotency/IdempotencyRepo.ts"
import { Metrics } from "./Metrics.ts"
import { spans } from "./Spans.ts"

export interface IdempotentRequest {
  readonly brandId: string
  readonly key: string
  readonly method: string
  readonly path: string
  readonly body: unknown
}

/** The response an operation produced, stored byte for byte for replays. */
export interface StoredResponse {
  readonly status: number
  readonly body: string
  readonly resourceId: string | null
}

/** How long a duplicate waits for the original before 409 IDEMPOTENCY_IN_PROGRESS. */
const inProgressBound = Duration.seconds(5)

/** JSON with object keys sorted at every depth: key order and whitespace do not change it. */
export const canonicalJson = (value: unknown): string =>
  JSON.stringify(value, (_, v) =>
    v !== null && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, (v as Record<string, unknown>)[k]]))
      : v)

/** SHA-256, in hex, of the method, the path and the canonical body (Bun's one-shot hash, cheaper than node:crypto's). */
export const fingerprintOf = (request: IdempotentRequest): string =>
  Bun.SHA256.hash(`${request.method.toUpperCase()}\n${request.path}\n${canonicalJson(request.body)}`, "hex")

/** What a request under an Idempotency-Key is answered with: the stored bytes, and whether they answer a repeat. */
export interface IdempotentAnswer {
  readonly status: number
  readonly body: string
  readonly replayed: boolean
}

const answerOf = (row: IdempotencyRow, replayed: boolean): IdempotentAnswer => ({
  status: row.statusCode,
  body: row.responseBody,
  replayed
})

const conflict = new IdempotencyConflict({
  message: "This Idempotency-Key was already used with a different request; use a new key for a new request."
})
const inProgress = new IdempotencyInProgress({
  message: "A request with this Idempotency-Key is still being processed; retry shortly."
})

/** Another instance stored the same key between our read and our write: read again. */
class LostRace {
  readonly _tag = "LostRace"
}

const isLostRace = (e: unknown): e is LostRace => e instanceof LostRace

/** Lost races in a row before giving up: each means another writer stored the key first. */
const maxLostRaces = 3

/** Expired entries deleted per statement by the purge, and its pause between statements. */
const purgeBatch = 500
const purgePause = Duration.millis(5)

/**
 * Stored entries that repeats asked for lately, kept in memory (a few hundred bytes each); a
 * repeat of another is read from the database, as correct and a little slower, and kept from then
 * on. A new entry is not kept when it is stored: under fresh activations every copy outlived a
 * young-generation collection and was collected only by a full one (bench/BENCHMARKS.md, Less
 * allocated per request), while most keys are never repeated.
 * A larger copy adds to the garbage-collected heap's headroom.
 */
const recentLimit = 1_000

export class Idempotency extends Context.Tag("Idempotency")<Idempotency, {
  /**
   * Runs `operation` once per (brand, key): the first request runs it and stores its
   * response in the same transaction as its writes; a repeat with the same fingerprint
   * gets that response back, one with another fingerprint 409.
   */
  readonly run: <E>(
    request: IdempotentRequest,
    operation: Effect.Effect<StoredResponse, E>
  ) => Effect.Effect<IdempotentAnswer, E | IdempotencyConflict | IdempotencyInProgress>
}>() {
  static readonly Live = Layer.scoped(
    Idempotency,
    Effect.gen(function*() {
      const span = yield* spans
      const metrics = yield* Metrics
      const groupCommit = yield* GroupCommit
      const repo = yield* IdempotencyRepo
      const { idempotencyTtl } = yield* AppConfig
      // The layer's clock (a test's TestClock, in tests), read without an effect of its own.
      const clock = yield* Effect.clock
      const ttlMillis = Duration.toMillis(idempotencyTtl)
      // Requests of this process under way, by brand and key: duplicates wait here instead of racing.
      const inFlight = new Map<string, Deferred.Deferred<void>>()
      // Entries this process read lately, by brand and key. A stored entry never changes
      // until it expires (only an expired one is ever replaced), so while it lives a copy answers
      // a repeat as the database would, on any instance; an expired copy is never used.
      const recent = new Map<string, IdempotencyRow>()
      const remember = (slot: string, row: IdempotencyRow) => {
        recent.delete(slot)
        recent.set(slot, row)
        if (recent.size > recentLimit) recent.delete(recent.keys().next().value!)
      }

      // In small batches, yielding between them: one statement over a million expired entries
      // held the (synchronous) database, and so every request, for seconds.
      const purgeAll = (now: number, purged = 0): Effect.Effect<number> =>
        Effect.flatMap(repo.purgeExpired(now, purgeBatch), (deleted) =>
          deleted < purgeBatch
            ? Effect.succeed(purged + deleted)
            : Effect.zipRight(Effect.sleep(purgePause), purgeAll(now, purged + deleted)))

      yield* Clock.currentTimeMillis.pipe(
        Effect.flatMap((now) => purgeAll(now)),
        Effect.tap((purged) => purged > 0 ? Effect.logDebug("purged idempotency keys", { purged }) : Effect.void),
        Effect.catchAllCause((cause) => Effect.logWarning("idempotency purge failed", cause)),
        Effect.repeat(Schedule.spaced(Duration.min(idempotencyTtl, Duration.minutes(1)))),
        Effect.forkScoped
      )

      const replayOrConflict = (stored: IdempotencyRow, fingerprint: string) => {
        if (stored.fingerprint === fingerprint) {
          metrics.replayed()
          return Effect.succeed(answerOf(stored, true))
        }
        metrics.conflicted()
        return Effect.fail(conflict)
      }

      // The operation's writes and its stored response commit together, or neither does. A pipeline,
      // not `Effect.gen`, as every step a request runs (docs/contributing.md, Layout: the request path).
      const attempt = <E>(
        request: IdempotentRequest,
        fingerprint: string,
        operation: Effect.Effect<StoredResponse, E>
      ) =>
        Effect.flatMap(operation, (response) => {
          const now = clock.unsafeCurrentTimeMillis()
          const row: IdempotencyRow = {
            brandId: request.brandId,
            key: request.key,
            fingerprint,
            resourceId: response.resourceId,
            statusCode: response.status,
            responseBody: response.body,
            createdAt: now,
            expiresAt: now + ttlMillis
          }
          return Effect.flatMap(repo.insert(row), (inserted) =>
            inserted ? Effect.succeed(row) : Effect.fail(new LostRace()))
        }).pipe(groupCommit.transaction)

      const runOnce = <E>(
        request: IdempotentRequest,
        fingerprint: string,
        operation: Effect.Effect<StoredResponse, E>,
        lostRaces = 0
      ): Effect.Effect<IdempotentAnswer, E | IdempotencyConflict | IdempotencyInProgress> =>
        Effect.suspend(() => {
          const slot = `${request.brandId}\n${request.key}`
          const original = inFlight.get(slot)
          if (original !== undefined) {
            return Deferred.await(original).pipe(
              Effect.timeoutFail({ duration: inProgressBound, onTimeout: () => inProgress }),
              Effect.zipRight(runOnce(request, fingerprint, operation, lostRaces))
            )
          }
          const now = clock.unsafeCurrentTimeMillis()
          const copy = recent.get(slot)
          const lookup = copy !== undefined && copy.expiresAt > now
            ? Effect.succeed(Option.some(copy))
            : Effect.map(repo.find(request.brandId, request.key, now), (found) => {
              if (Option.isSome(found)) remember(slot, found.value)
              return found
            })
          return Effect.flatMap(
            lookup,
            Option.match({
              // A stored key is answered from a read alone: replays never queue behind writes.
              onSome: (stored) => replayOrConflict(stored, fingerprint),
              onNone: () =>
                Effect.suspend(() => {
                  if (inFlight.has(slot)) return runOnce(request, fingerprint, operation, lostRaces)
                  const done = Deferred.unsafeMake<void>(FiberId.none)
                  inFlight.set(slot, done)
                  return attempt(request, fingerprint, operation).pipe(
                    // Its work is queued for a commit, which runs whether or not anyone waits: a
                    // request whose client has gone (interrupted) holds the key until that commit
                    // is done, or a retry of it would join the same batch, write a second record and
                    // find the key taken by its own batch (two records, one stored response).
                    Effect.uninterruptible,
                    // Committed: the entry is durable, and the response is what was stored.
                    Effect.map((row) => answerOf(row, false)),
                    Effect.ensuring(Effect.suspend(() => {
                      inFlight.delete(slot)
                      return Deferred.succeed(done, undefined)
                    })),
                    // Rolled back: answer from what the other writer stored, as a replay or a conflict.
                    Effect.catchIf(isLostRace, () =>
                      lostRaces + 1 < maxLostRaces
                        ? runOnce(request, fingerprint, operation, lostRaces + 1)
                        : Effect.die("idempotency insert kept losing races"))
                  )
                })
            })
          )
        })

      const run = <E>(request: IdempotentRequest, operation: Effect.Effect<StoredResponse, E>) =>
        Effect.suspend(() => runOnce(request, fingerprintOf(request), operation)).pipe(span("Idempotency.run"))

      return { run }
    })
  )
}
