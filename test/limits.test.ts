import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { bodyTimeoutMs } from "../src/Domain/JsonBody.ts"
import {
  activate,
  activatePath,
  endlessBody,
  exchange,
  type HeaderLines,
  openConnection,
  type RawOutcome,
  rawRequest,
  responseOf,
  uniqueKey,
  whoami
} from "./support/client.ts"
import { expectClientAnswer, expectEnvelope } from "./support/contract.ts"
import { stateDeadlineMs } from "./support/deadlines.ts"
import { type InProcessServer, serveInProcess } from "./support/inProcess.ts"
import { type CreatedTestKey, createKey, tempDatabase } from "./support/server.ts"

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
