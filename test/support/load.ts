import { openConnection, type RawConnection, type RawOutcome, type RawResponse } from "./client.ts"
import { stateDeadlineMs } from "./deadlines.ts"

/** A copy of `items` in random order (Fisher-Yates). */
export const shuffle = <A>(items: ReadonlyArray<A>): Array<A> => {
  const copy = [...items]
  for (let i = copy.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1))
    ;[copy[i], copy[j]] = [copy[j]!, copy[i]!]
  }
  return copy
}

export const randomInt = (min: number, max: number) => min + Math.floor(Math.random() * (max - min + 1))

/** Polls `check` until it holds; a bounded wait for something to happen, never a measurement. */
export const eventually = async (
  what: string,
  check: () => boolean | Promise<boolean>,
  { intervalMs = 20, timeoutMs = stateDeadlineMs } = {}
): Promise<void> => {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await Bun.sleep(intervalMs)
  }
}

/**
 * Runs `loops` copies of `step` back to back until `stop()` is called; a step that throws ends its
 * loop, and what it threw is kept in `errors`. `done` resolves once every loop has ended.
 */
export const runLoops = (loops: number, step: (loop: number) => Promise<void>) => {
  let running = true
  const errors: Array<unknown> = []
  const done = Promise.all(
    Array.from({ length: loops }, async (_, loop) => {
      while (running) {
        try {
          await step(loop)
        } catch (error) {
          errors.push(error)
          return
        }
      }
    })
  )
  return {
    stop: () => {
      running = false
    },
    done,
    errors
  }
}

/** What `connectionLoad` saw: every request it sent and how each ended. */
export interface ConnectionLoadReport {
  readonly sent: number
  readonly answers: ReadonlyArray<RawResponse>
  /** Requests sent that got no answer: the connection closed, was reset, or hung. */
  readonly unanswered: ReadonlyArray<RawOutcome["_tag"]>
  /** Connections refused before any request was sent on them. */
  readonly refused: number
}

/**
 * Load as clients behind a load balancer make it: `connections` loops, each sending `request()`
 * on its connection, one at a time, opening a new one after an answer that says
 * `Connection: close`. Once `open()` is false (the balancer has taken the server out of rotation)
 * a loop opens no new connection, and a connection refused ends its loop; every request sent is
 * counted, with how it ended.
 */
export const connectionLoad = (
  url: string,
  connections: number,
  request: () => Uint8Array,
  open: () => boolean
): Promise<ConnectionLoadReport> => {
  let sent = 0
  let refused = 0
  const answers: Array<RawResponse> = []
  const unanswered: Array<RawOutcome["_tag"]> = []
  const loop = async () => {
    while (open()) {
      let connection: RawConnection
      try {
        connection = await openConnection(url)
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "ECONNREFUSED") throw error
        refused++
        return
      }
      for (;;) {
        sent++
        connection.send(request())
        const outcome = await connection.next()
        if (outcome._tag !== "Answered") {
          unanswered.push(outcome._tag)
          connection.destroy()
          break
        }
        answers.push(outcome.response)
        if (outcome.response.headers["connection"] === "close") {
          connection.destroy()
          break
        }
      }
    }
  }
  return Promise.all(Array.from({ length: connections }, loop)).then(() => ({ sent, answers, unanswered, refused }))
}

/**
 * Until the server listening at `url` has read every byte sent to it (the kernel's receive queues,
 * from `ss`) on exactly `connections` connections, or on the connections from the local ports
 * `from`: a request sent is then in the server's hands, the event a test waits for instead of a
 * fixed sleep.
 */
export const serverHasRead = (
  url: string,
  on: { readonly connections: number } | { readonly from: ReadonlyArray<number> }
) => {
  const port = new URL(url).port
  const filter = "from" in on ? ` and ( ${on.from.map((local) => `dport = :${local}`).join(" or ")} )` : ""
  const expected = "from" in on ? on.from.length : on.connections
  return eventually(`the server to read everything sent on ${expected} connections`, () => {
    const lines = Bun.spawnSync(["ss", "-Htn", "state", "established", `( sport = :${port} )${filter}`]).stdout
      .toString()
      .trim().split("\n").filter((line) => line.trim() !== "")
    return lines.length === expected && lines.every((line) => line.trim().split(/\s+/)[0] === "0")
  }, { intervalMs: 5 })
}
