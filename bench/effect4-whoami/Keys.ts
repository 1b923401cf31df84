/**
 * The keys as the service reads them per request, from the SQLite file `campaign-api keys create`
 * makes: every key held in memory and loaded again when the keys' generation moves (the wal-index
 * header, then `PRAGMA data_version`, then the counter its triggers keep), a bearer token checked
 * by its format, its SHA-256 against the key's two digests in constant time, revoked and expired;
 * and each secret's last use noted in memory, written once a minute (README, The key command line;
 * src/ApiKeys.ts, src/ApiKeys/KeyUsage.ts, src/Database/KeyChanges.ts).
 */
import { Database } from "bun:sqlite"
import { Context, Effect, Layer, Schedule } from "effect"
import type { RefusalReason } from "./Api.ts"
import { closeSync, openSync, readSync, realpathSync, statSync, watch } from "node:fs"
import { timingSafeEqual } from "node:crypto"
import { dirname } from "node:path"

export interface RateLimitPolicy {
  readonly max: number
  readonly windowSeconds: number
}

/** A key whose secret matched: who it is, when that secret stops working, its own limit. */
export interface Authenticated {
  readonly identity: { readonly keyId: string; readonly brandId: string; readonly scopes: ReadonlyArray<string> }
  readonly endsAt: number | null
  readonly rateLimit: RateLimitPolicy | null
  readonly secretSha256: string
}


export interface KeyRefusal {
  readonly reason: RefusalReason
  readonly keyId: string | null
  readonly brandId: string | null
}

/** A database that cannot vouch for a key (its files replaced, a read failing): a 503. */
export class DatabaseUnavailable extends Error {}

/** `cak_<keyId>_<secret>` (src/ApiKeys.ts). */
const keyFormat = /^cak_([a-z0-9]{16})_([0-9a-f]{64})$/
const sha256 = (text: string): Uint8Array => Bun.SHA256.hash(text) as Uint8Array
const decoyDigest = sha256("decoy")

interface Stored {
  readonly key_id: string
  readonly brand_id: string
  readonly scopes: string
  readonly secret_sha256: string
  readonly expires_at: number | null
  readonly revoked_at: number | null
  readonly previous_secret_sha256: string | null
  readonly previous_secret_ends_at: number | null
  readonly rate_limit_max: number | null
  readonly rate_limit_window_seconds: number | null
}

interface Cached {
  readonly brandId: string
  readonly revokedAt: number | null
  readonly expiresAt: number | null
  readonly previousSecretSha256: string | null
  readonly digest: Uint8Array
  readonly previousDigest: Uint8Array
  readonly current: Authenticated
  readonly previous: Authenticated
}

const earlier = (a: number | null, b: number | null) => a === null ? b : b === null ? a : Math.min(a, b)

/**
 * Whether the database's files are still the ones opened: the directory is watched, and the files
 * are looked at only after something in it was renamed or removed (src/Database/Sqlite.ts).
 */
const watchFiles = (filename: string) => {
  const inode = (path: string) => {
    try {
      return statSync(path).ino
    } catch {
      return undefined
    }
  }
  const opened = inode(filename)
  let suspect = false
  let changed = false
  const watcher = watch(dirname(filename), () => {
    suspect = true
  })
  watcher.unref()
  return {
    changed: () => {
      if (suspect || changed) {
        suspect = false
        changed = inode(filename) !== opened
      }
      return changed
    },
    close: () => watcher.close()
  }
}

/**
 * The keys' generation on SQLite: the wal-index header (the first 96 bytes of `-shm`, both copies)
 * read with `pread` on every request, `PRAGMA data_version` only when it moved, the counter only
 * when that moved (src/Database/KeyChanges.ts, which says why each step).
 */
const makeGeneration = (db: Database, filename: string) => {
  const dataVersion = db.query<{ data_version: number }, []>("PRAGMA data_version")
  const counter = db.query<{ generation: number }, []>("SELECT generation FROM api_keys_generation")
  dataVersion.get()
  let fd: number | undefined
  try {
    fd = openSync(`${realpathSync(filename)}-shm`, "r")
  } catch {
    fd = undefined
  }
  const words = new Uint32Array(24)
  const bytes = new Uint8Array(words.buffer)
  const readInto = (): boolean => {
    if (fd !== undefined && readSync(fd, bytes, 0, 96, 0) === 96) return true
    words.fill(0)
    return false
  }
  const unchangedSince = (seen: Uint32Array) => {
    if (!readInto()) return false
    for (let i = 0; i < 12; i++) if (words[i] !== seen[i] || words[i] !== words[i + 12]) return false
    for (let i = 12; i < 24; i++) if (words[i] !== seen[i]) return false
    return true
  }
  let seenVersion = -1
  let generation = -1
  let headerAtLastRead: Uint32Array | undefined
  return {
    read: (): number => {
      if (headerAtLastRead !== undefined && unchangedSince(headerAtLastRead)) return generation
      readInto()
      const before = words.slice()
      const version = dataVersion.get()!.data_version
      if (version !== seenVersion) {
        generation = Number(counter.get()!.generation)
        seenVersion = version
      }
      headerAtLastRead = before
      return generation
    },
    close: () => {
      if (fd !== undefined) closeSync(fd)
    }
  }
}

export class ApiKeys extends Context.Service<ApiKeys, {
  /** The key a bearer token is, or why it is refused. */
  readonly authenticate: (token: string) => Authenticated | KeyRefusal
}>()("ApiKeys") {
  static readonly layer = (filename: string) =>
    Layer.effect(
      ApiKeys,
      Effect.gen(function*() {
        const db = yield* Effect.acquireRelease(
          Effect.sync(() => new Database(filename, { readonly: true })),
          (db) => Effect.sync(() => db.close())
        )
        // Never wait for a lock on the event loop (README for contributors; src/Database/KeyChanges.ts).
        db.run("PRAGMA busy_timeout = 0")
        const files = watchFiles(filename)
        const generation = makeGeneration(db, filename)
        yield* Effect.addFinalizer(() =>
          Effect.sync(() => {
            files.close()
            generation.close()
          })
        )
        const list = db.query<Stored, []>("SELECT * FROM api_keys ORDER BY created_at, key_id")
        const limits = new Map<string, RateLimitPolicy>()
        const sameLimit = (max: number | null, windowSeconds: number | null): RateLimitPolicy | null => {
          if (max === null || windowSeconds === null) return null
          const name = `${max}/${windowSeconds}`
          let known = limits.get(name)
          if (known === undefined) limits.set(name, known = { max: Number(max), windowSeconds: Number(windowSeconds) })
          return known
        }
        const toCached = (row: Stored): Cached => {
          const identity = {
            keyId: row.key_id,
            brandId: row.brand_id,
            scopes: row.scopes === "" ? [] : row.scopes.split(" ")
          }
          const expiresAt = row.expires_at === null ? null : Number(row.expires_at)
          const previousEndsAt = row.previous_secret_ends_at === null ? null : Number(row.previous_secret_ends_at)
          const rateLimit = sameLimit(row.rate_limit_max, row.rate_limit_window_seconds)
          return {
            brandId: row.brand_id,
            revokedAt: row.revoked_at === null ? null : Number(row.revoked_at),
            expiresAt,
            previousSecretSha256: row.previous_secret_sha256,
            digest: Buffer.from(row.secret_sha256, "hex"),
            previousDigest: row.previous_secret_sha256 === null
              ? decoyDigest
              : Buffer.from(row.previous_secret_sha256, "hex"),
            current: { identity, endsAt: expiresAt, rateLimit, secretSha256: row.secret_sha256 },
            previous: {
              identity,
              endsAt: earlier(expiresAt, previousEndsAt),
              rateLimit,
              secretSha256: row.previous_secret_sha256 ?? ""
            }
          }
        }
        let cache: { generation: number; keys: ReadonlyMap<string, Cached> } | undefined
        const lookup = (keyId: string): Cached | undefined => {
          if (files.changed()) throw new DatabaseUnavailable("the database files changed under the server")
          let now: number
          try {
            now = generation.read()
            if (cache === undefined || cache.generation < now) {
              cache = { generation: now, keys: new Map(list.all().map((row) => [row.key_id, toCached(row)])) }
            }
          } catch (error) {
            throw new DatabaseUnavailable(`reading the API keys: ${String(error)}`)
          }
          return cache.keys.get(keyId)
        }

        const authenticate = (token: string): Authenticated | KeyRefusal => {
          const match = keyFormat.exec(token)
          if (match === null) return { reason: "malformed", keyId: null, brandId: null }
          const keyId = match[1]!
          const stored = lookup(keyId)
          // One digest and two comparisons whatever the case (src/ApiKeys.ts says why).
          const digest = sha256(match[2]!)
          const currentMatches = timingSafeEqual(digest, stored === undefined ? decoyDigest : stored.digest)
          const previousMatches = timingSafeEqual(digest, stored === undefined ? decoyDigest : stored.previousDigest)
          if (stored === undefined) return { reason: "unknown key", keyId, brandId: null }
          const brandId = stored.brandId
          const now = Date.now()
          const matched = currentMatches
            ? stored.current
            : previousMatches && stored.previousSecretSha256 !== null
            ? stored.previous
            : undefined
          if (matched === undefined) return { reason: "wrong secret", keyId, brandId }
          if (stored.revokedAt !== null) return { reason: "revoked", keyId, brandId }
          if (matched.endsAt !== null && matched.endsAt <= now) {
            return {
              reason: matched === stored.current || stored.expiresAt === matched.endsAt ? "expired" : "grace ended",
              keyId,
              brandId
            }
          }
          return matched
        }
        return { authenticate }
      })
    )
}

export const isRefusal = (result: Authenticated | KeyRefusal): result is KeyRefusal => "reason" in result

/** How precisely last use is kept, and how often it is written (src/ApiKeys/KeyUsage.ts). */
const usageResolutionMillis = 60_000

/**
 * When each secret was last used, to the minute: a request only notes it in memory; the notes are
 * written in one batch a minute, and once more when the server stops, on a connection of their own
 * that never waits for a lock (a busy database keeps the batch for the next write).
 */
export class KeyUsage extends Context.Service<KeyUsage, {
  readonly record: (keyId: string, secretSha256: string) => void
}>()("ApiKeys/KeyUsage") {
  static readonly layer = (filename: string) =>
    Layer.effect(
      KeyUsage,
      Effect.gen(function*() {
        const db = yield* Effect.acquireRelease(
          Effect.sync(() => new Database(filename)),
          (db) => Effect.sync(() => db.close())
        )
        db.run("PRAGMA busy_timeout = 0")
        const upsert = db.query(
          `INSERT INTO api_key_usage (key_id, secret_sha256, last_used_at) VALUES (?, ?, ?)
           ON CONFLICT (key_id, secret_sha256) DO UPDATE SET last_used_at = max(api_key_usage.last_used_at, excluded.last_used_at)`
        )
        const noted = new Map<string, number>()
        let pending = new Map<string, { keyId: string; secretSha256: string; at: number }>()
        const record = (keyId: string, secretSha256: string) => {
          const now = Date.now()
          const minute = now - (now % usageResolutionMillis)
          if (noted.get(secretSha256) === minute) return
          noted.set(secretSha256, minute)
          pending.set(secretSha256, { keyId, secretSha256, at: minute })
        }
        const flush = Effect.sync(() => {
          const now = Date.now()
          for (const [digest, minute] of noted) if (minute < now - (now % usageResolutionMillis)) noted.delete(digest)
          if (pending.size === 0) return
          const batch = [...pending.values()].sort((a, b) =>
            a.keyId < b.keyId ? -1 : a.keyId > b.keyId ? 1 : a.secretSha256 < b.secretSha256 ? -1 : 1
          )
          const written = pending
          pending = new Map()
          try {
            db.transaction(() => {
              for (const use of batch) upsert.run(use.keyId, use.secretSha256, use.at)
            })()
          } catch {
            for (const [digest, use] of written) if (!pending.has(digest)) pending.set(digest, use)
          }
        })
        yield* flush.pipe(
          Effect.repeat(Schedule.spaced(usageResolutionMillis)),
          Effect.delay(usageResolutionMillis),
          Effect.forkScoped
        )
        yield* Effect.addFinalizer(() => flush)
        return { record }
      })
    )
}
