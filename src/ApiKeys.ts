import { Clock, Context, DateTime, Duration, Effect, Layer, Option } from "effect"
import { timingSafeEqual } from "node:crypto"
import { ApiKeysRepo, type ApiKeyRow } from "./ApiKeys/ApiKeysRepo.ts"
import { type ApiKeyIdentity, ApiKeyInfo, type BrandId, type KeyId, type Scope } from "./Domain/ApiKey.ts"
import { KeyRefused, type RefusalReason } from "./Domain/Errors.ts"
import { Ids } from "./Ids.ts"
import { spans } from "./Spans.ts"

/** `cak_<keyId>_<secret>`: a public 16-character id and 256 random bits as hex. */
const keyFormat = /^cak_([a-z0-9]{16})_([0-9a-f]{64})$/
const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

const sha256 = (text: string): Uint8Array => Bun.SHA256.hash(text) as Uint8Array

/**
 * Compared against when the key id is unknown, so the comparison costs the same either way. (On
 * PostgreSQL an unknown id also costs a read of the counter: key ids are public, secrets are not.)
 */
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
}

export interface CreatedKey {
  readonly apiKey: string
  readonly info: ApiKeyInfo
}

const toInfo = (row: ApiKeyRow): ApiKeyInfo =>
  new ApiKeyInfo({
    keyId: row.keyId as KeyId,
    brandId: row.brandId as BrandId,
    name: row.name,
    scopes: row.scopes as ReadonlyArray<Scope>,
    createdAt: DateTime.unsafeMake(row.createdAt),
    expiresAt: row.expiresAt === null ? null : DateTime.unsafeMake(row.expiresAt),
    revokedAt: row.revokedAt === null ? null : DateTime.unsafeMake(row.revokedAt)
  })

export class ApiKeys extends Context.Tag("ApiKeys")<ApiKeys, {
  /** Resolves a presented bearer token, or says why it is refused (for the log; the answer is one 401). */
  readonly authenticate: (token: string) => Effect.Effect<ApiKeyIdentity, KeyRefused>
  readonly create: (options: CreateOptions) => Effect.Effect<CreatedKey>
  readonly list: Effect.Effect<ReadonlyArray<ApiKeyInfo>>
  readonly revoke: (keyId: string) => Effect.Effect<boolean>
}>() {
  static readonly Live = Layer.effect(
    ApiKeys,
    Effect.gen(function*() {
      const span = yield* spans
      const repo = yield* ApiKeysRepo
      const ids = yield* Ids

      // Every key by id, loaded again whenever the generation moves: a request reads one number,
      // not the key's row. A key created or revoked by any process counts from the next request on
      // SQLite, within one poll on PostgreSQL (README, Running several instances). The counter only grows: keys loaded at a
      // newer generation than a request reads (after a fresh read, below) serve it as well.
      type Cached = ApiKeyRow & { readonly digest: Uint8Array }
      let cache: { readonly generation: number; readonly keys: ReadonlyMap<string, Cached> } | undefined
      const cachedAt = (generation: number) =>
        cache !== undefined && cache.generation >= generation ? cache.keys : undefined
      const keysAt = (generation: number) => {
        const cached = cachedAt(generation)
        return cached !== undefined
          ? Effect.succeed(cached)
          : Effect.map(repo.list, (rows) => {
            const keys = new Map(rows.map((row) => [row.keyId, { ...row, digest: Buffer.from(row.secretSha256, "hex") }]))
            cache = { generation, keys }
            return keys
          })
      }
      // A key id the cache does not know may have been created a moment ago by another process:
      // where the generation is polled (PostgreSQL), it is read afresh before the key is refused.
      const { freshGeneration } = repo
      const lookup = (keyId: string) =>
        Effect.flatMap(repo.generation, (generation) => {
          // The usual case, a known key and keys unchanged, without an effect of its own.
          const stored = cachedAt(generation)?.get(keyId)
          if (stored !== undefined) return Effect.succeed(stored)
          return Effect.flatMap(keysAt(generation), (keys) => {
            const stored = keys.get(keyId)
            return stored !== undefined || freshGeneration === undefined
              ? Effect.succeed(stored)
              : Effect.map(Effect.flatMap(freshGeneration, keysAt), (fresh) => fresh.get(keyId))
          })
        })

      // The clock of the layer (a test's TestClock, in tests): read with no effect of its own.
      const clock = yield* Effect.clock
      const check = (keyId: KeyId, secret: string) => (stored: Cached | undefined): Effect.Effect<ApiKeyIdentity, KeyRefused> => {
        // An unknown key id is compared against a decoy: every case costs one digest and one
        // comparison before the reason is told apart.
        const secretMatches = timingSafeEqual(sha256(secret), stored === undefined ? decoyDigest : stored.digest)
        if (stored === undefined) return refused("unknown key", keyId, null)
        const brandId = stored.brandId as BrandId
        // Named before the key's state: whoever sent a wrong secret does not hold the key, revoked or not.
        if (!secretMatches) return refused("wrong secret", keyId, brandId)
        if (stored.revokedAt !== null) return refused("revoked", keyId, brandId)
        if (stored.expiresAt !== null && stored.expiresAt <= clock.unsafeCurrentTimeMillis()) {
          return refused("expired", keyId, brandId)
        }
        return Effect.succeed({ keyId, brandId, scopes: stored.scopes as ReadonlyArray<Scope> })
      }
      const authenticateSpan = span("ApiKeys.authenticate")
      const authenticate = (token: string) => {
        const match = keyFormat.exec(token)
        return authenticateSpan(
          match === null ? malformedKey : Effect.flatMap(lookup(match[1]!), check(match[1]! as KeyId, match[2]!))
        )
      }

      const create = (options: CreateOptions) =>
        Effect.gen(function*() {
        const idBytes = yield* ids.randomBytes(16)
        const keyId = Array.from(idBytes, (byte) => idAlphabet[byte % idAlphabet.length]).join("")
        const secret = Buffer.from(yield* ids.randomBytes(32)).toString("hex")
        const now = yield* Clock.currentTimeMillis
        const row: ApiKeyRow = {
          keyId,
          brandId: options.brandId.toLowerCase(),
          name: Option.getOrNull(options.name),
          scopes: Array.from(new Set(options.scopes)),
          secretSha256: Buffer.from(sha256(secret)).toString("hex"),
          createdAt: now,
          expiresAt: Option.getOrNull(Option.map(options.expiresIn, (d) => now + Duration.toMillis(d))),
          revokedAt: null
        }
        const info = toInfo(row)
        yield* repo.insert(row)
        return { apiKey: `cak_${keyId}_${secret}`, info }
      }).pipe(span("ApiKeys.create"))

      return {
        authenticate,
        create,
        list: Effect.map(repo.list, (rows) => rows.map(toInfo)),
        revoke: (keyId) => Effect.flatMap(Clock.currentTimeMillis, (now) => repo.revoke(keyId, now))
      }
    })
  )
}
