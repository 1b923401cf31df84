import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Layer, ManagedRuntime, Option } from "effect"
import { ApiKeys } from "../src/ApiKeys.ts"
import { KeysLive } from "../src/Cli/KeyStore.ts"
import type { BrandId } from "../src/Domain/ApiKey.ts"
import { postgres, sharedSkipped, withPostgres } from "./support/backends.ts"
import { activate, type Answer, call, uniqueKey, whoami } from "./support/client.ts"
import { expectEnvelope } from "./support/contract.ts"
import { eventually, runLoops, shuffle } from "./support/load.ts"
import { faultyLink } from "./support/proxy.ts"
import { createKey, type Environment, revokeKey, runCli, type RunningServer, startServer } from "./support/server.ts"
import { logLines } from "./support/telemetry.ts"

/**
 * Several instances of the service on one PostgreSQL and one Redis, as docs/operators.md's "Running
 * several instances" describes; and the faults of those two, through a link the test can cut.
 */
const skip = sharedSkipped !== undefined

const startPair = async (database: string, env: Environment = {}) => {
  const both = { ...postgres.env, ...env }
  return [await startServer(database, both), await startServer(database, both)] as const
}

const ok = (answer: Answer) => answer.status === 200

/** Trials of a key made then used at once (docs/operators.md, Running several instances). */
const trials = 200

/**
 * The key store on `database` as another process (the key command line) has it: a pool of its
 * own, whose commits the instances hear of only through PostgreSQL.
 */
const keyStore = (database: string) => {
  const runtime = ManagedRuntime.make(
    KeysLive.pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["DATABASE_URL", database]])))))
  )
  return {
    create: () =>
      runtime.runPromise(Effect.flatMap(ApiKeys, (keys) =>
        keys.create({
          brandId: crypto.randomUUID() as BrandId,
          scopes: ["campaigns:read"],
          name: Option.none(),
          expiresIn: Option.none()
        }))).then(({ apiKey, info }) => ({ apiKey, keyId: info.keyId })),
    revoke: (keyId: string) => runtime.runPromise(Effect.flatMap(ApiKeys, (keys) => keys.revoke(keyId))),
    dispose: () => runtime.dispose()
  }
}

describe.skipIf(skip)("two instances on one PostgreSQL + Redis", () => {
  let database: string
  let a: RunningServer
  let b: RunningServer
  const refusedByBoth = async (apiKey: string) =>
    (await whoami(a.url, apiKey)).status === 401 && (await whoami(b.url, apiKey)).status === 401

  beforeAll(async () => {
    database = await postgres.database()
    ;[a, b] = await startPair(database, { RATE_LIMIT_MAX: "1000000" })
  })
  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop()])
  })

  it("makes one record from duplicates fired at both: each gets the original's bytes, another body 409", async () => {
    const key = await createKey(database)
    const idempotencyKey = uniqueKey()
    const requests = shuffle(Array.from({ length: 60 }, (_, i) => ({
      server: i % 2 === 0 ? a : b,
      // Every third request has another body; both bodies go to both instances.
      body: { socialUsername: i % 3 === 2 ? "@someone-else" : "@the-same" }
    })))
    const answers = await Promise.all(requests.map(async (request) => ({
      ...request,
      answer: await activate(request.server.url, { apiKey: key.apiKey, key: idempotencyKey, body: request.body })
    })))

    expect(await postgres.count(database, "SELECT 1 FROM activations WHERE brand_id = ?", key.brandId)).toBe(1)
    expect(await postgres.count(database, "SELECT 1 FROM idempotency_keys WHERE brand_id = ?", key.brandId)).toBe(1)
    const originals = answers.filter(({ answer }) => ok(answer) && answer.headers.get("idempotent-replayed") === null)
    expect(originals).toHaveLength(1)
    const winner = originals[0]!
    for (const { answer, body } of answers) {
      if (body.socialUsername === winner.body.socialUsername) expect(answer.text).toBe(winner.answer.text)
      else expectEnvelope(answer, 409, "IDEMPOTENCY_CONFLICT")
    }
    // Both instances answered with the original's bytes, whichever body came first.
    expect(new Set(answers.filter(({ answer }) => ok(answer)).map(({ server }) => server.url)).size).toBe(2)
  })

  it("takes a key created through the command line on both at their first request, and refuses it on both once revoked", async () => {
    const created = await runCli(
      ["keys", "create", "--brand", crypto.randomUUID(), "--scopes", "campaigns:read", "--json"],
      { DATABASE_URL: database }
    )
    expect(created.code).toBe(0)
    const { apiKey, keyId } = JSON.parse(created.stdout) as { apiKey: string; keyId: string }
    // At once, no wait and no retry (docs/operators.md, Running several instances).
    expect([(await whoami(b.url, apiKey)).status, (await whoami(a.url, apiKey)).status]).toEqual([200, 200])

    const revoked = await runCli(["keys", "revoke", keyId], { DATABASE_URL: database })
    expect(revoked.code).toBe(0)
    await eventually("both to refuse the revoked key", async () => await refusedByBoth(apiKey))
    expectEnvelope(await whoami(a.url, apiKey), 401, "UNAUTHORIZED")
    expectEnvelope(await whoami(b.url, apiKey), 401, "UNAUTHORIZED")
  })

  it(`takes each of ${trials} keys made by another process at its first request on either instance, and refuses each once revoked`, async () => {
    const store = keyStore(database)
    try {
      const firstAnswers: Array<number> = []
      for (let trial = 0; trial < trials; trial++) {
        const [first, second] = trial % 2 === 0 ? [a, b] : [b, a]
        const key = await store.create()
        firstAnswers.push((await whoami(first.url, key.apiKey)).status, (await whoami(second.url, key.apiKey)).status)
        expect(await store.revoke(key.keyId)).toBe(true)
        await eventually(`both to refuse key ${trial + 1}'s revocation`, async () => await refusedByBoth(key.apiKey), {
          intervalMs: 5
        })
      }
      expect(firstAnswers.filter((status) => status !== 200)).toEqual([])
      expect(firstAnswers).toHaveLength(2 * trials)
    } finally {
      await store.dispose()
    }
  })

  it("a key rolled through the command line: both take the new secret at its first request, and refuse the old ones once a roll with --grace 0 is heard", async () => {
    const key = await createKey(database, { scopes: ["campaigns:read"] })
    expect([(await whoami(a.url, key.apiKey)).status, (await whoami(b.url, key.apiKey)).status]).toEqual([200, 200])
    const roll = async (grace: string) => {
      const rolled = await runCli(["keys", "roll", key.keyId, "--grace", grace, "--json"], { DATABASE_URL: database })
      expect(rolled.code, rolled.stderr).toBe(0)
      return JSON.parse(rolled.stdout) as { apiKey: string; previousSecretEndsAt: string }
    }
    const first = await roll("1h")
    for (const server of [a, b]) {
      for (const secret of [first.apiKey, key.apiKey]) {
        const answer = await whoami(server.url, secret)
        expect(answer.status).toBe(200)
        expect(answer.json.keyId).toBe(key.keyId)
      }
      expect((await whoami(server.url, key.apiKey)).headers.get("api-key-expires")).toBe(
        new Date(first.previousSecretEndsAt).toUTCString()
      )
    }
    const second = await roll("0")
    for (const server of [a, b]) expect((await whoami(server.url, second.apiKey)).status).toBe(200)
    for (const secret of [key.apiKey, first.apiKey]) {
      await eventually("both to refuse a secret rolled out", async () => await refusedByBoth(secret))
    }
    for (const server of [a, b]) {
      expectEnvelope(await whoami(server.url, key.apiKey), 401, "UNAUTHORIZED")
      expectEnvelope(await whoami(server.url, first.apiKey), 401, "UNAUTHORIZED")
      expect((await whoami(server.url, second.apiKey)).status).toBe(200)
    }
  })

  it("loses no acknowledged activation when one instance is killed under load, and the other keeps serving", async () => {
    const database = await postgres.database()
    const [doomed, survivor] = await startPair(database, { RATE_LIMIT_MAX: "1000000" })
    try {
      const key = await createKey(database)
      const acknowledged: Array<string> = []
      let byDoomed = 0
      let killed = false
      let afterKill = 0
      // Three loops on each instance; the doomed one's fail once it is killed, and go on.
      const load = runLoops(6, async (loop) => {
        const server = loop % 2 === 0 ? doomed : survivor
        const answer = await activate(server.url, { apiKey: key.apiKey, key: uniqueKey() }).catch(() => undefined)
        // Refused at once by the killed instance: a pause, not a busy loop beside the survivor.
        if (answer === undefined) return void (await Bun.sleep(10))
        if (ok(answer)) {
          acknowledged.push(answer.json.activation.id)
          if (server === doomed) byDoomed++
          if (killed && server === survivor) afterKill++
        }
      })
      try {
        // The killed instance has acknowledged activations of its own: those are what must not be lost.
        await eventually("activations on both instances", () => byDoomed >= 10 && acknowledged.length >= 30)
        doomed.process.kill("SIGKILL")
        killed = true
        await eventually("the survivor to serve on", () => afterKill > 40)
      } finally {
        load.stop()
        await load.done
      }

      const stored = await postgres.count(
        database,
        `SELECT 1 FROM activations WHERE id IN (${acknowledged.map((id) => `'${id}'`).join(", ")})`
      )
      expect(stored).toBe(acknowledged.length)
      expect((await whoami(survivor.url, key.apiKey)).status).toBe(200)
    } finally {
      await survivor.stop()
      await doomed.stop()
    }
  })
})

describe.skipIf(skip)("key changes announced by PostgreSQL", () => {
  /** The instances' connections that listen for key changes, by PostgreSQL's own account. */
  const listeners = (database: string) =>
    postgres.count(
      database,
      "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %'"
    )

  it("an instance whose listening connection is cut falls back on the poll, then listens again", async () => {
    const database = await postgres.database()
    const [a, b] = await startPair(database)
    try {
      const key = await createKey(database, { scopes: ["campaigns:read"] })
      // Each listens from its first request on.
      expect([(await whoami(a.url, key.apiKey)).status, (await whoami(b.url, key.apiKey)).status]).toEqual([200, 200])
      await eventually("both instances to listen", async () => (await listeners(database)) === 2)
      await withPostgres(database, (sql) =>
        sql`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
            WHERE datname = current_database() AND query LIKE 'LISTEN %'`)
      await eventually("the cut connections to be gone", async () => (await listeners(database)) === 0)

      // Announced to no one: the poll finds the change, and each instance listens again.
      expect(await revokeKey(database, key.keyId)).toBe(true)
      await eventually(
        "both to refuse the revoked key",
        async () => (await whoami(a.url, key.apiKey)).status === 401 && (await whoami(b.url, key.apiKey)).status === 401
      )
      await eventually("both instances to listen again", async () => (await listeners(database)) === 2)
      for (const server of [a, b]) {
        expect(logLines(server.logs()).filter((line) => line.message.includes("listening again"))).toHaveLength(1)
      }
      // And both still take a new key at its first request.
      const next = await createKey(database, { scopes: ["campaigns:read"] })
      expect([(await whoami(a.url, next.apiKey)).status, (await whoami(b.url, next.apiKey)).status]).toEqual([200, 200])
    } finally {
      await Promise.all([a.stop(), b.stop()])
    }
  })
})

describe.skipIf(skip)("a rate limit shared through Redis", () => {
  // 7 per hour: one token every 514,285.71… ms, a refill interval that is not a whole number.
  const limit = 7

  it(`admits exactly ${limit} of ${4 * limit} concurrent requests of one key across two instances`, async () => {
    const database = await postgres.database()
    const [a, b] = await startPair(database, { RATE_LIMIT_MAX: String(limit), RATE_LIMIT_WINDOW_SECONDS: "3600" })
    try {
      const key = await createKey(database, { scopes: ["campaigns:read"] })
      const answers = await Promise.all(
        shuffle(Array.from({ length: 4 * limit }, (_, i) => i % 2 === 0 ? a : b)).map((server) =>
          whoami(server.url, key.apiKey)
        )
      )
      expect(answers.filter(ok)).toHaveLength(limit)
      for (const answer of answers.filter((answer) => !ok(answer))) {
        expectEnvelope(answer, 429, "RATE_LIMITED")
        // One token per 514 s: the wait comes from the bucket in Redis, whichever instance answers.
        expect(Number(answer.headers.get("retry-after"))).toBeGreaterThan(500)
      }
      const remaining = answers.filter(ok).map((answer) => Number(/r=(\d+)/.exec(answer.headers.get("ratelimit")!)![1]))
      expect(remaining.sort((x, y) => x - y)).toEqual(Array.from({ length: limit }, (_, i) => i))
      // Limited by the store, not failed open: nothing was logged about Redis.
      expect(`${a.logs()}${b.logs()}`).not.toContain("rate limiter's Redis")
    } finally {
      await Promise.all([a.stop(), b.stop()])
    }
  })
})

describe.skipIf(skip)("a key's own rate limit shared through Redis", () => {
  const limit = 5

  it(`admits exactly ${limit} of ${4 * limit} concurrent requests of a key limited to ${limit}/3600 by keys update, across two instances`, async () => {
    const database = await postgres.database()
    const [a, b] = await startPair(database, { RATE_LIMIT_MAX: "1000000" })
    try {
      const key = await createKey(database, { scopes: ["campaigns:read"] })
      expect((await whoami(a.url, key.apiKey)).headers.get("ratelimit-policy")).toBe(`"default";q=1000000;w=60`)
      const updated = await runCli(["keys", "update", key.keyId, "--rate-limit", `${limit}/3600`], {
        DATABASE_URL: database
      })
      expect(updated.code, updated.stderr).toBe(0)
      await postgres.afterKeyChange()
      const usedFrom = Date.now()
      const answers = await Promise.all(
        shuffle(Array.from({ length: 4 * limit }, (_, i) => i % 2 === 0 ? a : b)).map((server) =>
          whoami(server.url, key.apiKey)
        )
      )
      expect(answers.filter(ok)).toHaveLength(limit)
      for (const answer of answers) expect(answer.headers.get("ratelimit-policy")).toBe(`"default";q=${limit};w=3600`)
      for (const answer of answers.filter((answer) => !ok(answer))) expectEnvelope(answer, 429, "RATE_LIMITED")
      const remaining = answers.filter(ok).map((answer) => Number(/r=(\d+)/.exec(answer.headers.get("ratelimit")!)![1]))
      expect(remaining.sort((x, y) => x - y)).toEqual(Array.from({ length: limit }, (_, i) => i))
      const usedUntil = Date.now()

      // Both note the key's use, and both write it as they stop, at the same moment: no conflict.
      expect(await Promise.all([a.stop(), b.stop()])).toEqual([0, 0])
      expect(`${a.logs()}${b.logs()}`).not.toContain("not written")
      const shown = await runCli(["keys", "show", key.keyId, "--json"], { DATABASE_URL: database })
      const minuteOf = (millis: number) => millis - (millis % 60_000)
      expect([minuteOf(usedFrom), minuteOf(usedUntil)]).toContain(Date.parse(JSON.parse(shown.stdout).lastUsedAt))
    } finally {
      await Promise.all([a.stop(), b.stop()])
    }
  })
})

describe.skipIf(skip)("faults of PostgreSQL and Redis", () => {
  it("answers 503 while PostgreSQL cannot be reached under load, loses no acknowledged activation, and recovers without a restart", async () => {
    const direct = await postgres.database()
    const link = await faultyLink(direct)
    const server = await startServer(link.url, { ...postgres.env, RATE_LIMIT_MAX: "1000000" })
    try {
      const key = await createKey(direct)
      const acknowledged: Array<string> = []
      const statuses = new Map<number, number>()
      let phase: "before" | "down" | "after" = "before"
      const seenDown: Array<Answer> = []
      let okAfter = 0
      // Every request gets an answer (503 while the database is away): one that throws ends its
      // loop, and fails the test at the next wait with what it threw.
      const load = runLoops(6, async () => {
        const during = phase
        const answer = await activate(server.url, { apiKey: key.apiKey, key: uniqueKey() })
        statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1)
        if (ok(answer)) {
          acknowledged.push(answer.json.activation.id)
          if (during === "after") okAfter++
        } else if (during === "down" && phase === "down") seenDown.push(answer)
      })
      const answering = (enough: () => boolean) => () => {
        if (load.errors.length > 0) throw load.errors[0]
        return enough()
      }
      try {
        await eventually("activations under way", answering(() => acknowledged.length >= 20))
        phase = "down"
        link.cut()
        await eventually("refusals while the database is away", answering(() => seenDown.length >= 20))
        expectEnvelope(await call(server.url, { path: "/readyz" }), 503, "SERVICE_UNAVAILABLE")
        link.restore()
        phase = "after"
        await eventually("activations again once it is back", answering(() => okAfter >= 50))
      } finally {
        load.stop()
        await load.done
      }
      expect(load.errors).toEqual([])

      for (const answer of seenDown) expectEnvelope(answer, 503, "SERVICE_UNAVAILABLE")
      const outageLines = () => logLines(server.logs()).filter((line) => line.message === "database unavailable")
      await eventually("the log to be written", () => outageLines().length > 0)
      expect(outageLines()[0]!.cause).toEqual(expect.any(String))
      expect([...statuses.keys()].sort()).toEqual([200, 503])
      // Readiness's last answer serves it for up to a second (docs/operators.md, Operating it: Health).
      await eventually(
        "/readyz to answer 200",
        async () => (await call(server.url, { path: "/readyz" })).status === 200
      )
      const stored = await postgres.count(
        direct,
        `SELECT 1 FROM activations WHERE id IN (${acknowledged.map((id) => `'${id}'`).join(", ")})`
      )
      expect(stored).toBe(acknowledged.length)
      // Stopping (or within 20 s of the outage's end), it counts the refusals since its last line:
      // every 503 is in the log, a line with a cause for itself and the rest as counts, and so is
      // the one readiness check the outage failed.
      expect(await server.stop()).toBe(0)
      const logged = () =>
        outageLines().reduce(
          (sum, line) => sum + (line.cause === undefined ? 0 : 1) + line.annotations.moreSinceLastLine,
          0
        )
      await eventually("the outage's last count to be written", () => logged() === statuses.get(503)! + 1)
      // Lines for the outage, not one per refused request.
      expect(outageLines().length).toBeLessThan(statuses.get(503)!)
    } finally {
      await server.stop()
      link.close()
    }
  })

  it("answers 503 rather than waiting without end when another instance holds the same key's row mid-transaction", async () => {
    const database = await postgres.database()
    const server = await startServer(database, postgres.env)
    try {
      const key = await createKey(database)
      const idempotencyKey = uniqueKey()
      const rollBack = new Error("roll back")
      await withPostgres(database, (sql) =>
        sql.begin(async (tx) => {
          // As an instance frozen between its insert and its commit would.
          await tx.unsafe(
            `INSERT INTO idempotency_keys VALUES ($1, $2, $3, NULL, 200, '{}', $4, $5)`,
            [key.brandId, idempotencyKey, "0".repeat(64), Date.now(), Date.now() + 60_000]
          )
          expectEnvelope(
            await activate(server.url, { apiKey: key.apiKey, key: idempotencyKey }),
            503,
            "SERVICE_UNAVAILABLE"
          )
          throw rollBack
        })).catch((error) => {
          if (error !== rollBack) throw error
        })
      // Once the other transaction is gone, the same request goes through, once.
      expect((await activate(server.url, { apiKey: key.apiKey, key: idempotencyKey })).status).toBe(200)
      expect(await postgres.count(database, "SELECT 1 FROM activations WHERE brand_id = ?", key.brandId)).toBe(1)
    } finally {
      await server.stop()
    }
  })

  it("serves without limits while Redis cannot be reached, says so once and in /readyz, and limits again once it is back", async () => {
    const link = await faultyLink(postgres.env["REDIS_URL"]!)
    const database = await postgres.database()
    const server = await startServer(database, {
      REDIS_URL: link.url,
      RATE_LIMIT_MAX: "2",
      RATE_LIMIT_WINDOW_SECONDS: "3600"
    })
    const readiness = async () => (await call(server.url, { path: "/readyz" })).json
    try {
      const key = await createKey(database, { scopes: ["campaigns:read"] })
      const statuses = async (n: number) => {
        const seen = []
        for (let i = 0; i < n; i++) seen.push((await whoami(server.url, key.apiKey)).status)
        return seen
      }
      expect(await statuses(3)).toEqual([200, 200, 429])
      expect((await readiness()).rateLimiter).toBe("redis")

      link.cut()
      await eventually(
        "readiness to report the limiter degraded",
        async () => (await readiness()).rateLimiter === "degraded"
      )
      expect((await call(server.url, { path: "/readyz" })).status).toBe(200)
      expect(await statuses(5)).toEqual([200, 200, 200, 200, 200])
      const unlimited = await whoami(server.url, key.apiKey)
      expect(unlimited.headers.get("ratelimit")).toBe(`"default";r=2;t=0`)

      link.restore()
      await eventually("readiness to report Redis again", async () => (await readiness()).rateLimiter === "redis", {
        intervalMs: 100
      })
      // The bucket was kept in Redis: still empty, so the limit applies at once.
      expectEnvelope(await whoami(server.url, key.apiKey), 429, "RATE_LIMITED")
      const warnings = server.logs().split("\n").filter((line) => line.includes("rate limiter's Redis does not answer"))
      expect(warnings).toHaveLength(1)
      expect(server.logs()).toContain("rate limiter's Redis answers again")
      expect(server.logs()).not.toContain("[ioredis]")
    } finally {
      await server.stop()
      link.close()
    }
  })
})
