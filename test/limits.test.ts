import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { bodyTimeoutMs } from "../src/Domain/JsonBody.ts"
import { clientKeyOf } from "../src/Edge/Caller.ts"
import { makeConnectionLimit } from "../src/Edge/ConnectionLimit.ts"
import {
  activate,
  activatePath,
  call,
  endlessBody,
  exchange,
  type HeaderLines,
  openConnection,
  type RawConnection,
  type RawOutcome,
  rawRequest,
  type RawResponse,
  responseOf,
  uniqueKey,
  whoami
} from "./support/client.ts"
import { expectClientAnswer, expectEnvelope } from "./support/contract.ts"
import { stateDeadlineMs } from "./support/deadlines.ts"
import { type InProcessServer, serveInProcess } from "./support/inProcess.ts"
import { eventually } from "./support/load.ts"
import { type CreatedTestKey, createKey, type RunningServer, startServer, tempDatabase } from "./support/server.ts"
import { logLines } from "./support/telemetry.ts"

let server: InProcessServer
let writer: CreatedTestKey

beforeAll(async () => {
  const database = tempDatabase()
  server = await serveInProcess(database, { RATE_LIMIT_MAX: "1000000" })
  writer = await createKey(database)
})
afterAll(async () => {
  await server?.stop()
})

const activateHeaders = (extra: HeaderLines): HeaderLines => [
  ["authorization", `Bearer ${writer.apiKey}`],
  ["idempotency-key", uniqueKey()],
  ["content-type", "application/json"],
  ...extra
]

/** An answer that is an envelope, or the connection closed: what a refused request may get, never silence. */
const expectAnsweredOrClosed = (outcome: RawOutcome) => {
  expect(outcome._tag === "Answered" || outcome._tag === "Closed", `the request ${outcome._tag}`).toBe(true)
  if (outcome._tag === "Answered") expectClientAnswer(outcome.response)
}

describe("body size", () => {
  it("refuses a chunked body over 16 KiB with 413 before reading it to its end, and authenticates first", async () => {
    const refused = await activate(server.url, { apiKey: writer.apiKey, key: uniqueKey(), rawBody: endlessBody() })
    expectEnvelope(refused, 413, "PAYLOAD_TOO_LARGE")
    expect(refused.headers.get("connection")).toBe("close")

    const anonymous = await activate(server.url, { apiKey: undefined, key: uniqueKey(), rawBody: endlessBody() })
    expectEnvelope(anonymous, 401, "UNAUTHORIZED")
  })

  it.each([["64 KiB", 64 * 1024], ["100 MB", 100_000_000]])(
    "refuses a declared Content-Length of %s with a tiny body with the 413 envelope, without waiting for the body",
    async (_, declared) => {
      const outcome = await exchange(
        server.url,
        rawRequest("POST", activatePath(), activateHeaders([["content-length", String(declared)]]), "{}")
      )
      expectEnvelope(responseOf(outcome), 413, "PAYLOAD_TOO_LARGE")
    }
  )
})

describe("chunked bodies", () => {
  /** An activation whose body is sent in these pieces, each in a write of its own, a moment apart. */
  const trickle = async (pieces: ReadonlyArray<string>) => {
    const connection = await openConnection(server.url)
    try {
      connection.send(
        `POST ${activatePath()} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${writer.apiKey}\r\n` +
          `idempotency-key: ${uniqueKey()}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n`
      )
      for (const piece of pieces) {
        connection.send(`${Buffer.byteLength(piece).toString(16)}\r\n${piece}\r\n`)
        await Bun.sleep(1)
      }
      connection.send("0\r\n\r\n")
      return responseOf(await connection.next())
    } finally {
      connection.destroy()
    }
  }

  it("takes a body in a few chunks, and refuses one trickled in more than 256 with 413 and a message saying why", async () => {
    const text = JSON.stringify({ socialUsername: `@${"c".repeat(290)}`.slice(0, 100) }).padEnd(600, " ")
    expect((await trickle([text.slice(0, 10), text.slice(10)])).status).toBe(200)
    const bytewise = await trickle(text.split(""))
    expectEnvelope(bytewise, 413, "PAYLOAD_TOO_LARGE")
    expect(bytewise.json.message).toContain("more than 256 chunks")
  })
})

describe("slow and truncated bodies", () => {
  const declared = JSON.stringify({ socialUsername: "@slow-sender", plannedPostAt: "2026-12-01" })

  it("answers or closes a stalled body once the body timeout passes, and serves other requests meanwhile", async () => {
    const stalled = await openConnection(server.url)
    try {
      stalled.send(rawRequest("POST", activatePath(), activateHeaders([["content-length", String(declared.length)]])))
      stalled.send(declared.slice(0, 10))
      expect((await whoami(server.url, writer.apiKey)).status).toBe(200)
      expect(stalled.pending(), "the stalled request was answered before the whoami").toBe(0)
      expectAnsweredOrClosed(await stalled.next({ timeoutMs: bodyTimeoutMs + stateDeadlineMs }))
    } finally {
      stalled.destroy()
    }
    expect((await whoami(server.url, writer.apiKey)).status).toBe(200)
  })

  it("answers or closes a body cut short by the client", async () => {
    const truncated = await openConnection(server.url)
    try {
      truncated.send(rawRequest("POST", activatePath(), activateHeaders([["content-length", String(declared.length)]])))
      truncated.send(declared.slice(0, 10))
      truncated.endWriting()
      expectAnsweredOrClosed(await truncated.next())
    } finally {
      truncated.destroy()
    }
    expect((await whoami(server.url, writer.apiKey)).status).toBe(200)
  })
})

describe("header size", () => {
  it("answers a 100 KiB request header or closes the connection, never hangs, and keeps serving", async () => {
    const outcome = await exchange(
      server.url,
      rawRequest("GET", "/v1/whoami", [["authorization", `Bearer ${writer.apiKey}`], [
        "x-padding",
        "a".repeat(100 * 1024)
      ]])
    )
    expect(outcome._tag === "Answered" || outcome._tag === "Closed", `the request ${outcome._tag}`).toBe(true)
    if (outcome._tag === "Answered") expect(outcome.response.status).toBe(431)
    expect((await whoami(server.url, writer.apiKey)).status).toBe(200)
  })
})

describe("requests per connection", () => {
  it("closes a connection after its 1000th request in a window, however many it pipelined, and keeps serving others", async () => {
    const connection = await openConnection(server.url)
    try {
      connection.send(
        Buffer.from(Buffer.from(rawRequest("GET", "/healthz", [])).toString("latin1").repeat(1_200), "latin1")
      )
      const answers = []
      for (let outcome = await connection.next(); outcome._tag === "Answered"; outcome = await connection.next()) {
        answers.push(outcome.response)
      }
      expect(answers).toHaveLength(1_000)
      expect(answers.slice(0, -1).every((answer) => answer.status === 200 && answer.headers["connection"] !== "close"))
        .toBe(true)
      expect(answers.at(-1)!.headers["connection"]).toBe("close")
    } finally {
      connection.destroy()
    }
    expect((await whoami(server.url, writer.apiKey)).status).toBe(200)
  })
})

describe("connections per address (docs/operators.md, Operating it: Connections)", () => {
  let limited: InProcessServer
  let key: CreatedTestKey
  const proxy = "127.0.0.3"

  beforeAll(async () => {
    const database = tempDatabase()
    limited = await serveInProcess(database, {
      CONNECTIONS_PER_ADDRESS: "3",
      CONNECTIONS_PER_PROXY: "5",
      TRUSTED_PROXIES: proxy
    })
    key = await createKey(database)
  })
  afterAll(async () => {
    await limited?.stop()
  })

  const healthz = rawRequest("GET", "/healthz", [])
  const body = JSON.stringify({ socialUsername: "@busy" })

  /**
   * `count` connections from `address`, each busy with an activation whose body is on its way
   * (the server is reading it): connections in use, which no relief closes.
   */
  const busyFrom = async (address: string, count: number, headers: HeaderLines = []) => {
    const busy = []
    for (let i = 0; i < count; i++) {
      const connection = await openConnection(limited.url, address)
      busy.push(connection)
      connection.send(
        rawRequest("POST", activatePath(), [
          ["authorization", `Bearer ${key.apiKey}`],
          ["idempotency-key", uniqueKey()],
          ["content-type", "application/json"],
          ["content-length", String(body.length)],
          ...(i === 0 ? headers : [])
        ])
      )
      connection.send(body.slice(0, 5))
    }
    // Each is being served once a request sent after them all is answered.
    expect((await oneMoreFrom("127.0.0.9")).answer.status).toBe(200)
    return busy
  }

  /** The answer to one request on a new connection from `address`, and whether the server then closed it. */
  const oneMoreFrom = (address: string) => oneMoreFromServer(limited.url, address)
  const oneMoreFromServer = async (url: string, address: string) => {
    const connection = await openConnection(url, address)
    try {
      connection.send(healthz)
      const answer = responseOf(await connection.next())
      return { answer, closed: answer.status === 200 ? undefined : (await connection.next())._tag === "Closed" }
    } finally {
      connection.destroy()
    }
  }

  it("answers a request on a connection over its address's limit of connections in use 503 with Connection: close, and serves other addresses", async () => {
    const busy = await busyFrom("127.0.0.2", 3, [["connection", "close"]])
    try {
      // Once the server is serving all three (on a loaded machine a partial request can reach it
      // after a later one from elsewhere), a fourth from the address is refused.
      let refused = await oneMoreFrom("127.0.0.2")
      for (const until = Date.now() + stateDeadlineMs; refused.answer.status === 200 && Date.now() < until;) {
        await new Promise((resolve) => setTimeout(resolve, 20))
        refused = await oneMoreFrom("127.0.0.2")
      }
      expectEnvelope(refused.answer, 503, "SERVICE_UNAVAILABLE")
      expect(refused.answer.json.message).toBe(
        "Too many connections from this address; send requests on the connections already open."
      )
      expect(refused.answer.headers["connection"]).toBe("close")
      expect(refused.answer.headers["x-request-id"]).toBeDefined()
      expect(refused.closed).toBe(true)

      expect((await oneMoreFrom("127.0.0.4")).answer.status).toBe(200)

      // A connection its client ends with Connection: close no longer counts.
      busy[0]!.send(body.slice(5))
      expect(responseOf(await busy[0]!.next()).status).toBe(200)
      expect((await oneMoreFrom("127.0.0.2")).answer.status).toBe(200)
    } finally {
      for (const connection of busy) connection.destroy()
    }
  })

  /**
   * `count` connections from `address` to `url`, idle since their last answer: once all are open,
   * each is sent one request more, which the server answers knowing how many the address holds.
   */
  const idleFrom = async (url: string, address: string, count: number) => {
    const idle: Array<RawConnection> = []
    for (let i = 0; i < count; i++) idle.push(await openConnection(url, address))
    for (const round of [1, 2]) {
      for (const connection of idle) {
        connection.send(healthz)
        expect(responseOf(await connection.next()).status, `round ${round}`).toBe(200)
      }
    }
    return idle
  }

  it("closes an address's own idle connections once it nears its limit, and no other address's", async () => {
    // A server of its own: 4 an address, so that from 2 on an address's connections are closed soon.
    const fresh = await serveInProcess(tempDatabase(), { CONNECTIONS_PER_ADDRESS: "4" })
    const held: Array<RawConnection> = []
    try {
      // Another client, under half its limit, keeps its connection open between requests.
      const [other] = await idleFrom(fresh.url, "127.0.0.6", 1)
      held.push(other!)
      held.push(...await idleFrom(fresh.url, "127.0.0.5", 4))
      const refused = await oneMoreFromServer(fresh.url, "127.0.0.5")
      expectEnvelope(refused.answer, 503, "SERVICE_UNAVAILABLE")
      // The full address's idle connections are closed by the server, its first one included.
      for (const connection of held.slice(1)) expect((await connection.next())._tag).toBe("Closed")
      // Once they can no longer be open, the address is served again.
      await eventually(
        "the address to be served again",
        async () => (await oneMoreFromServer(fresh.url, "127.0.0.5")).answer.status === 200,
        { timeoutMs: stateDeadlineMs }
      )
      // The other client's connection is still open and answers on.
      other!.send(healthz)
      expect(responseOf(await other!.next()).status).toBe(200)
    } finally {
      for (const connection of held) connection.destroy()
      await fresh.stop()
    }
  })

  it("stops counting a connection the server closes after its answer, a body left unread", async () => {
    const fresh = await serveInProcess(tempDatabase(), { CONNECTIONS_PER_ADDRESS: "2" })
    try {
      // Refused before its body is read: the answer closes the connection, which no longer counts.
      for (let i = 0; i < 5; i++) {
        const connection = await openConnection(fresh.url, "127.0.0.5")
        try {
          connection.send(rawRequest("POST", activatePath(), [
            ["idempotency-key", uniqueKey()],
            ["content-type", "application/json"],
            ["content-length", String(body.length)]
          ]))
          const answer = responseOf(await connection.next())
          expectEnvelope(answer, 401, "UNAUTHORIZED")
          expect(answer.headers["connection"]).toBe("close")
          expect((await connection.next())._tag).toBe("Closed")
        } finally {
          connection.destroy()
        }
      }
    } finally {
      await fresh.stop()
    }
  })

  it("counts a connection holding part of a next request until the server has closed it", async () => {
    const fresh = await serveInProcess(tempDatabase(), { CONNECTIONS_PER_ADDRESS: "4" })
    const held = await idleFrom(fresh.url, "127.0.0.5", 4)
    try {
      // Half of a second request on each: open, and not yet a request the server has seen.
      for (const connection of held) connection.send(healthz.slice(0, 10))
      const refused = await oneMoreFromServer(fresh.url, "127.0.0.5")
      expectEnvelope(refused.answer, 503, "SERVICE_UNAVAILABLE")
      expect(refused.closed).toBe(true)
      // Refused for as long as they are open: the server closes them, then serves the address again.
      for (const connection of held) expect((await connection.next())._tag).toBe("Closed")
      await eventually(
        "the address to be served again",
        async () => (await oneMoreFromServer(fresh.url, "127.0.0.5")).answer.status === 200,
        { timeoutMs: stateDeadlineMs }
      )
    } finally {
      for (const connection of held) connection.destroy()
      await fresh.stop()
    }
  })

  it("limits an IPv6 client by its /64 and an IPv4-mapped one as its IPv4 address, and shortens only the full address's timeouts", () =>
    Effect.gen(function*() {
      const shortened: Array<string> = []
      const limit = yield* makeConnectionLimit({
        limits: { perAddress: 4, perProxy: 4, total: 1_000 },
        trustedProxies: [],
        idleTimeoutSeconds: 30,
        shorten: (request) => shortened.push(new URL(request.url).pathname)
      })
      const admit = (address: string, port: number) => {
        const admitted = limit.admit(new Request(`http://api/${address}/${port}`), { address, port })
        return typeof admitted === "string" ? admitted : "admitted"
      }
      for (const address of ["2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff::3", "2001:db8:1:2::4"]) {
        expect(admit(address, 1000), address).toBe("admitted")
      }
      expect(admit("2001:db8:1:2:aaaa:bbbb:cccc:dddd", 1000)).toBe("address")
      expect(admit("2001:db8:1:3::1", 1000)).toBe("admitted")
      for (const port of [1, 2, 3]) expect(admit("192.0.2.7", port)).toBe("admitted")
      expect(admit("::ffff:192.0.2.7", 4)).toBe("admitted")
      expect(admit("::ffff:c000:207", 5)).toBe("address")
      // Each of a client's requests from half its limit on shortens its connection's idle timeout.
      expect(shortened).toEqual([
        "/2001:db8:1:2::2/1000",
        "/2001:db8:1:2:ffff::3/1000",
        "/2001:db8:1:2::4/1000",
        "/192.0.2.7/2",
        "/192.0.2.7/3",
        "/::ffff:192.0.2.7/4"
      ])
    }).pipe(Effect.scoped, Effect.runPromise))

  it("counts every IPv4-mapped address as its IPv4 address and an IPv6 client by its /64", () => {
    expect(clientKeyOf("192.0.2.7")).toBe("192.0.2.7")
    expect(clientKeyOf("::ffff:192.0.2.7")).toBe("192.0.2.7")
    expect(clientKeyOf("::FFFF:c000:207")).toBe("192.0.2.7")
    expect(clientKeyOf("2001:db8:1:2:aaaa:bbbb:cccc:dddd")).toBe("2001:db8:1:2::/64")
    expect(clientKeyOf("2001:db8:1:2::1")).toBe(clientKeyOf("2001:db8:1:2:ffff::9"))
    expect(clientKeyOf("2001:db8:1:3::1")).not.toBe(clientKeyOf("2001:db8:1:2::1"))
    expect(clientKeyOf("2001:0DB8:0000:0000:0001::")).toBe("2001:db8::/64")
    expect(clientKeyOf("::1")).toBe("::/64")
  })

  it("gives a trusted proxy's address its own limit", async () => {
    const busy = await busyFrom(proxy, 5)
    try {
      const refused = await oneMoreFrom(proxy)
      expectEnvelope(refused.answer, 503, "SERVICE_UNAVAILABLE")
      expect(refused.answer.headers["connection"]).toBe("close")
    } finally {
      for (const connection of busy) connection.destroy()
    }
  })
})

describe("the process's descriptors (docs/operators.md, Operating it: Connections)", () => {
  /**
   * `use` on a server on `database` that may open at most 200 files and sockets (soft and hard: Bun
   * raises its soft limit to the hard one as it starts); then it must stop cleanly.
   */
  const withFewDescriptors = async (
    database: string,
    env: Record<string, string>,
    use: (server: RunningServer) => Promise<void>
  ) => {
    const server = await startServer(database, env, { under: ["prlimit", "--nofile=200:200"] })
    let code: number | null
    try {
      await use(server)
    } finally {
      code = await server.stop()
    }
    expect(code).toBe(0)
  }

  /** Until the server has served a request again, on a new connection. */
  const servedAgain = (server: RunningServer) =>
    eventually(
      "the server to answer on a new connection again",
      async () => (await call(server.url, { path: "/healthz" }).catch(() => undefined))?.status === 200,
      { timeoutMs: 30_000 }
    )

  it(
    "refuses a connection over the descriptor limit less the reserve with 503 while every counted one is busy",
    async () => {
      const database = tempDatabase()
      const key = await createKey(database)
      await withFewDescriptors(database, { CONNECTIONS_PER_ADDRESS: "1000" }, async (server) => {
        // 200 descriptors, half of them kept for the rest of the process under 512.
        expect(logLines(server.logs()).find((line) => line.message.startsWith("Listening on"))?.annotations)
          .toMatchObject({ connections: 100, connectionsPerAddress: 1000 })
        const body = JSON.stringify({ socialUsername: "@stalled" })
        const stalled: Array<RawConnection> = []
        try {
          // Each an activation whose body never comes whole: in flight until the body timeout.
          for (let i = 0; i < 100; i++) {
            const connection = await openConnection(server.url, "127.0.0.5")
            stalled.push(connection)
            connection.send(rawRequest("POST", activatePath(), [
              ["authorization", `Bearer ${key.apiKey}`],
              ["idempotency-key", uniqueKey()],
              ["content-type", "application/json"],
              ["content-length", String(body.length)]
            ]))
            connection.send(body.slice(0, 5))
          }
          // Until every stalled activation is in flight, a request may still be served.
          let refused: RawResponse | undefined
          await eventually("a request over the total to be refused", async () => {
            refused = responseOf(await exchange(server.url, rawRequest("GET", "/healthz", [])))
            return refused.status === 503
          }, { timeoutMs: bodyTimeoutMs })
          expectEnvelope(refused!, 503, "SERVICE_UNAVAILABLE")
          expect(refused!.json.message).toBe("The server holds as many connections as it can; retry in a moment.")
          expect(refused!.headers["connection"]).toBe("close")
        } finally {
          for (const connection of stalled) connection.destroy()
        }
        await servedAgain(server)
      })
    },
    60_000
  )

  it("survives running out of descriptors with metrics on, and serves again once they are free", async () => {
    await withFewDescriptors(tempDatabase(), { METRICS_PORT: "0" }, async (server) => {
      const silent: Array<RawConnection> = []
      try {
        // Connections that never send a request cannot be counted: they take every descriptor left.
        for (let i = 0; i < 250; i++) silent.push(await openConnection(server.url, "127.0.0.6"))
        await eventually("the failed metrics sample to be logged", () => {
          if (server.process.exitCode !== null) throw new Error(`the server exited:\n${server.logs()}`)
          return logLines(server.logs()).some((line) =>
            line.message === "the process's metrics could not be sampled; they keep their last values"
          )
        }, { timeoutMs: 30_000 })
      } finally {
        for (const connection of silent) connection.destroy()
      }
      await servedAgain(server)
      const metricsUrl = logLines(server.logs()).find((line) => line.message === "metrics")!.annotations.url
      expect((await fetch(metricsUrl)).status).toBe(200)
    })
  }, 90_000)
})
