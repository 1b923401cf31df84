import { Chunk, Clock, Context, DateTime, Deferred, Duration, Effect, FiberId, Layer, Option, Queue } from "effect"
import { timingSafeEqual } from "node:crypto"
import { type ApiKeyRow, ApiKeysRepo, type SecretUse } from "./ApiKeys/ApiKeysRepo.ts"
import {
  type CreatedKey,
  type CreateOptions,
  dateOrNull,
  type KeyUpdate,
  maxGrace,
  type RolledKey,
  toInfo,
  type UpdatedKey
} from "./ApiKeys/KeyInfo.ts"
import type { ApiKeyInfo, Authenticated, BrandId, KeyId, RateLimitPolicy, Scope } from "./Domain/ApiKey.ts"
import { KeyRefused, type RefusalReason } from "./Domain/Errors.ts"
import { Ids } from "./Ids.ts"
import { spans } from "./Spans.ts"

export {
  type CreatedKey,
  type CreateOptions,
  type KeyUpdate,
  maxGrace,
  type RolledKey,
  type UpdatedKey
} from "./ApiKeys/KeyInfo.ts"

/** `cak_<keyId>_<secret>`: a public 16-character id and 256 random bits as hex. */
const keyFormat = /^cak_([a-z0-9]{16})_([0-9a-f]{64})$/
const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

const sha256 = (text: string): Uint8Array => Bun.SHA256.hash(text) as Uint8Array

/** Compared against when the key id is unknown, so the comparison costs the same either way. */
const decoyDigest = sha256("decoy")

/** A token that is not a key at all: the log learns nothing of it, not even a key id. */
export const malformedKey = Effect.fail(new KeyRefused({ reason: "malformed", keyId: null, brandId: null }))

/**
 * On PostgreSQL, the refusals a key created or rolled by another process, its announcement not
 * yet heard, would get; and how often, and how long, a key refused for one of them is read again
 * (`ApiKeys.Live`). Every other refusal comes of a secret that matched and stands.
 */
const mayBeNew: ReadonlySet<RefusalReason> = new Set(["unknown key", "wrong secret"])
const rereadSpacing = Duration.millis(50)
const rereadWaitedFor = Duration.seconds(1)

const refused = (reason: RefusalReason, keyId: KeyId, brandId: BrandId | null) =>
  Effect.fail(new KeyRefused({ reason, keyId, brandId }))

/** The earlier of two ends, null being never. */
const earlier = (a: number | null, b: number | null) => a === null ? b : b === null ? a : Math.min(a, b)

export class ApiKeys extends Context.Tag("ApiKeys")<ApiKeys, {
  /** Resolves a presented bearer token, or says why it is refused (for the log; the answer is one 401). */
  readonly authenticate: (token: string) => Effect.Effect<Authenticated, KeyRefused>
  readonly create: (options: CreateOptions) => Effect.Effect<CreatedKey>
  /** Every key, oldest first, with when each was last used. */
  readonly list: Effect.Effect<ReadonlyArray<ApiKeyInfo>>
  readonly revoke: (keyId: string) => Effect.Effect<boolean>
  /**
   * A new secret for an active key, its previous one working for `grace` more (at most
   * `maxGrace`, never past the key's expiry); undefined when there is no such active key.
   */
  readonly roll: (keyId: string, grace: Duration.Duration) => Effect.Effect<RolledKey | undefined>
  /** Changes an active key's scopes, name, rate limit or expiry; undefined when there is no such active key. */
  readonly update: (keyId: string, changes: KeyUpdate) => Effect.Effect<UpdatedKey | undefined>
}>() {
  static readonly Live = Layer.scoped(
    ApiKeys,
    Effect.gen(function*() {
      const span = yield* spans
      const repo = yield* ApiKeysRepo
      const ids = yield* Ids

      // Each key with the answers its secrets give, made once per load, not per request.
      type Cached = ApiKeyRow & {
        readonly digest: Uint8Array
        readonly previousDigest: Uint8Array
        readonly current: Authenticated
        readonly previous: Authenticated
      }
      // One object per distinct limit for as long as the server runs, so that what is made once per
      // limit (its charge, its headers) is found from it after the keys load again.
      const limits = new Map<string, RateLimitPolicy>()
      const sameLimit = (limit: RateLimitPolicy | null) => {
        if (limit === null) return null
        const name = `${limit.max}/${limit.windowSeconds}`
        const known = limits.get(name)
        if (known !== undefined) return known
        limits.set(name, limit)
        return limit
      }
      const toCached = (stored: ApiKeyRow): Cached => {
        const row = { ...stored, rateLimit: sameLimit(stored.rateLimit) }
        const identity = {
          keyId: row.keyId as KeyId,
          brandId: row.brandId as BrandId,
          scopes: row.scopes as ReadonlyArray<Scope>
        }
        return {
          ...row,
          digest: Buffer.from(row.secretSha256, "hex"),
          previousDigest: row.previousSecretSha256 === null
            ? decoyDigest
            : Buffer.from(row.previousSecretSha256, "hex"),
          current: { identity, endsAt: row.expiresAt, rateLimit: row.rateLimit, secretSha256: row.secretSha256 },
          previous: {
            identity,
            endsAt: earlier(row.expiresAt, row.previousSecretEndsAt),
            rateLimit: row.rateLimit,
            secretSha256: row.previousSecretSha256 ?? ""
          }
        }
      }
      // Every key by id, loaded again whenever the generation moves past what the cache holds: a
      // request reads one number, not the key's row. On SQLite the generation is exact, so a key
      // created, changed or revoked by any process counts from the next request, and a key id
      // absent at that generation is refused without asking the database. On PostgreSQL each
      // change is announced as it commits and its key read again at once, which moves the cache's
      // generation on; the poll's generation catches any change whose announcement was missed
      // (docs/operators.md, Running several instances).
      let cache: { readonly generation: number; readonly keys: Map<string, Cached> } | undefined
      // Every read that writes the cache, one at a time: each starts after the one before it ended,
      // so it sees at least as much, and what it writes never undoes a newer write.
      const oneAtATime = yield* Effect.makeSemaphore(1)
      // One load at a time for a generation, whatever the number of requests that find the keys
      // changed at once (a flood of made-up ids, say). It runs on its own, so a request that gives
      // up waiting for it (its client gone) never interrupts it for the others.
      let loading:
        | { readonly generation: number; readonly keys: Deferred.Deferred<ReadonlyMap<string, Cached>> }
        | undefined
      const load = (generation: number) =>
        Effect.suspend(() => {
          if (loading !== undefined && loading.generation >= generation) return Deferred.await(loading.keys)
          const started = { generation, keys: Deferred.unsafeMake<ReadonlyMap<string, Cached>>(FiberId.none) }
          loading = started
          const loaded = Effect.map(repo.list, (rows) => {
            const keys = new Map(rows.map((row) => [row.keyId, toCached(row)]))
            // Newer than every write before it, whatever generation that one was read at.
            cache = { generation: Math.max(generation, cache?.generation ?? generation), keys }
            return keys
          })
          const done = Effect.flatMap(Effect.exit(oneAtATime.withPermits(1)(loaded)), (exit) => {
            if (loading === started) loading = undefined
            return Deferred.done(started.keys, exit)
          })
          return Effect.zipRight(Effect.forkDaemon(done), Deferred.await(started.keys))
        })
      const lookup = (keyId: string) =>
        Effect.flatMap(repo.generation, (generation) =>
          // The usual case, keys unchanged, without an effect of its own.
          cache !== undefined && cache.generation >= generation
            ? Effect.succeed(cache.keys.get(keyId))
            : Effect.map(load(generation), (keys) => keys.get(keyId)))
      /** These keys read again and kept as they are now (an id without a key is dropped); holding `oneAtATime`. */
      const rereadNow = (keyIds: ReadonlyArray<string>) =>
        Effect.map(repo.find(keyIds), (rows) => {
          // Before the first load there is nothing to correct: that load reads every key.
          if (cache === undefined) return
          for (const keyId of keyIds) cache.keys.delete(keyId)
          for (const row of rows) cache.keys.set(row.keyId, toCached(row))
        })
      // The clock of the layer (a test's TestClock, in tests): read with no effect of its own.
      const clock = yield* Effect.clock

      // On PostgreSQL, each announced change applied as it comes, those that came together in one
      // read. A read that fails leaves the change to the poll.
      if (repo.announcements !== undefined) {
        const announced = yield* repo.announcements
        const apply = Effect.flatMap(Queue.takeBetween(announced, 1, Number.POSITIVE_INFINITY), (changes) => {
          const all = Chunk.toReadonlyArray(changes)
          const truncated = all.find((change) => change.keyId === null)
          if (truncated !== undefined) return Effect.asVoid(load(truncated.generation))
          return oneAtATime.withPermits(1)(
            Effect.map(rereadNow([...new Set(all.map((change) => change.keyId!))]), () => {
              if (cache === undefined) return
              // Announcements come in the order of their commits, each generation in turn: while
              // they follow on from the cache's, the keys hold every change up to the last, and
              // the poll finds nothing to load again. After a gap, it loads them (the fallback).
              let generation = cache.generation
              for (const change of [...all].sort((x, y) => x.generation - y.generation)) {
                if (change.generation === generation + 1) generation = change.generation
              }
              cache = { generation, keys: cache.keys }
            })
          )
        })
        yield* Effect.forkScoped(Effect.forever(Effect.exit(apply)))
      }

      // A key may be used before its announcement reaches this instance: on PostgreSQL, a key id
      // unknown here, or a secret that matches neither of the key's, is read again before the
      // refusal stands (`mayBeNew`). One read at a time, at most one every `rereadSpacing`, for
      // every key id refused meanwhile, however many: a flood of made-up ids costs PostgreSQL at
      // most 20 statements a second. A refusal after it is answered `rereadSpacing` after the read
      // began, whether a key was found or not, so the answer's time does not tell whether a key id
      // exists. A read the database has not answered in `rereadWaitedFor` leaves the refusal as
      // it was: a slow database never turns a 401 into a 503.
      interface Reread {
        readonly keyIds: Set<string>
        /** When its statement started, once it has. */
        startedAt: number | undefined
        /** Done once the keys were read again, or the read was waited for `rereadWaitedFor`. */
        readonly answered: Deferred.Deferred<void>
        /** Done `rereadSpacing` after the statement started, and not before `answered`. */
        readonly released: Deferred.Deferred<void>
      }
      let nextReread: Reread | undefined
      let lastReread: Deferred.Deferred<void> | undefined
      let lastRereadStartedAt = Number.NEGATIVE_INFINITY
      const spacingMs = Duration.toMillis(rereadSpacing)
      const untilMillis = (at: number) => Effect.sleep(Math.max(0, at - clock.unsafeCurrentTimeMillis()))
      /** The read of refused key ids `keyId` joins, once it has answered. */
      const rereadSoon = (keyId: string): Effect.Effect<Reread> =>
        Effect.suspend(() => {
          if (nextReread !== undefined) {
            const joined = nextReread
            joined.keyIds.add(keyId)
            return Effect.as(Deferred.await(joined.answered), joined)
          }
          const batch: Reread = {
            keyIds: new Set([keyId]),
            startedAt: undefined,
            answered: Deferred.unsafeMake(FiberId.none),
            released: Deferred.unsafeMake(FiberId.none)
          }
          const done = Deferred.unsafeMake<void>(FiberId.none)
          const before = lastReread
          nextReread = batch
          lastReread = done
          // Its ids are taken as its statement starts: every id refused until then is in it.
          const read = Effect.suspend(() => untilMillis(lastRereadStartedAt + spacingMs)).pipe(
            Effect.zipRight(
              oneAtATime.withPermits(1)(Effect.suspend(() => {
                nextReread = undefined
                batch.startedAt = lastRereadStartedAt = clock.unsafeCurrentTimeMillis()
                return rereadNow([...batch.keyIds])
              }))
            ),
            Effect.onExit((exit) => Deferred.done(done, exit))
          )
          // One timer for the whole batch, not one per request; it never interrupts the read.
          const answer = Deferred.await(done).pipe(
            Effect.exit,
            Effect.timeout(rereadWaitedFor),
            Effect.exit,
            Effect.zipRight(Deferred.succeed(batch.answered, undefined)),
            Effect.zipRight(
              Effect.suspend(() =>
                batch.startedAt === undefined ? Effect.void : untilMillis(batch.startedAt + spacingMs)
              )
            ),
            Effect.zipRight(Deferred.succeed(batch.released, undefined))
          )
          return Effect.all([
            Effect.forkDaemon(before === undefined ? read : Effect.zipRight(Effect.exit(Deferred.await(before)), read)),
            Effect.forkDaemon(answer)
          ]).pipe(Effect.zipRight(Deferred.await(batch.answered)), Effect.as(batch))
        })

      const check =
        (keyId: KeyId, secret: string) => (stored: Cached | undefined): Effect.Effect<Authenticated, KeyRefused> => {
          // Every case costs one digest and two comparisons before the reason is told apart: an
          // unknown key id and a key never rolled are compared against a decoy, so neither whether
          // a key id exists nor which of a rolled key's two secrets was sent shows in the timing.
          const digest = sha256(secret)
          const currentMatches = timingSafeEqual(digest, stored === undefined ? decoyDigest : stored.digest)
          const previousMatches = timingSafeEqual(digest, stored === undefined ? decoyDigest : stored.previousDigest)
          if (stored === undefined) return refused("unknown key", keyId, null)
          const brandId = stored.brandId as BrandId
          const now = clock.unsafeCurrentTimeMillis()
          // Named before the key's state: whoever sent a wrong secret does not hold the key, revoked or not.
          const matched = currentMatches
            ? stored.current
            : previousMatches && stored.previousSecretSha256 !== null
            ? stored.previous
            : undefined
          if (matched === undefined) return refused("wrong secret", keyId, brandId)
          if (stored.revokedAt !== null) return refused("revoked", keyId, brandId)
          if (matched.endsAt !== null && matched.endsAt <= now) {
            return refused(
              matched === stored.current || stored.expiresAt === matched.endsAt ? "expired" : "grace ended",
              keyId,
              brandId
            )
          }
          return Effect.succeed(matched)
        }
      const authenticateSpan = span("ApiKeys.authenticate")
      const authenticate = (token: string) => {
        const match = keyFormat.exec(token)
        if (match === null) return authenticateSpan(malformedKey)
        const keyId = match[1]!
        const checkKey = check(keyId as KeyId, match[2]!)
        const checked = Effect.flatMap(lookup(keyId), checkKey)
        return authenticateSpan(
          repo.announcements === undefined ? checked : Effect.catchIf(
            checked,
            (refusal) => mayBeNew.has(refusal.reason),
            () =>
              Effect.flatMap(rereadSoon(keyId), (reread) =>
                // A key found is answered at once; a refusal when its read is released, found
                // or not, so that what the read took does not tell a known key id from another.
                Effect.catchAll(
                  checkKey(cache?.keys.get(keyId)),
                  (refusal) => Effect.zipRight(Deferred.await(reread.released), Effect.fail(refusal))
                ))
          )
        )
      }

      const newSecret = Effect.map(ids.randomBytes(32), (bytes) => Buffer.from(bytes).toString("hex"))

      const create = (options: CreateOptions) =>
        Effect.gen(function*() {
          const idBytes = yield* ids.randomBytes(16)
          const keyId = Array.from(idBytes, (byte) => idAlphabet[byte % idAlphabet.length]).join("")
          const secret = yield* newSecret
          const now = yield* Clock.currentTimeMillis
          const row: ApiKeyRow = {
            keyId,
            brandId: options.brandId.toLowerCase(),
            name: Option.getOrNull(options.name),
            scopes: Array.from(new Set(options.scopes)),
            secretSha256: Buffer.from(sha256(secret)).toString("hex"),
            createdAt: now,
            expiresAt: Option.getOrNull(Option.map(options.expiresIn, (d) => now + Duration.toMillis(d))),
            revokedAt: null,
            previousSecretSha256: null,
            previousSecretEndsAt: null,
            rateLimit: options.rateLimit ?? null
          }
          const info = toInfo(row, [], now)
          yield* repo.insert(row)
          return { apiKey: `cak_${keyId}_${secret}`, info }
        }).pipe(span("ApiKeys.create"))

      const roll = (keyId: string, grace: Duration.Duration) =>
        Effect.gen(function*() {
          const secret = yield* newSecret
          const now = yield* Clock.currentTimeMillis
          const graceEndsAt = now + Duration.toMillis(Duration.min(grace, maxGrace))
          const endsAt = yield* repo.roll(keyId, Buffer.from(sha256(secret)).toString("hex"), graceEndsAt, now)
          if (endsAt === undefined) return undefined
          const rolled: RolledKey = {
            apiKey: `cak_${keyId}_${secret}`,
            keyId: keyId as KeyId,
            previousSecretEndsAt: DateTime.unsafeMake(endsAt)
          }
          return rolled
        }).pipe(span("ApiKeys.roll"))

      return {
        authenticate,
        create,
        list: Effect.all([repo.list, repo.lastUsed, Clock.currentTimeMillis]).pipe(
          Effect.map(([rows, uses, now]) => {
            const byKey = new Map<string, Array<SecretUse>>()
            for (const use of uses) byKey.set(use.keyId, [...(byKey.get(use.keyId) ?? []), use])
            return rows.map((row) => toInfo(row, byKey.get(row.keyId) ?? [], now))
          })
        ),
        revoke: (keyId) => Effect.flatMap(Clock.currentTimeMillis, (now) => repo.revoke(keyId, now)),
        roll,
        update: (keyId, { expiresIn, ...changes }) =>
          Effect.flatMap(Clock.currentTimeMillis, (now) => {
            const expiresAt = expiresIn === undefined || expiresIn === null
              ? expiresIn
              : now + Duration.toMillis(expiresIn)
            return Effect.map(
              repo.update(keyId, expiresAt === undefined ? changes : { ...changes, expiresAt }, now),
              (row): UpdatedKey | undefined =>
                row === undefined ? undefined : {
                  expiresAt: dateOrNull(row.expiresAt),
                  // The repository ends a previous secret that still works at an earlier expiry.
                  graceCutTo: typeof expiresAt === "number" && row.previousSecretEndsAt === expiresAt
                    ? DateTime.unsafeMake(expiresAt)
                    : null
                }
            )
          })
      }
    })
  )
}
