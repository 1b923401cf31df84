import { ConfigProvider, Context, Duration, Effect, FiberRef, HashSet, Layer, Option } from "effect"
import { lstatSync, mkdtempSync, readdirSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { ApiKeys } from "./ApiKeys.ts"
import { WarmUpConfig } from "./Config.ts"
import { type BrandId, Scope } from "./Domain/ApiKey.ts"
import { type AccessLogOutput, UnwrittenAccessLines } from "./Logging.ts"
import { type Metrics, MetricsOff } from "./Metrics.ts"

/**
 * Whether a new server is still warming up (docs/operators.md, Operating it: Start-up). From before it
 * listens until its request path has run on a private copy of the service, `/readyz` answers 503,
 * while every other request is served as always.
 */
export class Warming extends Context.Tag("Warming")<Warming, {
  readonly pending: () => boolean
  readonly begin: () => void
  readonly end: () => void
}>() {
  /** Not warming until told: a server that warms up says so before it listens. */
  static readonly Live = Layer.sync(Warming, () => {
    let pending = false
    return {
      pending: () => pending,
      begin: () => {
        pending = true
      },
      end: () => {
        pending = false
      }
    }
  })
}

/** How many times the warm-up sends each of its requests. */
export const warmUpRounds = 300

/**
 * Every this many rounds, the heap collected: the warm-up allocates fast, and left alone the heap
 * grew to its next collection's limit while it ran, which was the process's peak before any client
 * (VmHWM 118 MB against 95 MB with a collection every 15 rounds, and 93 against 85 MB idle after it:
 * bench/BENCHMARKS.md, As fast at the default log level). Each takes a few milliseconds, before
 * the server is ready.
 */
const collectEvery = 15

/** How many of its requests are in flight at once, so that its activations commit in groups as a server's do. */
const inFlight = 8

/** The private copy's ids: a brand, a creator and a campaign of no one. */
const brandId = "00000000-0000-4000-8000-000000000001"
const creatorId = "00000000-0000-4000-8000-000000000002"
const campaignId = "00000000-0000-4000-8000-000000000003"
const activatePath = `/v1/creators/${creatorId}/campaigns/${campaignId}/activate`
const activateBody = JSON.stringify({ socialUsername: "@warm.up", plannedPostAt: "2030-01-01" })

/** An answer read to its end, as a client reads it. */
const drained = async (response: Promise<Response>) => {
  const answer = await response
  await answer.arrayBuffer()
  return answer
}

/**
 * One round of what a server answers most: whoami, an activation and its replay, that activation
 * by id, a page of its campaign, its campaign's analytics, a refused key and an unknown path, each
 * sent over HTTP to the private copy's listener on the Unix socket `socket`.
 */
const round = async (socket: string, apiKey: string, n: number) => {
  const authorization = `Bearer ${apiKey}`
  const get = (path: string, headers: Record<string, string> = { authorization }) =>
    drained(fetch(`http://warm-up${path}`, { headers, unix: socket }))
  const activate = () =>
    fetch(`http://warm-up${activatePath}`, {
      method: "POST",
      headers: { authorization, "content-type": "application/json", "idempotency-key": `warm-up-${n}` },
      body: activateBody,
      unix: socket
    })
  await get("/v1/whoami")
  const { activation } = (await (await activate()).json()) as { readonly activation?: { readonly id: string } }
  await drained(activate())
  if (activation !== undefined) await get(`/v1/activations/${activation.id}`)
  await get(`/v1/activations?limit=20&campaignId=${campaignId}`)
  if (n % 10 === 0) await get(`/v1/campaigns/${campaignId}/analytics`)
  await get("/v1/whoami", { authorization: `Bearer cak_0000000000000000_${"0".repeat(64)}` })
  await get("/v1/nothing-here")
}

/**
 * The warm-up's requests to a private copy of the service listening on the Unix socket `socket`
 * and holding `apiKey`: `rounds` rounds, `inFlight` at a time, each round a turn of the event loop
 * of its own so that the server's clients are answered in between.
 */
export const warmUpRequests = (socket: string, apiKey: string, rounds: number = warmUpRounds) =>
  Effect.promise(async () => {
    let next = 0
    const worker = async () => {
      while (next < rounds) {
        const n = next++
        await round(socket, apiKey, n)
        if (n % collectEvery === collectEvery - 1) Bun.gc(true)
        await new Promise((resolve) => setImmediate(resolve))
      }
    }
    await Promise.all(Array.from({ length: inFlight }, worker))
    return rounds
  })

/** What names the warm-up's private directories in the temporary directory: then the pid of the server that made it. */
const directoryPrefix = "campaign-api-warm-up-"

const running = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    // EPERM: a process of another user has it, alive.
    return (error as NodeJS.ErrnoException).code === "EPERM"
  }
}

/**
 * Removes what an earlier warm-up left in `temporary` when its server was killed before it could
 * (a SIGKILL, say): the directories of this user whose name is the warm-up's and whose server is
 * no longer running, with their stale socket. Another running server's, another user's and
 * anything else there are left as they are.
 */
export const removeStaleWarmUps = (temporary: string) => {
  const uid = process.getuid?.()
  for (const name of readdirSync(temporary)) {
    const pid = name.startsWith(directoryPrefix) ? Number(name.slice(directoryPrefix.length).split("-")[0]) : Number.NaN
    if (!Number.isSafeInteger(pid) || pid <= 0 || pid === process.pid || running(pid)) continue
    const path = join(temporary, name)
    try {
      const stat = lstatSync(path)
      if (stat.isDirectory() && (uid === undefined || stat.uid === uid)) rmSync(path, { recursive: true, force: true })
    } catch {
      // Gone already, or not ours to remove: either way nothing to clean.
    }
  }
}

/**
 * The warm-up's private listener: a Unix socket in a directory of its own that only this user may
 * enter (mkdtemp makes it 0700, its name the warm-up's prefix and this process's pid), removed with
 * everything in it when the warm-up is done, and by the next start should the server be killed
 * before that (`removeStaleWarmUps`). No other user's process can reach the copy, and a fetch over
 * a Unix socket never goes through the proxy HTTP_PROXY names (Bun's fetch proxies loopback
 * addresses too).
 */
const privateSocket = Effect.acquireRelease(
  Effect.sync(() => {
    removeStaleWarmUps(tmpdir())
    return mkdtempSync(join(tmpdir(), `${directoryPrefix}${process.pid}-`))
  }),
  (directory) => Effect.sync(() => rmSync(directory, { recursive: true, force: true }))
).pipe(Effect.map((directory) => join(directory, "copy.sock")))

/**
 * A private copy of the service listening on the Unix socket it is given: the server's own layers
 * on a database of their own (the composition root's, `App.ts`), with its key store.
 */
export type Copy = (socket: string) => Layer.Layer<ApiKeys, unknown, Metrics | AccessLogOutput>

/**
 * The warm-up (docs/operators.md, Operating it: Start-up): the request path run on a private copy of the
 * service, the same layers on an in-memory database of their own (a fresh build: `Effect.provide`
 * memoizes nothing of the server's) behind a `Bun.serve` of their own on a private Unix socket, so
 * that its requests take the server's own path (Bun's router, the edge's handlers for each route)
 * with the requests Bun makes; with a key of its own holding every scope, metrics off, access lines
 * made and dropped, every other log line dropped and no span. Nothing of it reaches the server's
 * database, log, metrics, traces or the network; the copy, its listener and its socket are gone
 * when it is done.
 */
const warmUp = (copy: Copy) =>
  Effect.gen(function*() {
    const socket = yield* privateSocket
    const keys = Context.get(yield* Layer.build(copy(socket)), ApiKeys)
    const { apiKey } = yield* keys.create({
      brandId: brandId as BrandId,
      scopes: [...Scope.literals],
      name: Option.none(),
      expiresIn: Option.none()
    })
    return yield* warmUpRequests(socket, apiKey)
  }).pipe(
    Effect.scoped,
    Effect.provide(Layer.merge(MetricsOff, UnwrittenAccessLines)),
    Effect.withConfigProvider(ConfigProvider.fromMap(
      new Map([
        ["DATABASE_URL", ":memory:"],
        ["RATE_LIMIT_MAX", "1000000000"],
        ["SHUTDOWN_DELAY_SECONDS", "0"]
      ])
    )),
    Effect.locally(FiberRef.currentLoggers, HashSet.empty()),
    Effect.withTracerEnabled(false)
  )

const warmUpAfter = Duration.millis(50)

/** With WARM_UP on, readiness waits for the warm-up from before the server listens. */
export const WarmUpBegins = Layer.effectDiscard(Effect.gen(function*() {
  if (yield* WarmUpConfig) (yield* Warming).begin()
}))

/**
 * The warm-up on `copy`, from `warmUpAfter` after the server listens: a first request, often the
 * very moment the port opens, is answered before the copy is built (tens of milliseconds on the
 * event loop), and clients are answered between its rounds; readiness after.
 */
export const WarmUpRuns = (copy: Copy) =>
  Layer.scopedDiscard(Effect.gen(function*() {
    const warming = yield* Warming
    if (!warming.pending()) return
    yield* Effect.delay(warmUp(copy), warmUpAfter).pipe(
      // The copy, closed, is garbage: collected now, while no client is owed an answer, rather than
      // in a pause of the first seconds of traffic.
      Effect.zipLeft(Effect.sync(() => Bun.gc(true))),
      Effect.timed,
      Effect.flatMap(([took, rounds]) =>
        Effect.logInfo("warmed up", { rounds, milliseconds: Math.round(Duration.toMillis(took)) })
      ),
      // Whatever went wrong in the copy, the server itself is as it was: it is ready without the warm-up.
      Effect.catchAllCause((cause) => Effect.logWarning("the warm-up failed; ready without it", cause)),
      Effect.ensuring(Effect.sync(warming.end)),
      Effect.forkScoped
    )
  }))
