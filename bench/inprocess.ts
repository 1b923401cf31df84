/**
 * The service's request handling without the network: builds the real edge from the server's
 * layers in this process (`makeEdge`, what `Bun.serve` is given) and calls its `fetch` with 50 requests in
 * flight at a time. Per-request CPU time, steadier than wrk for comparing one change (BENCHMARKS.md
 * cites it as "in-process"). Pin it to one core:
 *
 *   taskset -c 1 bun bench/inprocess.ts whoami|fresh|replay|get|list [requests per round]   # ROUNDS=6
 */
import { BunContext } from "@effect/platform-bun"
import { Effect, Layer, ManagedRuntime, Option } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { activateBody, activatePath, brandId, readPaths, seedReads } from "./common.ts"

const scenario = process.argv[2] ?? "whoami"
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
const { EdgeLive, KeysLive, MiddlewareLive, ServicesLive } = await import("../src/App.ts")
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

await round(Math.min(perRound, 5_000))
const micros: Array<number> = []
for (let i = 0; i < rounds; i++) micros.push(await round(perRound))
micros.sort((a, b) => a - b)
console.log(
  `${scenario}: min ${micros[0]!.toFixed(1)} µs, median ${micros[micros.length >> 1]!.toFixed(1)} µs per request ` +
    `(${rounds} rounds of ${perRound}, ${connections} in flight)`
)
process.exit(0)
