import { spawn } from "bun"
import { dlopen, FFIType, ptr } from "bun:ffi"
import { closeSync, openSync } from "node:fs"
import { connect } from "node:net"
import { mainTs, root } from "./server.ts"

export const creatorId = "11111111-1111-4111-8111-111111111111"
export const campaignId = "22222222-2222-4222-8222-222222222222"
export const activatePath = `/v1/creators/${creatorId}/campaigns/${campaignId}/activate`
export const activateRoute = "/v1/creators/:creatorId/campaigns/:campaignId/activate"

export interface Answer {
  readonly status: number
  readonly headers: Headers
  readonly text: string
  readonly json: any
}

export interface Call {
  readonly method?: string
  readonly apiKey?: string
  readonly headers?: Record<string, string>
  readonly body?: string
}

const parseJson = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

/** One raw HTTP exchange: status, headers and the body exactly as sent. */
export const request = async (url: string, { apiKey, body, headers = {}, method = "GET" }: Call = {}): Promise<Answer> => {
  const response = await fetch(url, {
    method,
    headers: { ...(apiKey === undefined ? {} : { authorization: `Bearer ${apiKey}` }), ...headers },
    ...(body === undefined ? {} : { body })
  })
  const text = await response.text()
  return { status: response.status, headers: response.headers, text, json: parseJson(text) }
}

export const activate = (base: string, apiKey: string, idempotencyKey: string, body: unknown = { socialUsername: "@jane" }) =>
  request(`${base}${activatePath}`, {
    method: "POST",
    apiKey,
    headers: { "idempotency-key": idempotencyKey, "content-type": "application/json" },
    body: JSON.stringify(body)
  })

/** Polls `check` until it holds: a bounded wait for something to happen, never a measurement. */
export const eventually = async (what: string, check: () => boolean | Promise<boolean>, timeoutMs = 15_000) => {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await Bun.sleep(25)
  }
}

const freePort = (): number => {
  const listener = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } })
  const { port } = listener
  listener.stop(true)
  return port
}

const accepts = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = connect(port, "127.0.0.1")
    socket.once("connect", () => {
      socket.destroy()
      resolve(true)
    })
    socket.once("error", () => resolve(false))
  })

/** Variables for a child process on top of this one's; `undefined` removes one. */
export type Environment = Readonly<Record<string, string | undefined>>

const environment = (overrides: Environment): Record<string, string> =>
  Object.fromEntries(
    Object.entries({ ...process.env, ...overrides }).filter((entry): entry is [string, string] => entry[1] !== undefined)
  )

export interface LaunchedServer {
  readonly url: string
  /** SIGTERM, then everything the process wrote, complete. */
  readonly stop: () => Promise<{ readonly code: number | null; readonly stdout: string; readonly stderr: string }>
}

/**
 * Like `startServer`, but ready once its port accepts connections rather than on the
 * "Listening" log line, so it works at any LOG_LEVEL; `stop` returns the whole output.
 */
export const launch = async (database: string, env: Environment = {}): Promise<LaunchedServer> => {
  const port = freePort()
  const proc = spawn(["bun", mainTs, "serve"], {
    cwd: root,
    env: environment({ HOST: "127.0.0.1", DATABASE_URL: database, LOG_LEVEL: "info", ...env, PORT: String(port) }),
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe"
  })
  const stdout = new Response(proc.stdout).text()
  const stderr = new Response(proc.stderr).text()
  let exited = false
  void proc.exited.then(() => (exited = true))
  try {
    await eventually("the server to listen", async () => {
      if (exited) throw new Error(`server exited with ${proc.exitCode}:\n${await stderr}`)
      return accepts(port)
    })
  } catch (error) {
    proc.kill("SIGKILL")
    throw error
  }
  return {
    url: `http://127.0.0.1:${port}`,
    stop: async () => {
      proc.kill("SIGTERM")
      const code = await proc.exited
      return { code, stdout: await stdout, stderr: await stderr }
    }
  }
}

/** Runs `use` against a launched server, then stops it: its result and the server's whole output. */
export const session = async <A>(database: string, env: Environment, use: (url: string) => Promise<A>) => {
  const server = await launch(database, env)
  let result: A
  try {
    result = await use(server.url)
  } catch (error) {
    await server.stop()
    throw error
  }
  return { result, ...(await server.stop()) }
}

/**
 * Runs the command line like `runCli`, but stops it with SIGTERM after `timeoutMs`: a `serve`
 * that should have refused its configuration must not keep running (on loopback only).
 */
export const runBounded = async (args: ReadonlyArray<string>, env: Environment, timeoutMs = 10_000) => {
  const proc = spawn(["bun", mainTs, ...args], {
    cwd: root,
    env: environment({ HOST: "127.0.0.1", PORT: "0", ...env }),
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe"
  })
  let timedOut = false
  const timer = setTimeout(() => {
    timedOut = true
    proc.kill("SIGTERM")
  }, timeoutMs)
  const [stdout, stderr, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited
  ])
  clearTimeout(timer)
  return { stdout, stderr, code, timedOut }
}

/** Every stderr line as JSON; a line that is not JSON fails the parse, as it should. */
export const logLines = (stderr: string): Array<Record<string, any>> =>
  stderr.split("\n").filter((line) => line.trim() !== "").map((line) => JSON.parse(line))

export interface AccessLogEntry {
  readonly method: string
  readonly route: string
  readonly status: number
  readonly durationMs: number
  readonly keyId: string | null
  readonly brandId: string | null
  readonly requestId: string
}

export const accessLog = (stderr: string): Array<AccessLogEntry> =>
  logLines(stderr).filter((line) => line.message === "request").map((line) => line.annotations)

export interface OtlpSpan {
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId?: string
  readonly name: string
  readonly attributes: ReadonlyArray<{ readonly key: string; readonly value: Record<string, unknown> }>
}

export const spanAttribute = (span: OtlpSpan, key: string): unknown => {
  const value = span.attributes.find((attribute) => attribute.key === key)?.value
  return value === undefined ? undefined : Object.values(value)[0]
}

export type OtlpCollector = ReturnType<typeof otlpCollector>

/** An OTLP/HTTP collector on loopback that keeps every JSON body POSTed to /v1/traces. */
export const otlpCollector = (port = 0) => {
  const received: Array<{ readonly path: string; readonly body: any }> = []
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port,
    fetch: async (req) => {
      received.push({ path: new URL(req.url).pathname, body: await req.json() })
      return Response.json({})
    }
  })
  return {
    url: `http://127.0.0.1:${server.port}`,
    received,
    resources: () => received.flatMap(({ body }) => body.resourceSpans.map((r: any) => r.resource)),
    spans: (): Array<OtlpSpan> =>
      received.flatMap(({ body }) => body.resourceSpans.flatMap((r: any) => r.scopeSpans.flatMap((s: any) => s.spans))),
    stop: () => server.stop(true)
  }
}

/**
 * Makes the server's database stop answering: in WAL mode a reader must take one of the
 * read locks in the `-shm` file, so holding all of them (bytes 120..127, SQLite's
 * WAL_WRITE_LOCK to WAL_READ_LOCK(4)) leaves every statement retrying until SQLITE_PROTOCOL.
 * bun:sqlite cannot take such a lock, hence fcntl(F_SETLK) through FFI (Linux, 64-bit
 * `struct flock`). A lock held by another SQLite connection of the server is refused.
 */
export const lockDatabase = (database: string): (() => void) => {
  if (process.platform !== "linux") throw new Error("lockDatabase needs Linux's struct flock")
  const libc = dlopen("libc.so.6", { fcntl: { args: [FFIType.i32, FFIType.i32, FFIType.ptr], returns: FFIType.i32 } })
  const F_SETLK = 6
  const F_WRLCK = 1
  const flock = new DataView(new ArrayBuffer(32))
  flock.setInt16(0, F_WRLCK, true)
  flock.setBigInt64(8, 120n, true)
  flock.setBigInt64(16, 8n, true)
  const fd = openSync(`${database}-shm`, "r+")
  if (libc.symbols.fcntl(fd, F_SETLK, ptr(flock.buffer)) !== 0) {
    closeSync(fd)
    libc.close()
    throw new Error("could not lock the database's shared memory")
  }
  return () => {
    closeSync(fd)
    libc.close()
  }
}
