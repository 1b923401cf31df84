import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { renameSync, rmSync, statSync } from "node:fs"
import {
  activate,
  activatePath,
  type Answer,
  call,
  gatedBody,
  openConnection,
  rawRequest,
  responseOf,
  uniqueKey,
  whoami
} from "./support/client.ts"
import { expectEnvelope } from "./support/contract.ts"
import {
  activationExists,
  countRows,
  databaseFiles,
  integrityCheck,
  lockDatabase,
  orphans
} from "./support/database.ts"
import { connectionLoad, eventually, randomInt, runLoops, serverHasRead } from "./support/load.ts"
import {
  type CreatedTestKey,
  createKey,
  runCli,
  type RunningServer,
  startServer,
  tempDatabase
} from "./support/server.ts"

const unlimited = { RATE_LIMIT_MAX: "1000000" }

/** The server's JSON log lines whose message is `[name, fields]`, as the drain logs them. */
/** The annotations of every log line with this message. */
const logged = (server: RunningServer, message: string): Array<Record<string, unknown>> =>
  server.logs().split("\n").flatMap((line) => {
    try {
      const entry = JSON.parse(line)
      return entry.message === message ? [entry.annotations] : []
    } catch {
      return []
    }
  })

describe("crash safety", () => {
  interface Attempt {
    readonly key: string
    readonly body: { readonly socialUsername: string }
  }

  it(
    "keeps every answered activation, replayable byte for byte, and never half of one, across SIGKILLs at random moments",
    async () => {
      const database = tempDatabase()
      const key = await createKey(database)
      let server = await startServer(database, unlimited)
      let attempted = 0
      try {
        for (let round = 0; round < 4; round++) {
          const answered: Array<Attempt & { readonly answer: Answer }> = []
          const unanswered: Array<Attempt> = []
          const load = runLoops(8, async (loop) => {
            const attempt = { key: uniqueKey(), body: { socialUsername: `@crash-${round}-${loop}` } }
            attempted++
            try {
              answered.push({ ...attempt, answer: await activate(server.url, { apiKey: key.apiKey, ...attempt }) })
            } catch (error) {
              unanswered.push(attempt)
              throw error
            }
          })
          await eventually("activations to be answered", () => answered.length >= 16)
          await Bun.sleep(randomInt(0, 300))
          await server.stop("SIGKILL")
          load.stop()
          await load.done

          server = await startServer(database, unlimited)
          expect(answered.map(({ answer }) => answer.status).filter((status) => status !== 200)).toEqual([])
          for (const { answer, body, key: idempotencyKey } of answered) {
            expect(activationExists(database, answer.json.activation.id)).toBe(true)
            const replay = await activate(server.url, { apiKey: key.apiKey, key: idempotencyKey, body })
            expect(replay.status).toBe(200)
            expect(replay.text).toBe(answer.text)
            expect(replay.headers.get("idempotent-replayed")).toBe("true")
          }
          expect(orphans(database)).toEqual({ activations: 0, idempotencyKeys: 0 })

          // A client retrying what got no answer ends with exactly one record per key.
          for (const attempt of unanswered) {
            expect((await activate(server.url, { apiKey: key.apiKey, ...attempt })).status).toBe(200)
          }
          expect(countRows(database, "activations")).toBe(attempted)
          expect(countRows(database, "idempotency_keys")).toBe(attempted)
        }
      } finally {
        await server.stop()
      }
    },
    60_000
  )
})

describe("graceful shutdown", () => {
  it("on SIGTERM under 50 connections of activations: /readyz turns 503 at once, requests are still served for SHUTDOWN_DELAY_SECONDS with Connection: close, every request sent is answered, and every 200 is in the database", async () => {
    const database = tempDatabase()
    const server = await startServer(database, { ...unlimited, SHUTDOWN_DELAY_SECONDS: "1" })
    const key = await createKey(database)
    const activation = () =>
      rawRequest("POST", activatePath(), [
        ["authorization", `Bearer ${key.apiKey}`],
        ["idempotency-key", uniqueKey()],
        ["content-type", "application/json"]
      ], JSON.stringify({ socialUsername: "@rolling" }))
    try {
      // The balancer in front: it sends new connections until it sees /readyz fail.
      let inRotation = true
      const load = connectionLoad(server.url, 50, activation, () => inRotation)
      await eventually("activations to be answered", () => countRows(database, "activations") >= 200)
      server.process.kill("SIGTERM")
      await eventually("/readyz to fail", async () => (await call(server.url, { path: "/readyz" })).status === 503)
      // Not ready, and still serving: the balancer has the window to move clients away.
      const servedMeanwhile = await call(server.url, { path: "/v1/whoami", apiKey: key.apiKey })
      inRotation = false
      const report = await load
      const exitCode = await server.process.exited

      expect(exitCode).toBe(0)
      expect(report.unanswered).toEqual([])
      expect(report.answers.length).toBe(report.sent)
      const statuses = new Set(report.answers.map(({ status }) => status))
      expect([...statuses].filter((status) => status !== 200 && status !== 503)).toEqual([])
      // Served through the window, each answer then telling its client to move on.
      const closing = report.answers.filter(({ headers }) => headers["connection"] === "close")
      expect(closing.filter(({ status }) => status === 200).length).toBeGreaterThan(0)
      expect(servedMeanwhile.status).toBe(200)
      expect(servedMeanwhile.headers.get("connection")).toBe("close")
      for (const answer of report.answers.filter(({ status }) => status === 200)) {
        expect(activationExists(database, answer.json.activation.id)).toBe(true)
      }
      expect(logged(server, "draining")).toEqual([expect.objectContaining({ delaySeconds: 1 })])
      expect(logged(server, "stopped")).toEqual([expect.objectContaining({ unfinished: 0 })])
      expect(integrityCheck(database)).toBe("ok")
    } finally {
      await server.stop()
    }
  })

  it("on SIGTERM finishes the request in flight, answers a request begun on an open connection with 503, refuses new connections, exits 0 and leaves the database closed and intact", async () => {
    const database = tempDatabase()
    const server = await startServer(database)
    const key = await createKey(database)
    const whoamiRequest = rawRequest("GET", "/v1/whoami", [["authorization", `Bearer ${key.apiKey}`]])
    try {
      const idle = await openConnection(server.url)
      const busy = await openConnection(server.url)
      for (const connection of [idle, busy]) {
        connection.send(whoamiRequest)
        expect(await connection.next()).toMatchObject({ _tag: "Answered", response: { status: 200 } })
      }
      busy.send(whoamiRequest.subarray(0, 12))

      let release = () => {}
      const body = JSON.stringify({ socialUsername: "@draining" })
      const inFlight = activate(server.url, {
        apiKey: key.apiKey,
        key: uniqueKey(),
        rawBody: gatedBody(body.slice(0, 10), body.slice(10), new Promise((resolve) => release = resolve))
      })
      // The idle and busy connections, and the activation's: its headers and first bytes read.
      await serverHasRead(server.url, { connections: 3 })
      server.process.kill("SIGTERM")
      await eventually("the drain to start", () => logged(server, "draining").length > 0)
      expect(logged(server, "draining")[0]!["inFlight"]).toBeGreaterThanOrEqual(1)

      expect(await idle.next()).toEqual({ _tag: "Closed" })
      expect(idle.pending()).toBe(0)
      await expect(openConnection(server.url)).rejects.toMatchObject({ code: "ECONNREFUSED" })

      busy.send(whoamiRequest.subarray(12))
      const late = responseOf(await busy.next())
      expectEnvelope(late, 503, "SERVICE_UNAVAILABLE")
      expect(late.headers.connection).toBe("close")
      expect(await busy.next()).toEqual({ _tag: "Closed" })

      release()
      const completed = await inFlight
      expect(completed.status).toBe(200)
      expect(await server.process.exited).toBe(0)
      expect(logged(server, "stopped")).toEqual([expect.objectContaining({ unfinished: 0 })])

      expect(databaseFiles(database)).toEqual([database])
      expect(integrityCheck(database)).toBe("ok")
      expect(activationExists(database, completed.json.activation.id)).toBe(true)
    } finally {
      await server.stop()
    }
  })

  // 30 s, so that a stop that waited for the delay is one the test tells apart from one that did not.
  const longDelay = { SHUTDOWN_DELAY_SECONDS: "30" }

  it("on SIGINT skips SHUTDOWN_DELAY_SECONDS: the listener closes at once, the request in flight still finishes, and it exits 0 before the delay would have ended", async () => {
    const database = tempDatabase()
    const server = await startServer(database, longDelay)
    const key = await createKey(database)
    try {
      const idle = await openConnection(server.url)
      idle.send(rawRequest("GET", "/v1/whoami", [["authorization", `Bearer ${key.apiKey}`]]))
      expect(await idle.next()).toMatchObject({ _tag: "Answered", response: { status: 200 } })

      let release = () => {}
      const body = JSON.stringify({ socialUsername: "@interrupted" })
      const inFlight = activate(server.url, {
        apiKey: key.apiKey,
        key: uniqueKey(),
        rawBody: gatedBody(body.slice(0, 10), body.slice(10), new Promise((resolve) => release = resolve))
      })
      await serverHasRead(server.url, { connections: 2 })
      const interruptedAt = Date.now()
      server.process.kill("SIGINT")
      await eventually("the listener to close", () => logged(server, "closing the listener").length > 0)
      expect(logged(server, "draining")).toEqual([expect.objectContaining({ delaySeconds: 0 })])
      expect(logged(server, "closing the listener")[0]!["inFlight"]).toBeGreaterThanOrEqual(1)
      await expect(openConnection(server.url)).rejects.toMatchObject({ code: "ECONNREFUSED" })
      expect(await idle.next()).toEqual({ _tag: "Closed" })

      release()
      const completed = await inFlight
      expect(completed.status).toBe(200)
      expect(await server.process.exited).toBe(0)
      expect(Date.now() - interruptedAt).toBeLessThan(30_000)
      expect(logged(server, "stopped")).toEqual([expect.objectContaining({ unfinished: 0 })])
      expect(integrityCheck(database)).toBe("ok")
      expect(activationExists(database, completed.json.activation.id)).toBe(true)
    } finally {
      await server.stop()
    }
  })

  it("on SIGTERM keeps SHUTDOWN_DELAY_SECONDS, serving with Connection: close; a SIGINT then skips the rest of it", async () => {
    const database = tempDatabase()
    const server = await startServer(database, longDelay)
    const key = await createKey(database)
    try {
      const terminatedAt = Date.now()
      server.process.kill("SIGTERM")
      await eventually("/readyz to fail", async () => (await call(server.url, { path: "/readyz" })).status === 503)
      expect(logged(server, "draining")).toEqual([expect.objectContaining({ delaySeconds: 30 })])
      // Within the delay: a new connection is still served, and told to close.
      const served = await call(server.url, { path: "/v1/whoami", apiKey: key.apiKey })
      expect(served.status).toBe(200)
      expect(served.headers.get("connection")).toBe("close")
      expect(logged(server, "closing the listener")).toEqual([])

      server.process.kill("SIGINT")
      expect(await server.process.exited).toBe(0)
      expect(Date.now() - terminatedAt).toBeLessThan(30_000)
      expect(logged(server, "SIGINT: the rest of the shutdown delay skipped")).toHaveLength(1)
      expect(logged(server, "stopped")).toEqual([expect.objectContaining({ unfinished: 0 })])
    } finally {
      await server.stop()
    }
  })
})

describe("database faults", () => {
  let database: string
  let server: RunningServer
  let key: CreatedTestKey

  beforeAll(async () => {
    database = tempDatabase()
    server = await startServer(database, unlimited)
    key = await createKey(database)
  })
  afterAll(async () => {
    await server?.stop()
  })

  const rows = () => ({
    activations: countRows(database, "activations"),
    idempotencyKeys: countRows(database, "idempotency_keys")
  })

  /** The same request once the fault is gone: a fresh activation, so nothing of the refused one was kept. */
  const expectFreshActivation = async (idempotencyKey: string, before: ReturnType<typeof rows>) => {
    const retried = await activate(server.url, { apiKey: key.apiKey, key: idempotencyKey })
    expect(retried.status).toBe(200)
    expect(retried.headers.get("idempotent-replayed")).toBeNull()
    expect(rows()).toEqual({ activations: before.activations + 1, idempotencyKeys: before.idempotencyKeys + 1 })
  }

  /**
   * While the fault `cause` makes holds, an activation is 503 and writes nothing while whoami is
   * still 200; once the function it returns has undone it, the same request is a fresh activation.
   */
  const expectRefusedUntilUndone = async (cause: () => () => void) => {
    const before = rows()
    const idempotencyKey = uniqueKey()
    const undo = cause()
    try {
      expectEnvelope(
        await activate(server.url, { apiKey: key.apiKey, key: idempotencyKey }),
        503,
        "SERVICE_UNAVAILABLE"
      )
      expect(rows()).toEqual(before)
      expect((await whoami(server.url, key.apiKey)).status).toBe(200)
    } finally {
      undo()
    }
    await expectFreshActivation(idempotencyKey, before)
  }

  it("answers 503 while another process holds the write lock past the busy timeout, writes nothing, still answers reads, and recovers without a restart", async () => {
    await expectRefusedUntilUndone(() => lockDatabase(database, "writes"))
  })

  it("answers a read while a write is waiting for another process's lock", async () => {
    const release = lockDatabase(database, "writes")
    try {
      const connection = await openConnection(server.url)
      connection.send(rawRequest("POST", activatePath(), [
        ["authorization", `Bearer ${key.apiKey}`],
        ["idempotency-key", uniqueKey()],
        ["content-type", "application/json"]
      ], JSON.stringify({ socialUsername: "@locked" })))
      // The write read off its connection, so waiting for the lock, before the read is sent.
      await serverHasRead(server.url, { from: [connection.localPort] })
      const write = connection.next().finally(() => connection.destroy())
      const read = whoami(server.url, key.apiKey)
      const first = await Promise.race([write.then(() => "write"), read.then(() => "read")])
      expect(first, "whoami was held up until the waiting write gave up").toBe("read")
      expect((await read).status).toBe(200)
      const refused = responseOf(await write)
      expect({ status: refused.status, code: refused.json.code }).toEqual({ status: 503, code: "SERVICE_UNAVAILABLE" })
    } finally {
      release()
    }
  })

  const hasPrlimit = Bun.which("prlimit") !== null
  const limitFileSize = (pid: number, soft: number | "unlimited") =>
    expect(Bun.spawnSync(["prlimit", `--pid=${pid}`, `--fsize=${soft}:`]).exitCode).toBe(0)

  it.skipIf(!hasPrlimit)(
    "answers 503 while the database cannot be written (I/O error), writes nothing, and recovers by itself",
    async () => {
      await expectRefusedUntilUndone(() => {
        limitFileSize(server.process.pid, statSync(`${database}-wal`).size)
        return () => limitFileSize(server.process.pid, "unlimited")
      })
    }
  )

  it("answers 503 while the database file is gone from its path, writes nothing, and recovers when it is back", async () => {
    const before = rows()
    const idempotencyKey = uniqueKey()
    const moved = `${database}.moved`
    let during: Answer
    renameSync(database, moved)
    try {
      during = await activate(server.url, { apiKey: key.apiKey, key: idempotencyKey })
    } finally {
      renameSync(moved, database)
    }
    expectEnvelope(during, 503, "SERVICE_UNAVAILABLE")
    expect(rows()).toEqual(before)
    await expectFreshActivation(idempotencyKey, before)
  })
})

describe("the database's -wal and -shm files", () => {
  it.each(["-wal", "-shm"])(
    "once %s is deleted under the running server, writes and /readyz answer 503 and nothing more is acknowledged",
    async (suffix) => {
      const database = tempDatabase()
      const server = await startServer(database)
      const key = await createKey(database)
      try {
        const before = await activate(server.url, { apiKey: key.apiKey, key: uniqueKey() })
        expect(before.status).toBe(200)
        expect((await call(server.url, { path: "/readyz" })).status).toBe(200)
        rmSync(`${database}${suffix}`)
        expectEnvelope(await activate(server.url, { apiKey: key.apiKey, key: uniqueKey() }), 503, "SERVICE_UNAVAILABLE")
        // Readiness asks the database at most once a second (docs/operators.md, Operating it: Health).
        await eventually(
          "/readyz to answer 503",
          async () => (await call(server.url, { path: "/readyz" })).status === 503
        )
        expectEnvelope(await call(server.url, { path: "/readyz" }), 503, "SERVICE_UNAVAILABLE")
      } finally {
        await server.stop("SIGKILL")
      }
    }
  )

  it("once -shm is deleted, a key revoked with the command line is never accepted again: the server stops vouching for keys", async () => {
    const database = tempDatabase()
    const server = await startServer(database)
    const key = await createKey(database)
    try {
      expect((await whoami(server.url, key.apiKey)).status).toBe(200)
      rmSync(`${database}-shm`)
      const revoked = await runCli(["keys", "revoke", key.keyId], { DATABASE_URL: database })
      expect(revoked.code).toBe(0)
      // The directory's watch tells the server within moments; until restart no key is vouched for.
      await eventually("whoami to be refused", async () => (await whoami(server.url, key.apiKey)).status === 503)
      expectEnvelope(await whoami(server.url, key.apiKey), 503, "SERVICE_UNAVAILABLE")
    } finally {
      await server.stop("SIGKILL")
    }
  })
})
