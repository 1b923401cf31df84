import { RateLimiter } from "@effect/experimental"
import { HttpApp, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { describe, expect, it, layer } from "@effect/vitest"
import {
  Arbitrary,
  Cause,
  Clock,
  Context,
  DateTime,
  Deferred,
  Duration,
  Effect,
  Either,
  Exit,
  FastCheck as fc,
  Fiber,
  FiberId,
  FiberRef,
  HashMap,
  Layer,
  List,
  Logger,
  LogLevel,
  LogSpan,
  ManagedRuntime,
  Option,
  ParseResult,
  PubSub,
  Schema,
  Scope as EffectScope,
  TestClock
} from "effect"
import { execFileSync } from "node:child_process"
import { createHash } from "node:crypto"
import { closeSync, constants, mkdtempSync, openSync, readSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Activations } from "../src/Activations.ts"
import { ActivationsRepo } from "../src/Activations/ActivationsRepo.ts"
import { pageJson, recordJson } from "../src/Activations/Http.ts"
import { Analytics } from "../src/Analytics.ts"
import { ApiKeys } from "../src/ApiKeys.ts"
import { type ApiKeyRow, ApiKeysRepo } from "../src/ApiKeys/ApiKeysRepo.ts"
import { KeyUsage } from "../src/ApiKeys/KeyUsage.ts"
import { AppConfig } from "../src/Config.ts"
import type { KeyChange } from "../src/Database/KeyChanges.ts"
import { DatabaseOutage } from "../src/Database/Outage.ts"
import { databaseError } from "../src/Database/SqlErrors.ts"
import { ActivateResponse, Activation, ActivationList, analyticsLine } from "../src/Domain/Activation.ts"
import type { ApiKeyIdentity, BrandId, KeyId, Scope } from "../src/Domain/ApiKey.ts"
import { ConcurrencyLimited, KeyRefused, type RefusalReason } from "../src/Domain/Errors.ts"
import {
  decodeIdempotencyKeyHeader,
  IdempotencyKeyHeader,
  isMissingIdempotencyKey
} from "../src/Domain/IdempotencyKey.ts"
import { Draining } from "../src/Draining.ts"
import { makeCallers } from "../src/Edge/Caller.ts"
import { makeRenderer } from "../src/Edge/Render.ts"
import { HealthRepo } from "../src/Health/HealthRepo.ts"
import { HealthHandlers } from "../src/Health/Http.ts"
import { canonicalJson, fingerprintOf, type IdempotentRequest } from "../src/Idempotency.ts"
import { Ids } from "../src/Ids.ts"
import { accessLine, jsonLine } from "../src/Logging.ts"
import { makeLineWriter } from "../src/Logging/Stderr.ts"
import { MetricsOff } from "../src/Metrics.ts"
import { RateLimit } from "../src/RateLimit.ts"
import { RateLimitStore } from "../src/RateLimit/Store.ts"
import { addResponseHeaders, removeResponseHeaders } from "../src/Responses.ts"
import { Warming } from "../src/WarmUp.ts"
import { annotationOf, captureLogs } from "./support/telemetry.ts"
import { makeTestLayer } from "./support/testLayer.ts"

const brandId = "0b6f4c52-2f4e-4d0a-9a57-3c1d2e5f6a7b" as BrandId
const sha256Hex = (text: string) => createHash("sha256").update(text).digest("hex")

describe("makeTestLayer", () => {
  const KeysRepoThatOnlyRevokes = makeTestLayer(ApiKeysRepo)({ revoke: () => Effect.succeed(true) })

  it.effect("a member the double leaves out dies naming the tag and member, called or yielded", () =>
    Effect.gen(function*() {
      const repo = yield* ApiKeysRepo
      expect(yield* Effect.exit(repo.revoke("any", 0))).toEqual(Exit.succeed(true))
      expect(yield* Effect.exit(repo.insert({} as ApiKeyRow))).toEqual(
        Exit.die("ApiKeys/ApiKeysRepo.insert not implemented")
      )
      expect(yield* Effect.exit(repo.list)).toEqual(Exit.die("ApiKeys/ApiKeysRepo.list not implemented"))
    }).pipe(Effect.provide(KeysRepoThatOnlyRevokes)))
})

const storedKeys = new Map<string, ApiKeyRow>()
/** Moves on every change, as the triggers of the real table make it. */
let generation = 0

const ApiKeysRepoInMemory = makeTestLayer(ApiKeysRepo)({
  insert: (row) =>
    Effect.sync(() => {
      storedKeys.set(row.keyId, row)
      generation++
    }),
  list: Effect.sync(() => [...storedKeys.values()]),
  generation: Effect.sync(() => generation),
  // As on SQLite: the generation is exact, there is nothing to hear of.
  announcements: undefined,
  revoke: (keyId, at) =>
    Effect.sync(() => {
      const row = storedKeys.get(keyId)
      if (row === undefined || row.revokedAt !== null) return false
      storedKeys.set(keyId, { ...row, revokedAt: at })
      generation++
      return true
    }),
  roll: (keyId, secretSha256, graceEndsAt, now) =>
    Effect.sync(() => {
      const row = storedKeys.get(keyId)
      if (
        row === undefined || row.revokedAt !== null || (row.expiresAt !== null && row.expiresAt <= now)
      ) return undefined
      const endsAt = row.expiresAt !== null && row.expiresAt < graceEndsAt ? row.expiresAt : graceEndsAt
      storedKeys.set(keyId, {
        ...row,
        secretSha256,
        previousSecretSha256: row.secretSha256,
        previousSecretEndsAt: endsAt
      })
      generation++
      return endsAt
    }),
  update: (keyId, changes, now) =>
    Effect.sync(() => {
      const row = storedKeys.get(keyId)
      if (row === undefined || row.revokedAt !== null || (row.expiresAt !== null && row.expiresAt <= now)) {
        return undefined
      }
      const { expiresAt, ...others } = changes
      const expiry = expiresAt === undefined ? {} : {
        expiresAt,
        previousSecretEndsAt: expiresAt !== null && row.previousSecretEndsAt !== null &&
            row.previousSecretEndsAt > expiresAt
          ? expiresAt
          : row.previousSecretEndsAt
      }
      const changed = { ...row, ...others, ...expiry }
      storedKeys.set(keyId, changed)
      generation++
      return changed
    }),
  lastUsed: Effect.succeed([])
})

/** Predictable bytes: each draw is the next block of a SHA-512 counter stream, so no two draws repeat. */
const makeIdsDeterministic = () => {
  let draws = 0
  return makeTestLayer(Ids)({
    randomBytes: (size) => Effect.sync(() => createHash("sha512").update(String(++draws)).digest().subarray(0, size))
  })
}

layer(ApiKeys.Live.pipe(Layer.provide(ApiKeysRepoInMemory), Layer.provide(makeIdsDeterministic())))("ApiKeys", (it) => {
  const scopes: ReadonlyArray<Scope> = ["campaigns:write", "analytics:read"]

  const createKey = (expiresIn: Option.Option<Duration.Duration> = Option.none()) =>
    Effect.flatMap(ApiKeys, (keys) => keys.create({ brandId, scopes, name: Option.some("integration"), expiresIn }))

  const authenticate = (token: string) => Effect.flatMap(ApiKeys, (keys) => keys.authenticate(token))

  const expectRefused = (token: string, reason: RefusalReason, keyId: string | null, brand: BrandId | null) =>
    Effect.gen(function*() {
      const refusal = yield* Effect.flip(authenticate(token))
      expect(refusal).toEqual(new KeyRefused({ reason, keyId: keyId as KeyId | null, brandId: brand }))
    })

  const secretOf = (apiKey: string) => apiKey.split("_")[2]!

  it.effect("create returns cak_<16 [a-z0-9]>_<64 hex> whose key id is the stored one", () =>
    Effect.gen(function*() {
      const { apiKey, info } = yield* createKey()
      expect(apiKey).toMatch(/^cak_[a-z0-9]{16}_[0-9a-f]{64}$/)
      expect(apiKey.startsWith(`cak_${info.keyId}_`)).toBe(true)
      expect(storedKeys.has(info.keyId)).toBe(true)
    }))

  it.effect("stores only the SHA-256 digest of the secret, never the plaintext", () =>
    Effect.gen(function*() {
      const { apiKey, info } = yield* createKey()
      const row = storedKeys.get(info.keyId)!
      expect(row.secretSha256).toBe(sha256Hex(secretOf(apiKey)))
      expect(JSON.stringify(row)).not.toContain(secretOf(apiKey))
    }))

  it.effect("authenticate accepts a created key and resolves its key id, brand and scopes", () =>
    Effect.gen(function*() {
      const { apiKey, info } = yield* createKey()
      const identity = yield* authenticate(apiKey)
      expect(identity).toEqual({
        identity: { keyId: info.keyId, brandId, scopes },
        endsAt: null,
        rateLimit: null,
        secretSha256: sha256Hex(secretOf(apiKey))
      })
    }))

  it.effect("refuses a malformed token as malformed, naming no key id even when one is in it", () =>
    Effect.gen(function*() {
      const { apiKey } = yield* createKey()
      for (const token of ["", "cak_", "not-a-key", apiKey.toUpperCase(), `${apiKey}0`, ` ${apiKey}`]) {
        yield* expectRefused(token, "malformed", null, null)
      }
    }))

  it.effect("refuses an unknown key id with a real secret as an unknown key: its id, no brand", () =>
    Effect.gen(function*() {
      const { apiKey } = yield* createKey()
      yield* expectRefused(`cak_${"0".repeat(16)}_${secretOf(apiKey)}`, "unknown key", "0".repeat(16), null)
    }))

  it.effect("refuses a known key id with a wrong secret, naming the key and its brand", () =>
    Effect.gen(function*() {
      const { info } = yield* createKey()
      yield* expectRefused(`cak_${info.keyId}_${"0".repeat(64)}`, "wrong secret", info.keyId, brandId)
    }))

  it.effect("refuses a revoked key as revoked, and as a wrong secret when its secret is wrong too", () =>
    Effect.gen(function*() {
      const keys = yield* ApiKeys
      const { apiKey, info } = yield* createKey()
      yield* authenticate(apiKey)
      expect(yield* keys.revoke(info.keyId)).toBe(true)
      yield* expectRefused(apiKey, "revoked", info.keyId, brandId)
      yield* expectRefused(`cak_${info.keyId}_${"0".repeat(64)}`, "wrong secret", info.keyId, brandId)
    }))

  it.effect("accepts a key until the moment it expires and refuses it from then on", () =>
    Effect.gen(function*() {
      const { apiKey, info } = yield* createKey(Option.some(Duration.days(1)))
      yield* TestClock.adjust(Duration.subtract(Duration.days(1), Duration.millis(1)))
      yield* authenticate(apiKey)
      yield* TestClock.adjust(Duration.millis(1))
      yield* expectRefused(apiKey, "expired", info.keyId, brandId)
    }))

  it.effect("a rolled key answers with the same identity for both secrets until the grace ends, then only for the new one", () =>
    Effect.gen(function*() {
      const keys = yield* ApiKeys
      const { apiKey: before, info } = yield* createKey()
      const rolled = (yield* keys.roll(info.keyId, Duration.hours(24)))!
      expect(rolled.keyId).toBe(info.keyId)
      expect(rolled.apiKey).toMatch(new RegExp(`^cak_${info.keyId}_[0-9a-f]{64}$`))
      expect(rolled.apiKey).not.toBe(before)
      const graceEnd = Duration.toMillis(Duration.hours(24))
      const startedAt = yield* TestClock.currentTimeMillis
      expect(DateTime.toEpochMillis(rolled.previousSecretEndsAt)).toBe(startedAt + graceEnd)
      const identity = { keyId: info.keyId, brandId, scopes }
      const digestOf = (apiKey: string) => sha256Hex(secretOf(apiKey))
      expect(yield* authenticate(rolled.apiKey)).toEqual({
        identity,
        endsAt: null,
        rateLimit: null,
        secretSha256: digestOf(rolled.apiKey)
      })
      expect(yield* authenticate(before)).toEqual({
        identity,
        endsAt: startedAt + graceEnd,
        rateLimit: null,
        secretSha256: digestOf(before)
      })
      yield* TestClock.adjust(Duration.subtract(Duration.hours(24), Duration.millis(1)))
      yield* authenticate(before)
      yield* TestClock.adjust(Duration.millis(1))
      yield* expectRefused(before, "grace ended", info.keyId, brandId)
      expect((yield* authenticate(rolled.apiKey)).identity).toEqual(identity)
    }))

  it.effect("rolling again ends the older secret at once: at most two secrets work", () =>
    Effect.gen(function*() {
      const keys = yield* ApiKeys
      const { apiKey: first, info } = yield* createKey()
      const second = (yield* keys.roll(info.keyId, Duration.days(7)))!.apiKey
      const third = (yield* keys.roll(info.keyId, Duration.days(7)))!.apiKey
      yield* expectRefused(first, "wrong secret", info.keyId, brandId)
      yield* authenticate(second)
      yield* authenticate(third)
    }))

  it.effect("a grace of 0 ends the previous secret at once; a grace never outlives the key's expiry", () =>
    Effect.gen(function*() {
      const keys = yield* ApiKeys
      const { apiKey: now, info } = yield* createKey()
      yield* keys.roll(info.keyId, Duration.zero)
      yield* expectRefused(now, "grace ended", info.keyId, brandId)

      const trial = yield* createKey(Option.some(Duration.days(2)))
      const startedAt = yield* TestClock.currentTimeMillis
      const rolled = (yield* keys.roll(trial.info.keyId, Duration.days(30)))!
      const expiresAt = startedAt + Duration.toMillis(Duration.days(2))
      expect(DateTime.toEpochMillis(rolled.previousSecretEndsAt)).toBe(expiresAt)
      expect((yield* authenticate(trial.apiKey)).endsAt).toBe(expiresAt)
      expect((yield* authenticate(rolled.apiKey)).endsAt).toBe(expiresAt)
      yield* TestClock.adjust(Duration.days(2))
      yield* expectRefused(trial.apiKey, "expired", trial.info.keyId, brandId)
      yield* expectRefused(rolled.apiKey, "expired", trial.info.keyId, brandId)
    }))

  it.effect("an update counts from the next request: scopes, and a limit of its own found as one object from one load to the next", () =>
    Effect.gen(function*() {
      const keys = yield* ApiKeys
      const { apiKey, info } = yield* createKey()
      expect((yield* authenticate(apiKey)).rateLimit).toBeNull()
      expect(yield* keys.update(info.keyId, { scopes: ["campaigns:read"], rateLimit: { max: 5, windowSeconds: 60 } }))
        .toEqual({ expiresAt: null, graceCutTo: null })
      const updated = yield* authenticate(apiKey)
      expect(updated.identity.scopes).toEqual(["campaigns:read"])
      expect(updated.rateLimit).toEqual({ max: 5, windowSeconds: 60 })
      // Another change loads every key again: the same limit is the same object.
      yield* createKey()
      expect((yield* authenticate(apiKey)).rateLimit).toBe(updated.rateLimit)
      yield* keys.revoke(info.keyId)
      expect(yield* keys.update(info.keyId, { name: "late" })).toBeUndefined()
    }))

  it.effect("an update's expiry counts from now and covers both of a roll's secrets: an earlier one ends the grace, and says so", () =>
    Effect.gen(function*() {
      const keys = yield* ApiKeys
      const { apiKey: before, info } = yield* createKey()
      const rolled = (yield* keys.roll(info.keyId, Duration.days(7)))!
      const startedAt = yield* TestClock.currentTimeMillis
      const graceEnd = startedAt + Duration.toMillis(Duration.days(7))
      const later = yield* keys.update(info.keyId, { expiresIn: Duration.days(10) })
      expect(later).toEqual({
        expiresAt: DateTime.unsafeMake(startedAt + Duration.toMillis(Duration.days(10))),
        graceCutTo: null
      })
      expect((yield* authenticate(before)).endsAt).toBe(graceEnd)
      const expiresAt = startedAt + Duration.toMillis(Duration.days(2))
      expect(yield* keys.update(info.keyId, { expiresIn: Duration.days(2) })).toEqual({
        expiresAt: DateTime.unsafeMake(expiresAt),
        graceCutTo: DateTime.unsafeMake(expiresAt)
      })
      expect((yield* authenticate(before)).endsAt).toBe(expiresAt)
      expect((yield* authenticate(rolled.apiKey)).endsAt).toBe(expiresAt)
      expect(yield* keys.update(info.keyId, { expiresIn: null })).toEqual({ expiresAt: null, graceCutTo: null })
      expect((yield* authenticate(rolled.apiKey)).endsAt).toBeNull()
      yield* TestClock.adjust(Duration.days(2))
      yield* expectRefused(before, "grace ended", info.keyId, brandId)
      expect((yield* authenticate(rolled.apiKey)).identity.keyId).toBe(info.keyId)
    }))

  it.effect("a revoked key, an expired key and an unknown id cannot be rolled", () =>
    Effect.gen(function*() {
      const keys = yield* ApiKeys
      const revoked = yield* createKey()
      yield* keys.revoke(revoked.info.keyId)
      expect(yield* keys.roll(revoked.info.keyId, Duration.hours(1))).toBeUndefined()
      const expired = yield* createKey(Option.some(Duration.days(1)))
      yield* TestClock.adjust(Duration.days(1))
      expect(yield* keys.roll(expired.info.keyId, Duration.hours(1))).toBeUndefined()
      expect(yield* keys.roll("0".repeat(16), Duration.hours(1))).toBeUndefined()
      yield* expectRefused(revoked.apiKey, "revoked", revoked.info.keyId, brandId)
    }))
})

describe("KeyUsage", () => {
  /** Each batch written, each use as `<key>/<secret>@<minute>`. */
  const written: Array<ReadonlyArray<string>> = []
  let failing = false
  const minute = 60_000
  const RecordingRepo = makeTestLayer(ApiKeysRepo)({
    recordUsage: (uses) =>
      failing
        ? Effect.die(databaseError("SQLITE_BUSY", "locked"))
        : Effect.sync(() => void written.push(uses.map((use) => `${use.keyId}/${use.secretSha256}@${use.at / minute}`)))
  })
  const makeUsage = Layer.build(KeyUsage.Live.pipe(Layer.provide(RecordingRepo))).pipe(
    Effect.map(Context.get(KeyUsage))
  )

  it.scoped("notes each secret once per minute and writes the notes in one batch a minute, never on the request", () =>
    Effect.gen(function*() {
      written.length = 0
      yield* TestClock.setTime(10 * minute + 5_000)
      const usage = yield* makeUsage
      for (let i = 0; i < 100; i++) usage.record("key-a", "new")
      usage.record("key-b", "b")
      // A rolled key's previous secret: noted apart.
      usage.record("key-a", "old")
      expect(written).toEqual([])
      yield* TestClock.adjust("30 seconds")
      usage.record("key-a", "new")
      expect(written).toEqual([])
      // The first write, a minute after the start.
      yield* TestClock.adjust("30 seconds")
      expect(written).toEqual([["key-a/new@10", "key-b/b@10", "key-a/old@10"]])
      // A new minute is noted again; a secret unused since is not written again.
      usage.record("key-a", "new")
      yield* TestClock.adjust("1 minute")
      expect(written).toEqual([["key-a/new@10", "key-b/b@10", "key-a/old@10"], ["key-a/new@11"]])
      yield* TestClock.adjust("5 minutes")
      expect(written).toHaveLength(2)
    }))

  it.effect("keeps a batch that could not be written for the next write, and writes what is left when it stops", () =>
    Effect.gen(function*() {
      written.length = 0
      yield* TestClock.setTime(20 * minute)
      yield* Effect.scoped(Effect.gen(function*() {
        const usage = yield* makeUsage
        failing = true
        usage.record("key-a", "a")
        yield* Logger.withMinimumLogLevel(TestClock.adjust("1 minute"), LogLevel.None)
        expect(written).toEqual([])
        failing = false
        usage.record("key-b", "b")
        yield* TestClock.adjust("1 minute")
        expect(written).toEqual([["key-a/a@20", "key-b/b@21"]])
        usage.record("key-a", "a")
      }))
      // Scope closed: the graceful stop's write.
      expect(written.at(-1)).toEqual(["key-a/a@22"])
    }))

  it.effect("a stop during the minute's write waits for it, then writes what was noted meanwhile: nothing is lost", () =>
    Effect.gen(function*() {
      const batches: Array<ReadonlyArray<string>> = []
      const SlowRepo = makeTestLayer(ApiKeysRepo)({
        // The first write takes 10 s (a busy database), the others none.
        recordUsage: (uses) =>
          Effect.zipRight(
            batches.length === 0 ? Effect.sleep("10 seconds") : Effect.void,
            Effect.sync(() => void batches.push(uses.map((use) => `${use.keyId}@${use.at / minute}`)))
          )
      })
      yield* TestClock.setTime(30 * minute)
      const scope = yield* EffectScope.make()
      const usage = yield* Layer.buildWithScope(KeyUsage.Live.pipe(Layer.provide(SlowRepo)), scope).pipe(
        Effect.map(Context.get(KeyUsage))
      )
      usage.record("key-a", "a")
      // The minute's write starts, and is under way…
      yield* TestClock.adjust("1 minute")
      usage.record("key-b", "b")
      // …when the server stops.
      const stopping = yield* Effect.fork(EffectScope.close(scope, Exit.void))
      yield* TestClock.adjust("10 seconds")
      yield* Fiber.join(stopping)
      expect(batches).toEqual([["key-a@30"], ["key-b@31"]])
    }))
})

/**
 * As on PostgreSQL: the generation is the last poll's, behind what is committed until the next
 * poll, and each change is announced as it commits (or, for a key used before its announcement
 * comes, read again).
 */
describe("ApiKeys with a polled generation", () => {
  const rows = new Map<string, ApiKeyRow>()
  let committed = 0
  let polled = 0
  let loads = 0
  const reads: Array<ReadonlyArray<string>> = []
  const announcements = Effect.runSync(PubSub.unbounded<KeyChange>())
  // Anything else the service asked of the database would die here as not implemented.
  const LaggingRepo = makeTestLayer(ApiKeysRepo)({
    insert: (row) =>
      Effect.sync(() => {
        rows.set(row.keyId, row)
        committed++
      }),
    list: Effect.sync(() => {
      loads++
      return [...rows.values()]
    }),
    find: (keyIds) =>
      Effect.sync(() => {
        reads.push(keyIds)
        return keyIds.flatMap((keyId) => rows.get(keyId) ?? [])
      }),
    generation: Effect.sync(() => polled),
    announcements: PubSub.subscribe(announcements)
  })
  const layer = ApiKeys.Live.pipe(Layer.provide(LaggingRepo), Layer.provide(makeIdsDeterministic()))
  const madeUp = (n: number) => `cak_${n.toString(36).padStart(16, "0")}_${"0".repeat(64)}`
  /** Runs `effect` while the test clock moves 10 ms at a time; how long it took on that clock, and its result. */
  const whileTimePasses = <A, E>(effect: Effect.Effect<A, E>) =>
    Effect.gen(function*() {
      const fiber = yield* Effect.fork(effect)
      let elapsedMs = 0
      while (fiber.unsafePoll() === null) {
        yield* TestClock.adjust(Duration.millis(10))
        elapsedMs += 10
      }
      return { elapsedMs, result: yield* Fiber.join(fiber) }
    })
  const newKey = Effect.flatMap(
    ApiKeys,
    (keys) => keys.create({ brandId, scopes: ["campaigns:read"], name: Option.none(), expiresIn: Option.none() })
  )

  it.effect("reads refused key ids again, one read per 50 ms for all of them, and takes a key created since the last poll at its first request", () =>
    Effect.gen(function*() {
      const keys = yield* ApiKeys
      // Refused once read again, 50 ms after that read began (the test clock's).
      const alone = yield* whileTimePasses(Effect.flip(keys.authenticate(madeUp(0))))
      expect([alone.result.reason, alone.elapsedMs]).toEqual(["unknown key", 50])
      expect([loads, reads]).toEqual([1, [[madeUp(0).slice(4, 20)]]])
      const flood = yield* whileTimePasses(Effect.forEach(
        Array.from({ length: 2_000 }, (_, n) => madeUp(n + 1)),
        (token) => Effect.flip(keys.authenticate(token)),
        { concurrency: "unbounded" }
      ))
      expect(new Set(flood.result.map((refusal) => refusal.reason))).toEqual(new Set(["unknown key"]))
      // Every id was read again, in at most one read per 50 ms of the clock.
      expect(new Set(reads.slice(1).flat()).size).toBe(2_000)
      expect(reads.length - 1).toBeLessThanOrEqual(Math.ceil(flood.elapsedMs / 50))
      expect(loads).toBe(1)

      // Created since the last poll, as by another process, and not announced yet: taken at once.
      const { apiKey, info } = yield* newKey
      expect(polled).toBeLessThan(committed)
      const first = yield* whileTimePasses(keys.authenticate(apiKey))
      expect(first.result.identity.keyId).toBe(info.keyId)
      expect(loads).toBe(1)
    }).pipe(Effect.provide(layer)))

  it.effect("applies an announced change at once: a revoked key is refused before the poll moves, and a rolled key's new secret is taken", () =>
    Effect.gen(function*() {
      const keys = yield* ApiKeys
      const { apiKey, info } = yield* newKey
      polled = committed
      expect((yield* keys.authenticate(apiKey)).identity.keyId).toBe(info.keyId)
      const [readsBefore, loadsBefore] = [reads.length, loads]
      rows.set(info.keyId, { ...rows.get(info.keyId)!, revokedAt: 1 })
      committed++
      yield* PubSub.publish(announcements, { keyId: info.keyId, generation: committed })
      while (reads.length === readsBefore) yield* Effect.yieldNow()
      expect(reads.at(-1)).toEqual([info.keyId])
      expect((yield* Effect.flip(keys.authenticate(apiKey))).reason).toBe("revoked")
      // The poll then reads the generation the announcement brought: nothing to load again.
      polled = committed
      expect((yield* Effect.flip(keys.authenticate(apiKey))).reason).toBe("revoked")
      expect(loads).toBe(loadsBefore)
      // An announcement after a gap (one went missing): the poll's generation loads the keys again.
      committed += 2
      yield* PubSub.publish(announcements, { keyId: info.keyId, generation: committed })
      while (reads.length === readsBefore + 1) yield* Effect.yieldNow()
      polled = committed
      expect((yield* Effect.flip(keys.authenticate(apiKey))).reason).toBe("revoked")
      expect(loads).toBe(loadsBefore + 1)

      // A secret rolled in by another process, its announcement not yet come: read again, and taken.
      const rolled = yield* newKey
      polled = committed
      expect((yield* keys.authenticate(rolled.apiKey)).identity.keyId).toBe(rolled.info.keyId)
      const secret = "5".repeat(64)
      const row = rows.get(rolled.info.keyId)!
      rows.set(rolled.info.keyId, {
        ...row,
        secretSha256: sha256Hex(secret),
        previousSecretSha256: row.secretSha256,
        previousSecretEndsAt: 0
      })
      const newSecret = yield* whileTimePasses(keys.authenticate(`cak_${rolled.info.keyId}_${secret}`))
      expect(newSecret.result.identity.keyId).toBe(rolled.info.keyId)
      // Its previous secret's grace ended at once: refused without another read.
      const readsAfterRoll = reads.length
      expect((yield* Effect.flip(keys.authenticate(rolled.apiKey))).reason).toBe("grace ended")
      expect(reads.length).toBe(readsAfterRoll)
    }).pipe(Effect.provide(layer)))

  it.effect("requests that find the keys changed at the same moment share one load of them", () => {
    let asked = 0
    let loads = 0
    const loaded = Deferred.unsafeMake<void>(FiberId.none)
    const SlowRepo = makeTestLayer(ApiKeysRepo)({
      generation: Effect.sync(() => {
        asked++
        return 1
      }),
      list: Effect.zipRight(Effect.sync(() => loads++), Effect.as(Deferred.await(loaded), [])),
      announcements: undefined
    })
    return Effect.gen(function*() {
      const keys = yield* ApiKeys
      const refusals = yield* Effect.fork(
        Effect.forEach(
          Array.from({ length: 50 }, (_, n) => madeUp(n)),
          (token) => Effect.flip(keys.authenticate(token)),
          { concurrency: "unbounded" }
        )
      )
      // Every one of them is waiting for the keys before they come.
      while (asked < 50) yield* Effect.yieldNow()
      yield* Deferred.succeed(loaded, undefined)
      expect(new Set((yield* Fiber.join(refusals)).map((refusal) => refusal.reason))).toEqual(new Set(["unknown key"]))
      expect(loads).toBe(1)
    }).pipe(Effect.provide(ApiKeys.Live.pipe(Layer.provide(SlowRepo), Layer.provide(makeIdsDeterministic()))))
  })
})

const AppConfigTest = makeTestLayer(AppConfig)({ rateLimit: { max: 3, window: Duration.seconds(60) } })

const RateLimitInMemory = RateLimit.layer.pipe(
  Layer.provide(RateLimiter.layer),
  Layer.provide(RateLimitStore.memory),
  Layer.provide(AppConfigTest)
)

layer(RateLimitInMemory)("RateLimit (3 per 60 s)", (it) => {
  const consume = (keyId: string) => Effect.flatMap(RateLimit, (limit) => limit.consume(keyId))
  const consumeTimes = (keyId: string, times: number) => Effect.replicateEffect(consume(keyId), times)

  it.effect("publishes the configured policy", () =>
    Effect.gen(function*() {
      const { policy } = yield* RateLimit
      expect(policy).toEqual({ max: 3, windowSeconds: 60 })
    }))

  it.effect("allows three requests, counting the remainder down to zero", () =>
    Effect.gen(function*() {
      const decisions = yield* consumeTimes("allows-three", 3)
      expect(decisions.map(({ allowed, remaining }) => ({ allowed, remaining }))).toEqual([
        { allowed: true, remaining: 2 },
        { allowed: true, remaining: 1 },
        { allowed: true, remaining: 0 }
      ])
    }))

  it.effect("refuses the fourth and says when to retry", () =>
    Effect.gen(function*() {
      yield* consumeTimes("refuses-fourth", 3)
      const fourth = yield* consume("refuses-fourth")
      expect(fourth.allowed).toBe(false)
      expect(fourth.remaining).toBe(0)
      expect(fourth.retryAfterSeconds).toBeGreaterThanOrEqual(1)
    }))

  it.effect("counts Retry-After down to the next token, not a whole refill interval", () =>
    Effect.gen(function*() {
      const third = (yield* consumeTimes("counts-down", 3))[2]!
      expect(third).toEqual({ allowed: true, remaining: 0, retryAfterSeconds: 20 })
      yield* TestClock.adjust("15 seconds")
      expect(yield* consume("counts-down")).toEqual({ allowed: false, remaining: 0, retryAfterSeconds: 5 })
      yield* TestClock.adjust("4500 millis")
      expect((yield* consume("counts-down")).retryAfterSeconds).toBe(1)
      yield* TestClock.adjust("500 millis")
      expect((yield* consume("counts-down")).allowed).toBe(true)
    }))

  it.effect("keeps a bucket per key", () =>
    Effect.gen(function*() {
      yield* consumeTimes("exhausted", 4)
      const other = yield* consume("untouched")
      expect(other).toEqual({ allowed: true, remaining: 2, retryAfterSeconds: 0 })
    }))

  it.effect("a key's own limit has its own numbers and bucket, and a changed limit starts full", () =>
    Effect.gen(function*() {
      const limit = yield* RateLimit
      const own = { max: 2, windowSeconds: 10 }
      const decisions = yield* Effect.replicateEffect(limit.consume("own-limit", own), 3)
      expect(decisions).toEqual([
        { allowed: true, remaining: 1, retryAfterSeconds: 0 },
        { allowed: true, remaining: 0, retryAfterSeconds: 5 },
        { allowed: false, remaining: 0, retryAfterSeconds: 5 }
      ])
      const raised = yield* Effect.replicateEffect(limit.consume("own-limit", { max: 5, windowSeconds: 10 }), 5)
      expect(raised.map(({ allowed }) => allowed)).toEqual([true, true, true, true, true])
      expect((yield* limit.consume("own-limit", { max: 5, windowSeconds: 10 })).allowed).toBe(false)
    }))

  it.effect("refills one request per 20 s", () =>
    Effect.gen(function*() {
      yield* consumeTimes("refills", 3)
      yield* TestClock.adjust("19 seconds")
      expect((yield* consume("refills")).allowed).toBe(false)
      yield* TestClock.adjust("1 second")
      expect((yield* consume("refills")).allowed).toBe(true)
      expect((yield* consume("refills")).allowed).toBe(false)
    }))
})

describe("RateLimit's memory store", () => {
  // The reference: the library's RateLimiter over the library's own in-process store, with the
  // moment each bucket was first seen noted beside it for the wait until its next token.
  const libraryMemory = Layer.effectContext(Effect.gen(function*() {
    const library = yield* Effect.provide(RateLimiter.RateLimiterStore, RateLimiter.layerStoreMemory)
    const firstSeen = new Map<string, number>()
    const clock = yield* Effect.clock
    const store = RateLimiter.RateLimiterStore.of({
      ...library,
      tokenBucket: (options) =>
        Effect.suspend(() => {
          if (!firstSeen.has(options.key)) firstSeen.set(options.key, clock.unsafeCurrentTimeMillis())
          return library.tokenBucket(options)
        })
    })
    return Context.make(RateLimiter.RateLimiterStore, store).pipe(Context.add(RateLimitStore, {
      kind: "memory",
      connected: () => true,
      untilNextToken: (key, refillMillis, now) =>
        Effect.succeed(refillMillis - ((now - (firstSeen.get(key) ?? now)) % refillMillis))
    }))
  }))

  it("charges as the library's RateLimiter over its own store, for any keys, limits and pauses (property)", async () => {
    const at = { millis: 1_764_700_000_000 }
    const clock: Clock.Clock = {
      [Clock.ClockTypeId]: Clock.ClockTypeId,
      unsafeCurrentTimeMillis: () => at.millis,
      currentTimeMillis: Effect.sync(() => at.millis),
      unsafeCurrentTimeNanos: () => BigInt(at.millis) * 1_000_000n,
      currentTimeNanos: Effect.sync(() => BigInt(at.millis) * 1_000_000n),
      sleep: () => Effect.void
    }
    const runtimeOver = (store: Layer.Layer<RateLimiter.RateLimiterStore | RateLimitStore>) =>
      ManagedRuntime.make(
        RateLimit.layer.pipe(
          Layer.provide(RateLimiter.layer),
          Layer.provide(store),
          Layer.provide(AppConfigTest),
          Layer.provide(Layer.setClock(clock))
        )
      )
    // Limits of their own as ApiKeys keeps them, one object per distinct limit; refill intervals
    // of whole and of fractional milliseconds.
    const own = [{ max: 2, windowSeconds: 10 }, { max: 7, windowSeconds: 1 }, { max: 1000, windowSeconds: 3600 }]
    const step = fc.record({
      key: fc.constantFrom("a", "b", "c"),
      own: fc.constantFrom(null, ...own),
      pause: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 300 }), fc.integer({ min: 0, max: 30_000 }))
    })
    await fc.assert(
      fc.asyncProperty(fc.array(step, { maxLength: 80 }), async (steps) => {
        const reference = runtimeOver(libraryMemory)
        const measured = runtimeOver(RateLimitStore.memory)
        try {
          const charge = (runtime: typeof reference, keyId: string, limit: (typeof own)[number] | null) =>
            runtime.runPromise(Effect.flatMap(RateLimit, (rateLimit) => rateLimit.consume(keyId, limit)))
          for (const { key, own, pause } of steps) {
            at.millis += pause
            expect(await charge(measured, key, own)).toEqual(await charge(reference, key, own))
          }
        } finally {
          await reference.dispose()
          await measured.dispose()
        }
      }),
      { numRuns: 300 }
    )
  })
})

/**
 * Each count the repository is asked for, held until the test lets it answer; `stopped` once it was
 * interrupted before that.
 */
const heldCounts: Array<{ readonly brandId: string; readonly answer: Deferred.Deferred<void>; stopped: boolean }> = []

const AnalyticsWithHeldCounts = Analytics.Live.pipe(
  Layer.provide(
    makeTestLayer(ActivationsRepo)({
      counts: (brandId) =>
        Effect.flatMap(Deferred.make<void>(), (answer) => {
          const held = { brandId, answer, stopped: false }
          return Effect.zipRight(
            Effect.sync(() => void heldCounts.push(held)),
            Effect.as(Deferred.await(answer), { byDay: [], byPlannedDay: [], unscheduled: 0, creators: 0 }).pipe(
              Effect.onInterrupt(() => Effect.sync(() => held.stopped = true))
            )
          )
        })
    })
  )
)

layer(AnalyticsWithHeldCounts)("Analytics", (it) => {
  const otherBrandId = "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
  const campaignId = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
  const range = { from: "2026-03-01", to: undefined }
  /** Lets every fiber that can run go as far as it can. */
  const othersRun = Effect.repeatN(Effect.yieldNow(), 100)
  it.effect("answers a brand's calls one at a time, a second waiting its turn, while another brand's run meanwhile", () =>
    Effect.gen(function*() {
      const analytics = yield* Analytics
      heldCounts.length = 0
      const first = yield* Effect.fork(analytics.campaign(brandId, campaignId, range))
      const second = yield* Effect.fork(analytics.campaign(brandId, campaignId, range))
      const other = yield* Effect.fork(analytics.campaign(otherBrandId, campaignId, range))
      yield* othersRun
      // The first call of each brand reads; the brand's second waits without reading.
      expect(heldCounts.map(({ brandId }) => brandId)).toEqual([brandId, otherBrandId])
      yield* Deferred.succeed(heldCounts[1]!.answer, undefined)
      expect((yield* Fiber.join(other)).campaignId).toBe(campaignId)
      yield* othersRun
      expect(heldCounts).toHaveLength(2)
      yield* Deferred.succeed(heldCounts[0]!.answer, undefined)
      yield* Fiber.join(first)
      yield* othersRun
      // Its turn come, the second reads, and is answered.
      expect(heldCounts.map(({ brandId }) => brandId)).toEqual([brandId, otherBrandId, brandId])
      yield* Deferred.succeed(heldCounts[2]!.answer, undefined)
      expect((yield* Fiber.join(second)).from).toBe("2026-03-01")
    }))

  /** The brand's held counts, in the order they were asked for. */
  const heldOf = (brand: string) => heldCounts.filter((held) => held.brandId === brand)
  const call = (brand: string) =>
    Effect.flatMap(Analytics, (analytics) => Effect.fork(analytics.campaign(brand, campaignId, range)))
  /** A call that is answered without waiting: with what it was refused. */
  const refusedAtOnce = (brand: string) =>
    Effect.gen(function*() {
      const refused = yield* call(brand)
      yield* othersRun
      expect(refused.unsafePoll(), "answered at once").not.toBeNull()
      return yield* Effect.flip(Fiber.join(refused))
    })

  it.effect(`lets ${analyticsLine.waiting} of a brand's calls wait while one is answered, and refuses the next at once with ConcurrencyLimited, other brands' calls unaffected`, () =>
    Effect.gen(function*() {
      heldCounts.length = 0
      const lineBrand = "2d3e4f5a-6b7c-4d8e-9f0a-1b2c3d4e5f6a"
      const line = yield* Effect.forEach(Array.from({ length: 1 + analyticsLine.waiting }), () => call(lineBrand))
      yield* othersRun
      expect(heldOf(lineBrand)).toHaveLength(1)
      const refused = yield* refusedAtOnce(lineBrand)
      expect(refused).toBeInstanceOf(ConcurrencyLimited)
      expect(refused.message).toBe(
        `${analyticsLine.waiting} of this brand's analytics calls are already waiting their turn behind the one being answered; retry once one has been answered.`
      )
      // Another brand's call is the first of a line of its own.
      const other = yield* call(otherBrandId)
      yield* othersRun
      expect(heldOf(otherBrandId)).toHaveLength(1)
      // Each answer hands the turn to the next in line, in the order they came.
      for (let answered = 0; answered < line.length; answered++) {
        expect(heldOf(lineBrand)).toHaveLength(answered + 1)
        yield* Deferred.succeed(heldOf(lineBrand)[answered]!.answer, undefined)
        expect((yield* Fiber.join(line[answered]!)).campaignId).toBe(campaignId)
        yield* othersRun
        // The first answered, its place in line is free again: one call takes it, the next is refused.
        if (answered === 0) {
          line.push(yield* call(lineBrand))
          expect(yield* refusedAtOnce(lineBrand)).toBeInstanceOf(ConcurrencyLimited)
        }
      }
      yield* Deferred.succeed(heldOf(otherBrandId)[0]!.answer, undefined)
      yield* Fiber.join(other)
    }))

  it.effect(`refuses a call that has waited its turn ${analyticsLine.longestWaitSeconds} s, and the line goes on without it`, () =>
    Effect.gen(function*() {
      heldCounts.length = 0
      const first = yield* call(brandId)
      yield* othersRun
      const waiting = yield* call(brandId)
      yield* othersRun
      yield* TestClock.adjust(Duration.seconds(analyticsLine.longestWaitSeconds - 1))
      yield* othersRun
      expect(waiting.unsafePoll()).toBeNull()
      const later = yield* call(brandId)
      yield* TestClock.adjust(Duration.seconds(1))
      yield* othersRun
      expect(waiting.unsafePoll(), "refused").not.toBeNull()
      const refused = yield* Effect.flip(Fiber.join(waiting))
      expect(refused).toBeInstanceOf(ConcurrencyLimited)
      expect(refused.message).toBe(
        `This call waited ${analyticsLine.longestWaitSeconds} seconds for the brand's earlier analytics calls to be answered; retry once they have been.`
      )
      // It never read; the call behind it, a second short of its own bound, reads next.
      expect(heldCounts).toHaveLength(1)
      yield* Deferred.succeed(heldCounts[0]!.answer, undefined)
      yield* Fiber.join(first)
      yield* othersRun
      expect(heldCounts).toHaveLength(2)
      yield* Deferred.succeed(heldCounts[1]!.answer, undefined)
      expect((yield* Fiber.join(later)).campaignId).toBe(campaignId)
    }))

  it.effect("lets go of a call whose caller went: a waiting call's place is free at once, a read stops and hands the turn on", () =>
    Effect.gen(function*() {
      heldCounts.length = 0
      const reading = yield* call(brandId)
      yield* othersRun
      const waiting = yield* Effect.forEach(Array.from({ length: analyticsLine.waiting }), () => call(brandId))
      yield* othersRun
      expect(yield* refusedAtOnce(brandId)).toBeInstanceOf(ConcurrencyLimited)
      // A waiting call's caller goes: a new call takes its place rather than being refused.
      yield* Fiber.interrupt(waiting[0]!)
      const late = yield* call(brandId)
      yield* othersRun
      expect(late.unsafePoll()).toBeNull()
      // The reading call's caller goes: its read stops, and the next in line reads at once.
      yield* Fiber.interrupt(reading)
      yield* othersRun
      expect(heldCounts.map(({ stopped }) => stopped)).toEqual([true, false])
      for (const next of [...waiting.slice(1), late]) {
        yield* Deferred.succeed(heldCounts.at(-1)!.answer, undefined)
        expect((yield* Fiber.join(next)).campaignId).toBe(campaignId)
        yield* othersRun
      }
      expect(heldCounts).toHaveLength(1 + analyticsLine.waiting)
    }))
})

describe("the headers an answer carries", () => {
  /** What the fiber's pre-response handlers make of a plain answer, as either server applies them. */
  const headersOfAnswer = Effect.flatMap(FiberRef.get(HttpApp.currentPreResponseHandlers), (handler) =>
    Effect.map(
      Option.isNone(handler)
        ? Effect.succeed(HttpServerResponse.text("ok"))
        : handler.value(HttpServerRequest.fromWeb(new Request("http://localhost/")), HttpServerResponse.text("ok")),
      (response) => ({ status: response.status, headers: { ...response.headers } })
    ))
  const plain = { "content-type": "text/plain", "content-length": "2" }
  const keyHeaders = {
    "ratelimit": `"default";r=1;t=0`,
    "ratelimit-policy": `"default";q=2;w=60`,
    "api-key-expires": "x"
  }

  it.effect("takes back the headers named, and only those, from what an earlier step added", () =>
    Effect.gen(function*() {
      yield* addResponseHeaders(keyHeaders)
      yield* removeResponseHeaders(["ratelimit", "ratelimit-policy"])
      expect(yield* headersOfAnswer).toEqual({ status: 200, headers: { ...plain, "api-key-expires": "x" } })
    }))

  it.effect("takes them back behind a handler that does more than set headers, which still runs", () =>
    Effect.gen(function*() {
      yield* HttpApp.appendPreResponseHandler((_, response) =>
        Effect.succeed(HttpServerResponse.setStatus(HttpServerResponse.setHeader(response, "x-other", "1"), 201))
      )
      yield* addResponseHeaders(keyHeaders)
      yield* removeResponseHeaders(["ratelimit", "ratelimit-policy"])
      expect(yield* headersOfAnswer).toEqual({
        status: 201,
        headers: { ...plain, "x-other": "1", "api-key-expires": "x" }
      })
    }))
})

const recordedInserts: Array<{
  readonly activation: Activation
  readonly owner: { readonly brandId: string; readonly keyId: string }
}> = []
const activationId = "3f2a9c1e-7b4d-4e8a-9c6f-1d2e3f4a5b6c"

const ActivationsWithDoubles = Activations.Live.pipe(
  Layer.provide(
    makeTestLayer(ActivationsRepo)({
      insert: (activation, owner) => Effect.sync(() => void recordedInserts.push({ activation, owner }))
    })
  ),
  Layer.provide(makeTestLayer(Ids)({ uuid: Effect.succeed(activationId) }))
)

layer(ActivationsWithDoubles)("Activations", (it) => {
  const creatorId = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
  const campaignId = "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
  const by: ApiKeyIdentity = { keyId: "k3y1d0000000000a" as KeyId, brandId, scopes: ["campaigns:write"] }
  const clockAt = "2026-05-04T09:30:15.250Z"

  it.effect("creates an ACTIVE record stamped with the clock and stores it for the key's brand", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.parse(clockAt))
      const activations = yield* Activations
      const activation = yield* activations.activate({
        creatorId,
        campaignId,
        request: { socialUsername: "@jane.doe", plannedPostAt: "2026-06-01" },
        by
      })
      expect(activation).toEqual({
        id: activationId,
        campaignId,
        creatorId,
        status: "ACTIVE",
        socialUsername: "@jane.doe",
        plannedPostAt: "2026-06-01",
        activatedAt: clockAt
      })
      expect(recordedInserts.splice(0)).toEqual([{ activation, owner: { brandId, keyId: by.keyId } }])
    }))

  it.effect("keeps plannedPostAt null when it was omitted", () =>
    Effect.gen(function*() {
      const activations = yield* Activations
      const activation = yield* activations.activate({
        creatorId,
        campaignId,
        request: { socialUsername: "@jane", plannedPostAt: null },
        by
      })
      expect(activation.plannedPostAt).toBeNull()
      expect(recordedInserts.splice(0).map((insert) => insert.activation.plannedPostAt)).toEqual([null])
    }))
})

describe("idempotency fingerprint", () => {
  const request: IdempotentRequest = {
    brandId,
    key: "order-1",
    method: "POST",
    path: "/v1/creators/a/campaigns/b/activate",
    body: { socialUsername: "@jane", plannedPostAt: "2026-06-01", extra: { b: [1, { y: 2, x: 1 }], a: null } }
  }

  it("canonical JSON sorts keys at every depth and keeps array order", () => {
    expect(canonicalJson({ b: 1, a: { d: [3, { z: 1, y: 2 }], c: null } })).toBe(
      "{\"a\":{\"c\":null,\"d\":[3,{\"y\":2,\"z\":1}]},\"b\":1}"
    )
  })

  it("key order and whitespace do not change the fingerprint", () => {
    const reordered = JSON.parse(`{
      "extra" : { "a": null, "b": [ 1, { "x": 1, "y": 2 } ] },
      "plannedPostAt": "2026-06-01",
      "socialUsername": "@jane"
    }`)
    expect(fingerprintOf({ ...request, body: reordered })).toBe(fingerprintOf(request))
  })

  it("the method, the path or any value changes the fingerprint", () => {
    const original = fingerprintOf(request)
    const variants: ReadonlyArray<IdempotentRequest> = [
      { ...request, method: "PUT" },
      { ...request, path: "/v1/creators/a/campaigns/c/activate" },
      { ...request, body: { ...(request.body as object), socialUsername: "@john" } },
      { ...request, body: { ...(request.body as object), extra: { b: [{ y: 2, x: 1 }, 1], a: null } } },
      { ...request, body: { ...(request.body as object), extra: { b: [1, { y: 2, x: 1 }], a: 0 } } }
    ]
    for (const variant of variants) {
      expect(fingerprintOf(variant)).not.toBe(original)
    }
  })
})

describe("the Idempotency-Key header", () => {
  const decode = Schema.decodeUnknownEither(IdempotencyKeyHeader)
  const valid = (header: string) => Either.getOrUndefined(decode(header))
  const invalid = (header: string) => Either.isLeft(decode(header))

  it("is decoded as its schema decodes it, for any header, plain keys without the schema (property)", () => {
    const visible = fc.integer({ min: 0x21, max: 0x7e }).map((code) => String.fromCharCode(code))
    const character = fc.oneof(visible, fc.constantFrom("\"", "\\", " ", "\t", "\u0000", "\u007f", "ä", "🔑"))
    const header = fc.oneof(
      fc.string({ unit: character, maxLength: 300 }),
      // Plain keys about the longest allowed, and on either side of it.
      fc.string({ unit: visible, minLength: 250, maxLength: 260 }),
      fc.string({ unit: character, minLength: 250, maxLength: 260 }),
      fc.string({ unit: character, maxLength: 20 }).map((inner) => `"${inner}"`),
      fc.string()
    )
    const answer = (decoded: Either.Either<string, ParseResult.ParseError>) =>
      Either.match(decoded, {
        onLeft: (error) => ({ refused: ParseResult.ArrayFormatter.formatErrorSync(error)[0]!.message }),
        onRight: (key) => ({ key })
      })
    fc.assert(
      fc.property(header, (header) => {
        expect(answer(decodeIdempotencyKeyHeader(header))).toEqual(answer(decode(header)))
      }),
      { numRuns: 5_000 }
    )
  })

  it("a missing, empty or empty-quoted header is missing", () => {
    for (const header of [null, "", "   ", "\"\""]) {
      expect(isMissingIdempotencyKey(header)).toBe(true)
    }
    expect(isMissingIdempotencyKey("a")).toBe(false)
  })

  it("accepts up to 255 visible ASCII characters", () => {
    const longest = "!~".repeat(127) + "x"
    expect(valid(longest)).toBe(longest)
    expect(invalid(`${longest}y`)).toBe(true)
  })

  it("refuses spaces, control characters and non-ASCII", () => {
    for (
      const header of [
        "order 1",
        "order\t1",
        "order\u00001",
        "order\u007f",
        "bestellung-ä",
        "🔑",
        "abc\u00a0",
        "\ufeffabc"
      ]
    ) {
      expect(invalid(header)).toBe(true)
    }
  })

  it("unquotes an RFC 9651 string, escapes included", () => {
    expect(valid("\"abc\"")).toBe("abc")
    expect(valid("\"a\\\"b\"")).toBe("a\"b")
    expect(valid("\"a\\\\b\"")).toBe("a\\b")
  })

  it("refuses a malformed quoted string", () => {
    for (const header of ["\"abc", "\"a\"b\"", "\"a\\b\""]) {
      expect(invalid(header)).toBe(true)
    }
  })
})

describe("metrics", () => {
  it("are asked of a layer, never assumed off: a service that counts, built without Metrics, is a type error", () => {
    // @ts-expect-error DatabaseOutage counts every failure (db_unavailable_total): it needs Metrics
    const alone: Layer.Layer<DatabaseOutage> = DatabaseOutage.Live
    const off: Layer.Layer<DatabaseOutage> = DatabaseOutage.Live.pipe(Layer.provide(MetricsOff))
    expect(Layer.isLayer(alone) && Layer.isLayer(off)).toBe(true)
  })
})

describe("the database outage's log", () => {
  const { layer: captured, lines } = captureLogs(({ annotations, cause, message }) => ({
    message: (message as ReadonlyArray<unknown>)[0],
    cause: !Cause.isEmpty(cause),
    more: annotationOf(annotations, "moreSinceLastLine")
  }))
  const down = Cause.die(databaseError("SQLITE_BUSY", "the database is locked"))

  it.effect("one line with the cause per 10 s, the rest counted: the last count once it has been quiet for 10 s or at shutdown, and a new outage's cause at once", () =>
    Effect.gen(function*() {
      const scope = yield* EffectScope.make()
      const outage = Context.get(
        yield* Layer.buildWithScope(DatabaseOutage.Live.pipe(Layer.provide(MetricsOff)), scope),
        DatabaseOutage
      )
      const failTimes = (n: number) => Effect.repeatN(outage.failed(down), n - 1)
      yield* failTimes(5)
      expect(lines).toEqual([{ message: "database unavailable", cause: true, more: 0 }])
      // Still failing 5 s in, and 5 s after that: nothing more yet.
      yield* TestClock.adjust(Duration.seconds(5))
      yield* failTimes(2)
      yield* TestClock.adjust(Duration.seconds(5))
      expect(lines).toHaveLength(1)
      // 10 s without a failure: the six counted since the first line.
      yield* TestClock.adjust(Duration.seconds(10))
      expect(lines.slice(1)).toEqual([{ message: "database unavailable", cause: false, more: 6 }])
      // A later outage's first failure has its cause, at once.
      yield* TestClock.adjust(Duration.seconds(1))
      yield* failTimes(3)
      expect(lines.slice(2)).toEqual([{ message: "database unavailable", cause: true, more: 0 }])
      // Stopping, whatever is counted is written.
      yield* EffectScope.close(scope, Exit.void)
      expect(lines.slice(3)).toEqual([{ message: "database unavailable", cause: false, more: 2 }])
    }).pipe(Effect.provide(captured)))
})

describe("readiness", () => {
  const { layer: captured, lines } = captureLogs(({ message }) => (message as ReadonlyArray<unknown>)[0])
  let pings = 0
  let answers = true
  const doubles = Layer.mergeAll(
    makeTestLayer(HealthRepo)({
      database: "sqlite",
      ping: Effect.suspend(() => {
        pings++
        return answers ? Effect.void : Effect.fail(databaseError("SQLITE_CANTOPEN", "the database file is gone"))
      })
    }),
    makeTestLayer(RateLimit)({ status: () => "memory" }),
    Draining.Live,
    Warming.Live,
    DatabaseOutage.Live.pipe(Layer.provide(MetricsOff))
  )
  const probe = (handlers: Effect.Effect.Success<typeof HealthHandlers>) =>
    Effect.map(
      Effect.either(handlers.ready({ request: HttpServerRequest.fromWeb(new Request("http://127.0.0.1/readyz")) })),
      Either.match({
        onLeft: (error) => 503 + (error._tag === "ServiceUnavailable" ? 0 : 1000),
        onRight: () => 200
      })
    )

  it.scoped("asks the database at most once a second whatever the probe rate, and logs a failing probe as the outage's other failures", () =>
    Effect.gen(function*() {
      const handlers = yield* HealthHandlers
      // A probe every 10 ms for 3 s: the database is asked once a second.
      const statuses: Array<number> = []
      for (let i = 0; i < 300; i++) {
        statuses.push(yield* probe(handlers))
        yield* TestClock.adjust(Duration.millis(10))
      }
      expect(new Set(statuses)).toEqual(new Set([200]))
      expect(pings).toBe(3)
      // The database gone for 30 s, probed every 100 ms: still once a second, and the log has the
      // outage's first line and one per 10 s, never a line per probe.
      answers = false
      const down: Array<number> = []
      for (let i = 0; i < 300; i++) {
        down.push(yield* probe(handlers))
        yield* TestClock.adjust(Duration.millis(100))
      }
      expect(new Set(down)).toEqual(new Set([503]))
      expect(pings).toBe(33)
      expect(lines.length).toBeGreaterThan(0)
      expect(lines.length).toBeLessThanOrEqual(4)
      expect(new Set(lines)).toEqual(new Set(["database unavailable"]))
    }).pipe(Effect.provide(doubles), Effect.provide(captured)))

  it.scoped("is 503 while the server warms up, whatever the database says, and 200 once it has", () =>
    Effect.gen(function*() {
      const handlers = yield* HealthHandlers
      const warming = yield* Warming
      answers = true
      warming.begin()
      expect(yield* probe(handlers)).toBe(503)
      const answer = yield* Effect.flip(handlers.ready({
        request: HttpServerRequest.fromWeb(new Request("http://127.0.0.1/readyz"))
      }))
      expect(answer.message).toBe("The server is starting; it is ready in a moment.")
      warming.end()
      expect(yield* probe(handlers)).toBe(200)
    }).pipe(Effect.provide(doubles), Effect.provide(captured)))
})

describe("the access line", () => {
  const fiberId = FiberId.runtime(42, 0)
  const now = Date.UTC(2026, 10, 23, 1, 2, 3, 456)
  const fields = {
    clientAddress: "203.0.113.7",
    clientRequestId: "caller's \"own\" id",
    method: "POST",
    route: "/v1/whoami",
    status: 401,
    durationMs: 0.125,
    keyId: "k\"ey\\1",
    brandId: null,
    reason: "unknown key" as const
  }
  const generic = (
    annotations: HashMap.HashMap<string, unknown>,
    spans: List.List<LogSpan.LogSpan>,
    id: FiberId.FiberId
  ) =>
    jsonLine({
      annotations,
      cause: Cause.empty,
      date: new Date(now),
      fiberId: id,
      logLevel: LogLevel.Info,
      message: ["request", fields],
      spans
    })

  it("is spelled exactly as the generic JSON line: quotes, numbers, nulls, objects, log spans, a field over an annotation, any fiber id", () => {
    const cases: ReadonlyArray<readonly [HashMap.HashMap<string, unknown>, List.List<LogSpan.LogSpan>]> = [
      [HashMap.make(["requestId", "req-1"]), List.nil()],
      [
        HashMap.make(["requestId", "req-1"], ["odd \"key\"", Number.NaN], ["flag", true], ["user", { id: 1 }]),
        List.nil()
      ],
      [HashMap.make(["status", "overridden by the field"]), List.nil()],
      // What JSON leaves out of an object, and a value it cannot write at all.
      [HashMap.make(["requestId", "req-1"], ["gone", undefined], ["call", () => 1]), List.nil()],
      [
        HashMap.make(["requestId", "req-1"], [
          "self",
          (() => {
            const cyclic: Record<string, unknown> = { name: "cyclic" }
            cyclic["self"] = cyclic
            return cyclic
          })()
        ]),
        List.nil()
      ],
      [HashMap.empty(), List.make(LogSpan.make("load", now - 5))]
    ]
    for (const [annotations, spans] of cases) {
      const line = accessLine(annotations, fields, spans, fiberId, now)
      expect(line).toBe(generic(annotations, spans, fiberId))
      expect(JSON.parse(line).annotations).toEqual(expect.objectContaining(fields))
    }
    expect(
      JSON.parse(accessLine(HashMap.empty(), fields, List.make(LogSpan.make("load", now - 5)), fiberId, now)).spans
    )
      .toEqual({ load: 5 })
    const noFiber = accessLine(HashMap.empty(), fields, List.nil(), FiberId.none, now)
    expect(noFiber).toBe(generic(HashMap.empty(), List.nil(), FiberId.none))
    expect(JSON.parse(noFiber).fiberId).toBe("")
  })

  it("is spelled as the generic JSON line for any text, number, annotation and fiber (property)", () => {
    const text = fc.oneof(fc.string(), fc.string({ unit: "binary" }), fc.constantFrom("", "\u2028", "\ud800", "\u007f"))
    const nullable = fc.option(text, { nil: null })
    const duration = fc.oneof(
      fc.integer({ min: 0, max: 2_000_000_000_000 }).map((micros) => Math.round(micros) / 1000),
      fc.double({ noNaN: false }),
      fc.constantFrom(0, 0.001, 0.1, 0.999, 1, 10, 999_999_999.999, 1e9, 1e21, -0.5)
    )
    const annotation = fc.tuple(
      fc.oneof(fc.string(), fc.constantFrom("requestId", "0", "9lives", "__proto__", "status", "toString")),
      fc.oneof(text, fc.integer(), fc.double(), fc.boolean(), fc.constant(null), fc.dictionary(fc.string(), text))
    )
    fc.assert(
      fc.property(
        fc.record({
          clientAddress: text,
          clientRequestId: nullable,
          method: text,
          route: text,
          status: fc.oneof(fc.integer({ min: 100, max: 599 }), duration),
          durationMs: duration,
          keyId: nullable,
          brandId: nullable,
          reason: fc.option(fc.constantFrom("unknown key" as const, "revoked" as const), { nil: null })
        }),
        fc.array(annotation, { maxLength: 4 }),
        fc.oneof(fc.nat().map((id) => FiberId.runtime(id, 0)), fc.constant(FiberId.none)),
        fc.integer({ min: 0, max: 4_102_444_800_000 }),
        (drawn, pairs, id, at) => {
          const annotations = HashMap.fromIterable(pairs)
          const line = accessLine(annotations, drawn, List.nil(), id, at)
          const expected = jsonLine({
            annotations,
            cause: Cause.empty,
            date: new Date(at),
            fiberId: id,
            logLevel: LogLevel.Info,
            message: ["request", drawn],
            spans: List.nil()
          })
          expect(line).toBe(expected)
        }
      ),
      { numRuns: 2_000 }
    )
  })

  it("is the line users read: every key in place, quotes escaped, and every one of many annotations", () => {
    expect(accessLine(HashMap.make(["requestId", "req-1"]), fields, List.nil(), fiberId, now)).toBe(
      String
        .raw`{"message":"request","logLevel":"INFO","timestamp":"2026-11-23T01:02:03.456Z","annotations":{"requestId":"req-1","clientAddress":"203.0.113.7","clientRequestId":"caller's \"own\" id","method":"POST","route":"/v1/whoami","status":401,"durationMs":0.125,"keyId":"k\"ey\\1","brandId":null,"reason":"unknown key"},"spans":{},"fiberId":"#42"}`
    )
    const many = HashMap.fromIterable(Array.from({ length: 40 }, (_, i) => [`annotation${i}`, i] as const))
    const line = accessLine(many, fields, List.nil(), fiberId, now)
    expect(line).toBe(generic(many, List.nil(), fiberId))
    expect(JSON.parse(line).annotations).toEqual({
      ...Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`annotation${i}`, i])),
      ...fields
    })
  })
})

describe("stderr's lines on a pipe nobody reads (Logging/Stderr.ts)", () => {
  /** A pipe (a FIFO) with its reading end open and not read: full after 64 KiB. */
  const fullPipe = () => {
    const dir = mkdtempSync(join(tmpdir(), "campaign-api-pipe-"))
    const path = join(dir, "stderr")
    execFileSync("mkfifo", [path])
    const reader = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK)
    const writer = openSync(path, constants.O_WRONLY)
    const readAll = async (): Promise<string> => {
      const chunks: Array<Buffer> = []
      const buffer = Buffer.alloc(65536)
      for (let idle = 0; idle < 50;) {
        let read = 0
        try {
          read = readSync(reader, buffer, 0, buffer.length, null)
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code !== "EAGAIN") throw error
        }
        if (read > 0) {
          chunks.push(Buffer.from(buffer.subarray(0, read)))
          idle = 0
        } else {
          idle++
          await new Promise((resolve) => setTimeout(resolve, 10))
        }
      }
      return Buffer.concat(chunks).toString()
    }
    return { writer, readAll, close: () => [reader, writer].forEach((fd) => closeSync(fd)) }
  }

  it("never waits for the pipe: what it does not take waits in order, and past the bound new lines are dropped and counted", async () => {
    const pipe = fullPipe()
    let counted = 0
    const lines = makeLineWriter(pipe.writer, (n) => counted += n, 256 * 1024)
    // 2 MiB of lines in ten turns of the event loop, into a pipe that takes 64 KiB: a write that
    // waited for the pipe would wait here for ever, since it is read only after.
    const line = (n: number) => `{"line":${n},"padding":"${"x".repeat(200)}"}`
    let n = 0
    for (let turn = 0; turn < 10; turn++) {
      for (let i = 0; i < 1_000; i++) lines.write(line(n++))
      await new Promise((resolve) => setImmediate(resolve))
    }
    expect(lines.dropped()).toBeGreaterThan(0)
    expect(counted).toBe(lines.dropped())
    const received = (await pipe.readAll()).split("\n")
    pipe.close()
    expect(received.pop()).toBe("")
    // Whole lines, in the order written, each once: those the bound let through, then none.
    const numbers = received.map((text) => (JSON.parse(text) as { line: number }).line)
    expect(numbers.length + lines.dropped()).toBe(n)
    expect(numbers).toEqual([...numbers].sort((a, b) => a - b))
    expect(new Set(numbers).size).toBe(numbers.length)
    expect(numbers.slice(0, 1_000)).toEqual(Array.from({ length: 1_000 }, (_, i) => i))
  })

  it("loses nothing at exit: a process that exits with lines waiting writes them while the pipe is read", async () => {
    const pipe = fullPipe()
    const writer = join(import.meta.dirname, "../src/Logging/Stderr.ts")
    const child = Bun.spawn([
      process.execPath,
      "-e",
      `const { makeLineWriter } = await import(${JSON.stringify(writer)})
       const lines = makeLineWriter(2)
       for (let i = 0; i < 1000; i++) lines.write(JSON.stringify({ line: i, padding: "z".repeat(200) }))
       await new Promise((resolve) => setImmediate(resolve))
       process.exit(0)`
    ], { stdin: "ignore", stdout: "ignore", stderr: pipe.writer })
    // Read only once the child has written what the pipe takes and is waiting at its exit.
    await new Promise((resolve) => setTimeout(resolve, 300))
    const received = (await pipe.readAll()).split("\n").filter((text) => text !== "")
    expect(await child.exited).toBe(0)
    pipe.close()
    expect(received.map((text) => (JSON.parse(text) as { line: number }).line)).toEqual(
      Array.from({ length: 1_000 }, (_, i) => i)
    )
  })

  it("drops nothing while what waits stays under the bound: the pipe read later gets every line", async () => {
    const pipe = fullPipe()
    const lines = makeLineWriter(pipe.writer)
    for (let i = 0; i < 2_000; i++) lines.write(`{"line":${i},"padding":"${"y".repeat(100)}"}`)
    await new Promise((resolve) => setImmediate(resolve))
    const received = (await pipe.readAll()).split("\n").filter((text) => text !== "")
    pipe.close()
    expect(lines.dropped()).toBe(0)
    expect(received.map((text) => (JSON.parse(text) as { line: number }).line)).toEqual(
      Array.from({ length: 2_000 }, (_, i) => i)
    )
  })
})

describe("the reads' JSON, written without the schemas' encoders", () => {
  it("is byte for byte what the encoders of the record and of a page write, for any record (property)", () => {
    const record = Arbitrary.make(Activation)
    fc.assert(
      fc.property(fc.array(record, { maxLength: 5 }), fc.boolean(), (activations, hasMore) => {
        for (const activation of activations) {
          expect(recordJson(activation)).toBe(
            JSON.stringify(Schema.encodeSync(ActivateResponse)({ ok: true, activation }))
          )
        }
        expect(pageJson(activations, hasMore)).toBe(
          JSON.stringify(Schema.encodeSync(ActivationList)({ ok: true, activations, hasMore }))
        )
      }),
      { numRuns: 200 }
    )
  })
})

describe("the renderer's validation message", () => {
  /** An array nested `depth` deep, made without recursion. */
  const nestedArray = (depth: number): unknown => {
    let value: unknown = []
    for (let i = 1; i < depth; i++) value = [value]
    return value
  }
  const Payload = Schema.Struct({ socialUsername: Schema.String })

  it.effect("names the field of a value nested deeper than a stack can describe, as a 400, never a 500", () =>
    Effect.gen(function*() {
      const { renderFailure } = makeRenderer(() => Effect.void)
      // Deep enough to overflow any stack that describes it recursively (Effect's formatter does).
      for (
        const [value, message] of [
          [nestedArray(500_000), "The request body must be a JSON object."],
          [{ socialUsername: nestedArray(500_000) }, "socialUsername"]
        ] as const
      ) {
        const error = yield* Effect.flip(Schema.decodeUnknown(Payload)(value))
        const reply = yield* renderFailure(Cause.fail(error))
        expect(reply.status).toBe(400)
        const body = JSON.parse(String(reply.body))
        expect(body.code).toBe("VALIDATION_ERROR")
        expect(body.message).toContain(message)
      }
    }))
})

describe("who sent a request (TRUSTED_PROXIES)", () => {
  const request = (headers: Record<string, string>) => new Request("http://127.0.0.1/v1/whoami", { headers })
  const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/
  const proxies = [
    { address: "10.0.0.0", prefix: 8, family: "ipv4" },
    { address: "fd00::", prefix: 8, family: "ipv6" }
  ] as const
  const callers = makeCallers(proxies, "x-forwarded-for")

  it("trusts no one by default: the peer is the client, the request id the server's, the caller's own id bounded and printable", () => {
    const none = makeCallers([], "x-forwarded-for")
    const caller = none(
      request({ "x-forwarded-for": "203.0.113.9", "x-request-id": `a\u0007b${"c".repeat(300)}` }),
      "10.1.2.3"
    )
    expect(caller.clientAddress).toBe("10.1.2.3")
    expect(caller.requestId).toMatch(uuid)
    expect(caller.clientRequestId).toBe(`a?b${"c".repeat(125)}`)
    expect(none(request({}), "10.1.2.3").clientRequestId).toBeNull()
  })

  it.each([
    [
      "the last hop a trusted proxy did not write",
      { "x-forwarded-for": "6.6.6.6, 203.0.113.9, 10.9.9.9" },
      "10.1.2.3",
      "203.0.113.9"
    ],
    ["IPv6 and an IPv4-mapped peer", { "x-forwarded-for": "2001:db8::1" }, "::ffff:10.1.2.3", "2001:db8::1"],
    [
      "the proxy itself when it writes X-Forwarded-For and the client sent Forwarded",
      { forwarded: "for=198.51.100.1;proto=https, for=\"[2001:db8::7]:4711\"" },
      "fd12::1",
      "fd12::1"
    ],
    ["an address with a port", { "x-forwarded-for": "203.0.113.9:51234" }, "10.1.2.3", "203.0.113.9"],
    [
      "the proxy itself when what it names cannot be read",
      { "x-forwarded-for": "203.0.113.9, unknown" },
      "10.1.2.3",
      "10.1.2.3"
    ],
    ["the proxy itself when it names no one", {}, "10.1.2.3", "10.1.2.3"],
    ["the proxy itself when the address has a zone id", { "x-forwarded-for": "fe80::1%eth0" }, "10.1.2.3", "10.1.2.3"],
    [
      "the proxy itself when the address is longer than an address is",
      { "x-forwarded-for": `fe80::1%${"Z".repeat(12_000)}` },
      "10.1.2.3",
      "10.1.2.3"
    ],
    [
      "the peer when it is not a trusted proxy, whatever it says",
      { "x-forwarded-for": "203.0.113.9" },
      "192.0.2.1",
      "192.0.2.1"
    ]
  ])("names as the client %s", (_, headers, peer, client) => {
    expect(callers(request(headers), peer).clientAddress).toBe(client)
  })

  it("reads Forwarded alone when the trusted proxies write it: an X-Forwarded-For is the client's own", () => {
    const behindForwarded = makeCallers(proxies, "forwarded")
    const headers = {
      "x-forwarded-for": "6.6.6.6",
      forwarded: "for=198.51.100.1;proto=https, for=\"[2001:db8::7]:4711\""
    }
    expect(behindForwarded(request(headers), "fd12::1").clientAddress).toBe("2001:db8::7")
    expect(behindForwarded(request({ "x-forwarded-for": "6.6.6.6" }), "10.1.2.3").clientAddress).toBe("10.1.2.3")
  })

  it("takes a trusted proxy's sane X-Request-Id as the request's, and nobody else's", () => {
    expect(callers(request({ "x-request-id": "nginx-42" }), "10.1.2.3")).toMatchObject({
      requestId: "nginx-42",
      clientRequestId: null
    })
    expect(callers(request({ "x-request-id": "not sane" }), "10.1.2.3").requestId).toMatch(uuid)
    expect(callers(request({ "x-request-id": "nginx-42" }), "192.0.2.1")).toMatchObject({
      requestId: expect.stringMatching(uuid),
      clientRequestId: "nginx-42"
    })
  })
})
