import { SqlClient } from "@effect/sql"
import { SqlError } from "@effect/sql/SqlError"
import { Cause, Chunk, Context, Deferred, Effect, Exit, Layer, Queue } from "effect"
import { span } from "../Span.ts"

interface Pending {
  readonly work: Effect.Effect<unknown, unknown>
  readonly done: Deferred.Deferred<unknown, unknown>
}

/** At most this many requests' writes share one commit. */
const maxBatch = 256

/**
 * Group commit: concurrent writers share one transaction, so one fsync acknowledges
 * many requests instead of one. Each piece of work runs in its own savepoint: a failure
 * rolls back only its own writes. Nobody is answered before the shared commit is durable.
 */
export class GroupCommit extends Context.Tag("Database/GroupCommit")<GroupCommit, {
  readonly transaction: <A, E>(work: Effect.Effect<A, E>) => Effect.Effect<A, E>
}>() {
  static readonly Live = Layer.scoped(
    GroupCommit,
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const queue = yield* Queue.unbounded<Pending>()

      // A defect (the database failing, a bug) aborts the whole batch: nothing of it is committed.
      const runBatch = (batch: ReadonlyArray<Pending>) =>
        Effect.forEach(batch, (pending) =>
          sql.withTransaction(pending.work).pipe(
            // The savepoint's own statements failing is the database failing, not the work.
            Effect.catchIf((e): e is SqlError => e instanceof SqlError, Effect.die),
            Effect.exit,
            Effect.flatMap((exit) =>
              Exit.isFailure(exit) && Cause.isDie(exit.cause) ? Effect.failCause(exit.cause) : Effect.succeed(exit)
            )
          )).pipe(sql.withTransaction, Effect.exit)

      yield* Queue.takeBetween(queue, 1, maxBatch).pipe(
        Effect.map(Chunk.toReadonlyArray),
        Effect.flatMap((batch) =>
          Effect.flatMap(runBatch(batch), (outcome) =>
            Effect.forEach(batch, (pending, i) =>
              Deferred.done(
                pending.done,
                Exit.isSuccess(outcome) ? outcome.value[i]! : Exit.failCause(Cause.die(Cause.squash(outcome.cause)))
              ), { discard: true }))
        ),
        Effect.forever,
        Effect.forkScoped
      )

      return {
        transaction: <A, E>(work: Effect.Effect<A, E>) =>
          Effect.gen(function*() {
            const done = yield* Deferred.make<A, E>()
            yield* Queue.offer(queue, { work, done } as Pending)
            return yield* Deferred.await(done)
          }).pipe(span("GroupCommit.transaction"))
      }
    })
  )
}
