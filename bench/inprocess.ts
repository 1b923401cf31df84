/**
 * The service's request handling without the network: builds the real edge from the server's
 * layers in this process (`makeEdge`, what `Bun.serve` is given) and calls its `fetch` with 50 requests in
 * flight at a time. Per-request CPU time, steadier than wrk for comparing one change (BENCHMARKS.md
 * cites it as "in-process"). Pin it to one core:
 *
 *   taskset -c 1 bun bench/inprocess.ts whoami|fresh|replay|get|list [requests per round]   # ROUNDS=6
 *
 * With ALLOCATIONS=1, the bytes a request allocates instead: the same rounds in a child whose
 * JavaScriptCore logs each collection (BUN_JSC_logGC=1), the bytes allocated in the cycles that
 * ended between the rounds' first and last request added up (within one cycle's 8 to 22 MB of the
 * truth, under 2 % over the default 60,000 requests) and divided by the requests. Making the
 * client's `Request` is in the figure; alone it did not fill one cycle in 60,000 requests.
 */
import { BunContext } from "@effect/platform-bun"
import { Effect, Layer, ManagedRuntime, Option } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { activateBody, activatePath, brandId, readPaths, seedReads } from "./common.ts"

const scenario = process.argv[2] ?? "whoami"
const allocations = process.env["ALLOCATIONS"]

if (allocations === "1") {
  const child = Bun.spawnSync([process.execPath, import.meta.path, ...process.argv.slice(2)], {
    env: { ...process.env, ALLOCATIONS: "child", BUN_JSC_logGC: "1" },
    stdout: "inherit",
    stderr: "pipe"
  })
  if (!child.success) throw new Error(`the measuring child failed:\n${child.stderr.toString().slice(-2000)}`)
  // The cycles that ended between the marks: each says what was allocated in it.
  let measuring = false
  let requests = 0
  let bytes = 0
  for (const line of child.stderr.toString().split("\n")) {
    const begin = /^MARK begin (\d+)$/.exec(line)
    if (begin !== null) [measuring, requests] = [true, Number(begin[1])]
    else if (line === "MARK end") measuring = false
    else if (measuring) bytes += Number(/bytes allocated this cycle: (\d+)/.exec(line)?.[1] ?? 0)
  }
  console.log(
    `${scenario}: ${(bytes / requests / 1024).toFixed(1)} KB allocated per request (LOG_LEVEL=${
      process.env["LOG_LEVEL"] ?? "warn"
    })`
  )
  process.exit(0)
}
if (!["whoami", "fresh", "replay", "get", "list"].includes(scenario)) throw new Error(`unknown scenario ${scenario}`)
const perRound = Number(process.argv[3] ?? 10_000)
const rounds = Number(process.env["ROUNDS"] ?? 6)
const connections = 50

const workDir = mkdtempSync(join(tmpdir(), "campaign-api-inprocess-"))
process.on("exit", () => rmSync(workDir, { recursive: true, force: true }))
process.env["DATABASE_URL"] = join(workDir, "db.sqlite")
process.env["PORT"] = "0"
process.env["LOG_LEVEL"] ??= "warn"
process.env["RATE_LIMIT_MAX"] = "1000000000"
// Imported after the environment is set: the layers read it when they are built.
const { ApiKeys } = await import("../src/ApiKeys.ts")
const { EdgeLive, MiddlewareLive, ServicesLive } = await import("../src/App.ts")
const { KeysLive } = await import("../src/Cli/KeyStore.ts")
const { makeEdge } = await import("../src/Edge/Edge.ts")
const { LoggingLive } = await import("../src/Logging.ts")
const { MetricsOff } = await import("../src/Metrics.ts")
const { TracingLive } = await import("../src/Tracing.ts")

const { apiKey } = await Effect.runPromise(
  Effect.flatMap(ApiKeys, (keys) =>
    keys.create({
      // The brand of the records the reads ask for.
      brandId: brandId as never,
      scopes: ["campaigns:write"],
      name: Option.none(),
      expiresIn: Option.none()
    })).pipe(Effect.provide(KeysLive), Effect.provide(BunContext.layer))
)

// The reads' records, written straight into the database the key's creation made.
if (scenario === "get" || scenario === "list") seedReads(process.env["DATABASE_URL"])

// Wired as the server wires them: tracing and logging are set up first, so that the fibers the
// services fork (the group commit's) see tracing off too. Merged side by side, they saw it on
// and made a span for every service call in every batch (fresh activations: 281 Effect operations each, against 185).
// Metrics off, as the server's default.
const runtime = ManagedRuntime.make(
  ServicesLive.pipe(
    Layer.provideMerge(Layer.mergeAll(TracingLive, LoggingLive, MetricsOff)),
    Layer.provideMerge(BunContext.layer)
  )
)
const { fetch } = await runtime.runPromise(Effect.flatMap(EdgeLive, makeEdge).pipe(Effect.provide(MiddlewareLive)))

// Declared as a client over HTTP declares it: a Request made in process has no Content-Length,
// and the body reader would take the chunked path that wrk's requests never take.
const activateLength = String(Buffer.byteLength(activateBody))
let sequence = 0
const request = () =>
  scenario === "whoami" || scenario === "get" || scenario === "list"
    ? new Request(`http://localhost${scenario === "whoami" ? "/v1/whoami" : readPaths[scenario]}`, {
      headers: { authorization: `Bearer ${apiKey}` }
    })
    : new Request(`http://localhost${activatePath}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${apiKey}`,
        "content-type": "application/json",
        "content-length": activateLength,
        "idempotency-key": scenario === "replay" ? "replayed" : `fresh-${++sequence}`
      },
      body: activateBody
    })

const round = async (requests: number) => {
  let started = 0
  let failed = 0
  const connection = async () => {
    while (started++ < requests) {
      const response = await fetch(request())
      await response.arrayBuffer()
      if (response.status !== 200) failed++
    }
  }
  const begin = performance.now()
  await Promise.all(Array.from({ length: connections }, connection))
  if (failed > 0) throw new Error(`${failed} responses were not 200`)
  return ((performance.now() - begin) * 1000) / requests
}

if (allocations === "child") {
  await round(Math.min(perRound, 5_000))
  const measured = perRound * rounds
  Bun.gc(true)
  process.stderr.write(`MARK begin ${measured}\n`)
  await round(measured)
  process.stderr.write("MARK end\n")
  process.exit(0)
}

await round(Math.min(perRound, 5_000))
const micros: Array<number> = []
for (let i = 0; i < rounds; i++) micros.push(await round(perRound))
micros.sort((a, b) => a - b)
console.log(
  `${scenario}: min ${micros[0]!.toFixed(1)} µs, median ${micros[micros.length >> 1]!.toFixed(1)} µs per request ` +
    `(${rounds} rounds of ${perRound}, ${connections} in flight)`
)
process.exit(0)
