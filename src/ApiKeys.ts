import { Clock, Context, DateTime, Deferred, Duration, Effect, FiberId, Layer, Option } from "effect"
import { timingSafeEqual } from "node:crypto"
import { type ApiKeyRow, ApiKeysRepo, type KeyChangesRequested, type SecretUse } from "./ApiKeys/ApiKeysRepo.ts"
import {
  ApiKeyInfo,
  type Authenticated,
  type BrandId,
  type KeyId,
  type RateLimitPolicy,
  type Scope
} from "./Domain/ApiKey.ts"
import { KeyRefused, type RefusalReason } from "./Domain/Errors.ts"
import { Ids } from "./Ids.ts"
import { spans } from "./Spans.ts"

/** `cak_<keyId>_<secret>`: a public 16-character id and 256 random bits as hex. */
const keyFormat = /^cak_([a-z0-9]{16})_([0-9a-f]{64})$/
const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

const sha256 = (text: string): Uint8Array => Bun.SHA256.hash(text) as Uint8Array

/** Compared against when the key id is unknown, so the comparison costs the same either way. */
const decoyDigest = sha256("decoy")

/** A token that is not a key at all: the log learns nothing of it, not even a key id. */
export const malformedKey = Effect.fail(new KeyRefused({ reason: "malformed", keyId: null, brandId: null }))

const refused = (reason: RefusalReason, keyId: KeyId, brandId: BrandId | null) =>
  Effect.fail(new KeyRefused({ reason, keyId, brandId }))

export interface CreateOptions {
  readonly brandId: BrandId
  readonly scopes: ReadonlyArray<Scope>
  readonly name: Option.Option<string>
  readonly expiresIn: Option.Option<Duration.Duration>
  readonly rateLimit?: RateLimitPolicy | null
}

export interface CreatedKey {
  readonly apiKey: string
  readonly info: ApiKeyInfo
}

/** What `update` may change; an absent field stays as it is, and an expiry of null is none. */
export interface KeyUpdate extends Omit<KeyChangesRequested, "expiresAt"> {
  /** From now, as at create; null: the key no longer expires. */
  readonly expiresIn?: Duration.Duration | null
}

/** A key as an update left it. */
export interface UpdatedKey {
  readonly expiresAt: DateTime.Utc | null
  /**
   * When the secret a rolled key had before stops, if the update's expiry brought that forward:
   * a key's expiry covers both its secrets (README, The key command line). Null otherwise.
   */
  readonly graceCutTo: DateTime.Utc | null
}

/** A rolled key: its new secret, printed once, and when the secret it had stops working. */
export interface RolledKey {
  readonly apiKey: string
  readonly keyId: KeyId
  readonly previousSecretEndsAt: DateTime.Utc
}

/** How long a rolled key's previous secret may keep working at most (README, The key command line). */
export const maxGrace = Duration.days(30)

const dateOrNull = (millis: number | null) => millis === null ? null : DateTime.unsafeMake(millis)

const toInfo = (row: ApiKeyRow, uses: ReadonlyArray<SecretUse>, now: number): ApiKeyInfo => {
  const previousWorks = row.previousSecretEndsAt !== null && row.previousSecretEndsAt > now && row.revokedAt === null
  const previousUse = previousWorks ? uses.find((use) => use.secretSha256 === row.previousSecretSha256) : undefined
  const lastUse = uses.reduce<number | null>(
    (latest, use) => latest === null || use.at > latest ? use.at : latest,
    null
  )
  return new ApiKeyInfo({
    keyId: row.keyId as KeyId,
    brandId: row.brandId as BrandId,
    name: row.name,
    scopes: row.scopes as ReadonlyArray<Scope>,
    createdAt: DateTime.unsafeMake(row.createdAt),
    expiresAt: dateOrNull(row.expiresAt),
    revokedAt: dateOrNull(row.revokedAt),
    previousSecretEndsAt: previousWorks ? dateOrNull(row.previousSecretEndsAt) : null,
    rateLimit: row.rateLimit,
    lastUsedAt: dateOrNull(lastUse),
    previousSecretLastUsedAt: dateOrNull(previousUse?.at ?? null)
  })
}

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
  static readonly Live = Layer.effect(
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
      // Every key by id, loaded again whenever the generation moves: a request reads one number,
      // not the key's row. A key created, changed or revoked by any process counts from the next
      // request on SQLite, within one poll on PostgreSQL (README, Running several instances). A key
      // id absent at that generation is refused without asking the database: whether it exists
      // must not show in the time of the answer, and made-up ids must cost the database nothing.
      let cache: { readonly generation: number; readonly keys: ReadonlyMap<string, Cached> } | undefined
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
            if (cache === undefined || cache.generation < generation) cache = { generation, keys }
            return keys
          })
          const done = Effect.flatMap(Effect.exit(loaded), (exit) => {
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

      // The clock of the layer (a test's TestClock, in tests): read with no effect of its own.
      const clock = yield* Effect.clock
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
        return authenticateSpan(
          match === null ? malformedKey : Effect.flatMap(lookup(match[1]!), check(match[1]! as KeyId, match[2]!))
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
