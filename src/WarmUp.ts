import { Context, Effect, Layer } from "effect"
import { lstatSync, readdirSync, rmSync } from "node:fs"
import { join } from "node:path"

/**
 * Whether a new server is still warming up (README, Operating it: Start-up). From before it
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
        await round(socket, apiKey, next++)
        await new Promise((resolve) => setImmediate(resolve))
      }
    }
    await Promise.all(Array.from({ length: inFlight }, worker))
    return rounds
  })

export { brandId as warmUpBrand }

/** What names the warm-up's private directories in the temporary directory: then the pid of the server that made it. */
const directoryPrefix = "campaign-api-warm-up-"

/** The prefix of a new private directory for the warm-up of this process (mkdtemp adds six characters). */
export const warmUpDirectoryPrefix = (temporary: string) => join(temporary, `${directoryPrefix}${process.pid}-`)

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
