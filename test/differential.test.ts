/**
 * The same App layers served twice (docs/contributing.md, Tests; Layout: the request path): by HttpApiBuilder's
 * own web handler and by the edge, each on a database of its own, with ids and secrets from a
 * predictable source and a clock that stands still, so that both can answer every request alike.
 * Every request goes to both, in the same order. Where the layers decide the answer (a route
 * spelled as declared, a body within the limits), status, headers and body are the same, the body
 * byte for byte. Where the edge answers itself on purpose (docs/contributing.md, Layout: what the edge adds), the
 * library's answer goes through one adapter on its side, its API middleware, and status and code
 * are compared where the library has an equivalent.
 */
import { HttpApiBuilder, HttpServer } from "@effect/platform"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import {
  Arbitrary,
  Clock,
  ConfigProvider,
  type Context,
  Duration,
  Effect,
  Exit,
  FastCheck as fc,
  Layer,
  Logger,
  LogLevel,
  Option,
  Scope
} from "effect"
import { ApiKeys } from "../src/ApiKeys.ts"
import { ApiLive, EdgeLive, MiddlewareLive, servicesWith } from "../src/App.ts"
import { ActivateRequest, AnalyticsQuery, ListActivationsQuery } from "../src/Domain/Activation.ts"
import { type BrandId, Scope as KeyScope } from "../src/Domain/ApiKey.ts"
import { NotFound, ValidationError } from "../src/Domain/Errors.ts"
import { makeEdge } from "../src/Edge/Edge.ts"
import { Ids } from "../src/Ids.ts"
import { type Metrics, MetricsOff } from "../src/Metrics.ts"
import { backends } from "./support/backends.ts"
import { declaredOperations, samplePath } from "./support/declared.ts"

/** 26 November 2026, 10:00 UTC, for ever: no rate limit refills, no key expires, every record the same time. */
const now = Date.UTC(2026, 10, 26, 10)
const real = Clock.make()
const standingClock: Clock.Clock = {
  [Clock.ClockTypeId]: Clock.ClockTypeId,
  unsafeCurrentTimeMillis: () => now,
  unsafeCurrentTimeNanos: () => BigInt(now) * 1_000_000n,
  currentTimeMillis: Effect.succeed(now),
  currentTimeNanos: Effect.succeed(BigInt(now) * 1_000_000n),
  // Waits are real: the key generation's poll still runs.
  sleep: real.sleep
}

/** Ids and secrets from a counter: two instances asked in the same order hand out the same ones. */
const predictableIds = () => {
  let uuids = 0
  let bytes = 0
  return Layer.succeed(Ids, {
    uuid: Effect.sync(() => `0190a1b2-c3d4-7e5f-8a6b-${(++uuids).toString(16).padStart(12, "0")}`),
    randomBytes: (size) =>
      Effect.sync(() => {
        bytes++
        return Uint8Array.from({ length: size }, (_, i) => (bytes * 131 + i * 31 + 7) % 256)
      })
  })
}

/** What the library's own decoding says of a request, as the adapter renders it: compared by status and code. */
const libraryDecoding = "(the library's decoding) "

/**
 * The library's side of the adapter, its API middleware: its own answers for what the edge answers
 * itself, as the envelope with the code the edge uses. A route it has no handler for is its
 * `RouteNotFound` (an empty 404); a request its schemas refuse is its `HttpApiDecodeError`.
 */
const Adapter = HttpApiBuilder.middleware((app) =>
  app.pipe(
    Effect.catchAll((error: unknown) => {
      const tag = typeof error === "object" && error !== null && "_tag" in error ? error._tag : undefined
      if (tag === "RouteNotFound") return Effect.fail(new NotFound({ message: `${libraryDecoding}no route` }))
      if (tag === "HttpApiDecodeError") {
        return Effect.fail(
          new ValidationError({ message: `${libraryDecoding}${(error as { message: string }).message}` })
        )
      }
      return Effect.fail(error)
    })
  ) as never
)

type Services = Layer.Layer.Success<ReturnType<typeof servicesWith>> | Metrics

interface Instance {
  readonly context: Context.Context<Services>
  readonly scope: Scope.CloseableScope
  readonly config: ConfigProvider.ConfigProvider
}

const instance = async (database: string): Promise<Instance> => {
  const config = ConfigProvider.fromMap(
    new Map([["DATABASE_URL", database], ["RATE_LIMIT_MAX", "1000000"], ["PORT", "0"], ["DOCS_ENABLED", "false"]])
  )
  const scope = Effect.runSync(Scope.make())
  const context = await Layer.buildWithScope(servicesWith(predictableIds()).pipe(Layer.provideMerge(MetricsOff)), scope)
    .pipe(
      Effect.withClock(standingClock),
      Effect.withConfigProvider(config),
      Logger.withMinimumLogLevel(LogLevel.None),
      Effect.runPromise
    )
  return { context, scope, config }
}

/** A request and how its answer is compared. */
interface Probe {
  readonly name: string
  readonly request: () => Request
  /**
   * Answered by the edge itself: `equivalent`, the library answers with the same status and code
   * through the adapter; `none`, the library has no equivalent (and `expected` is the edge's).
   */
  readonly own?: { readonly library: "equivalent" | "none"; readonly expected: readonly [number, string] }
}

interface Seen {
  readonly status: number
  readonly headers: Record<string, string>
  readonly body: string
}

/** Every header but those the edge adds to every answer of its own, the date and the body's length. */
const ownHeaders = new Set(["date", "x-request-id", "x-content-type-options", "content-length", "connection"])

const seen = async (response: Response | Promise<Response>): Promise<Seen> => {
  const answered = await response
  const headers: Record<string, string> = {}
  answered.headers.forEach((value, name) => {
    if (!ownHeaders.has(name)) headers[name] = value
  })
  return { status: answered.status, headers, body: await answered.text() }
}

const codeOf = (body: string): string | undefined => {
  try {
    return (JSON.parse(body) as { code?: string }).code
  } catch {
    return undefined
  }
}

const base = "http://localhost"
const json = { "content-type": "application/json" }

describe.each(backends)("HttpApiBuilder's server and the edge on $name", (backend) => {
  let library: Instance
  let edgeInstance: Instance
  let libraryFetch: (request: Request) => Promise<Response>
  let disposeLibrary: () => Promise<void>
  let edgeFetch: (request: Request) => Response | Promise<Response>
  const keys: Record<string, string> = {}
  const brand = "0b6f8c1e-4f5a-4c2b-9d7e-1a2b3c4d5e6f" as BrandId
  const otherBrand = "7c1f0a2e-9b3d-4e5f-8a6b-1c2d3e4f5a6b" as BrandId

  beforeAll(async () => {
    library = await instance(await backend.database())
    edgeInstance = await instance(await backend.database())
    const { dispose, handler } = HttpApiBuilder.toWebHandler(
      Layer.mergeAll(ApiLive, HttpServer.layerContext).pipe(
        Layer.provide(Adapter),
        Layer.provide(Layer.succeedContext(library.context)),
        Layer.provideMerge(Layer.setClock(standingClock)),
        Layer.provide(Layer.setConfigProvider(library.config)),
        Layer.provide(Logger.minimumLogLevel(LogLevel.None))
      )
    )
    libraryFetch = (request) => handler(request)
    disposeLibrary = dispose
    edgeFetch = await Effect.flatMap(EdgeLive, makeEdge).pipe(
      Effect.provide(MiddlewareLive),
      Effect.provide(edgeInstance.context),
      Effect.withClock(standingClock),
      Effect.withConfigProvider(edgeInstance.config),
      Logger.withMinimumLogLevel(LogLevel.None),
      Effect.map(({ fetch }) => fetch),
      Effect.runPromise
    )
    // The same keys in both, made in the same order from the same ids, at the same standing time: an
    // expiry counted from a real clock read twice differed by a second when the two straddled one.
    const made: ReadonlyArray<
      readonly [
        string,
        BrandId,
        ReadonlyArray<KeyScope>,
        { readonly max: number; readonly windowSeconds: number } | null,
        number | null
      ]
    > = [
      ["writer", brand, ["campaigns:write"], null, null],
      ["reader", brand, ["campaigns:read"], null, null],
      ["analyst", brand, ["analytics:read"], null, null],
      ["everything", brand, KeyScope.literals, null, null],
      ["other", otherBrand, ["campaigns:write", "analytics:read"], null, null],
      ["limited", brand, ["campaigns:read"], { max: 3, windowSeconds: 60 }, null],
      ["ending", brand, ["campaigns:read"], null, 7],
      // For what the edge answers otherwise than the library: its rate limit then counts apart.
      ["apart", brand, ["campaigns:read"], null, null],
      // A key with each scope alone, for the probes every declared operation gets.
      ...KeyScope.literals.map((scope) => [`only ${scope}`, brand, [scope], null, null] as const)
    ]
    for (const { context } of [library, edgeInstance]) {
      for (const [name, brandId, scopes, rateLimit, days] of made) {
        const { apiKey } = await Effect.flatMap(ApiKeys, (apiKeys) =>
          apiKeys.create({
            brandId,
            scopes,
            name: Option.some(name),
            expiresIn: days === null ? Option.none() : Option.some(Duration.days(days)),
            rateLimit
          })).pipe(Effect.provide(context), Effect.withClock(standingClock), Effect.runPromise)
        if (keys[name] !== undefined && keys[name] !== apiKey) throw new Error("the two instances made different keys")
        keys[name] = apiKey
      }
    }
    await backend.afterKeyChange()
  })

  afterAll(async () => {
    await disposeLibrary?.()
    for (const made of [library, edgeInstance]) {
      if (made !== undefined) await Effect.runPromise(Scope.close(made.scope, Exit.void))
    }
  })

  /** Both answers to one request, the edge's first; the mismatches are collected, not thrown. */
  const both = async (probe: Probe) => {
    const edge = await seen(edgeFetch(probe.request()))
    const lib = await seen(libraryFetch(probe.request()))
    return { edge, library: lib }
  }

  /** What differs between the two answers, by the probe's rule; empty when they agree. */
  const differences = async (probe: Probe): Promise<Array<string>> => {
    const { edge, library: lib } = await both(probe)
    if (probe.own !== undefined) {
      const edgeSays = [edge.status, codeOf(edge.body)]
      const wrong: Array<string> = []
      if (edgeSays[0] !== probe.own.expected[0] || edgeSays[1] !== probe.own.expected[1]) {
        wrong.push(`${probe.name}: the edge answered ${edgeSays.join(" ")}, not ${probe.own.expected.join(" ")}`)
      }
      if (
        probe.own.library === "equivalent" && (lib.status !== edge.status || codeOf(lib.body) !== codeOf(edge.body))
      ) {
        wrong.push(
          `${probe.name}: the library answered ${lib.status} ${codeOf(lib.body)}, the edge ${edge.status} ${
            codeOf(edge.body)
          }`
        )
      }
      return wrong
    }
    if (lib.body.includes(libraryDecoding)) {
      return lib.status === edge.status && codeOf(lib.body) === codeOf(edge.body) &&
          codeOf(edge.body) === "VALIDATION_ERROR"
        ? []
        : [
          `${probe.name}: decoding refused it as ${lib.status} ${
            codeOf(lib.body)
          }, the edge answered ${edge.status} ${edge.body}`
        ]
    }
    return JSON.stringify(edge) === JSON.stringify(lib)
      ? []
      : [`${probe.name}:\n  edge    ${JSON.stringify(edge)}\n  library ${JSON.stringify(lib)}`]
  }

  const get = (path: string, key?: string, headers: Record<string, string> = {}) => () =>
    new Request(`${base}${path}`, {
      headers: { ...(key === undefined ? {} : { authorization: `Bearer ${keys[key]}` }), ...headers }
    })
  const post = (path: string, key: string | undefined, body: string, headers: Record<string, string> = json) => () =>
    new Request(`${base}${path}`, {
      method: "POST",
      headers: { ...(key === undefined ? {} : { authorization: `Bearer ${keys[key]}` }), ...headers },
      body
    })
  const creator = "5d2a7c3e-1b4f-4e6a-8c9d-0e1f2a3b4c5d"
  const campaign = "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d"
  const activatePath = (c = creator, k = campaign) => `/v1/creators/${c}/campaigns/${k}/activate`
  /** The ids the activations get, in order: the predictable source's. */
  const activationId = (n: number) => `0190a1b2-c3d4-7e5f-8a6b-${n.toString(16).padStart(12, "0")}`

  it("answer every endpoint and documented status alike, in the order of checks of docs/integrators.md", async () => {
    const body = JSON.stringify({ socialUsername: "@jane", plannedPostAt: "2026-12-01" })
    const keyed = (key: string) => ({ ...json, "idempotency-key": key })
    const probes: Array<Probe> = [
      // whoami: each key, every refusal, a key's own limit, a secret's end
      ...["writer", "reader", "analyst", "everything", "other", "ending"].map((key) => ({
        name: `whoami ${key}`,
        request: get("/v1/whoami", key)
      })),
      { name: "whoami without a key", request: get("/v1/whoami") },
      { name: "whoami Basic", request: get("/v1/whoami", undefined, { authorization: "Basic dXNlcjpwYXNz" }) },
      { name: "whoami two tokens", request: get("/v1/whoami", undefined, { authorization: "Bearer a b" }) },
      { name: "whoami bare Bearer", request: get("/v1/whoami", undefined, { authorization: "Bearer" }) },
      {
        name: "whoami scheme in another case",
        request: get("/v1/whoami", undefined, { authorization: `bEaReR ${"x"}` })
      },
      { name: "whoami malformed", request: get("/v1/whoami", undefined, { authorization: "Bearer not-a-key" }) },
      {
        name: "whoami unknown id",
        request: get("/v1/whoami", undefined, { authorization: `Bearer cak_zzzzzzzzzzzzzzzz_${"0".repeat(64)}` })
      },
      ...[1, 2, 3, 4].map((n) => ({ name: `whoami limited ${n}`, request: get("/v1/whoami", "limited") })),
      // activate: created, replayed (keys in another order), conflicts, every refusal in order
      { name: "activate", request: post(activatePath(), "writer", body, keyed("d-1")) },
      {
        name: "activate replayed",
        request: post(
          activatePath(),
          "writer",
          JSON.stringify({ plannedPostAt: "2026-12-01", socialUsername: "@jane" }),
          keyed("d-1")
        )
      },
      {
        name: "activate by another key of the brand, replayed",
        request: post(activatePath(), "everything", body, keyed("d-1"))
      },
      { name: "activate by another brand, its own", request: post(activatePath(), "other", body, keyed("d-1")) },
      {
        name: "activate conflict: another body",
        request: post(activatePath(), "writer", JSON.stringify({ socialUsername: "@joe" }), keyed("d-1"))
      },
      {
        name: "activate conflict: another path",
        request: post(activatePath(campaign, creator), "writer", body, keyed("d-1"))
      },
      { name: "activate quoted key", request: post(activatePath(), "writer", body, keyed(`"d-\\"2"`)) },
      {
        name: "activate without plannedPostAt",
        request: post(activatePath(), "writer", JSON.stringify({ socialUsername: "@x" }), keyed("d-3"))
      },
      {
        name: "activate plannedPostAt null",
        request: post(
          activatePath(),
          "writer",
          JSON.stringify({ socialUsername: "@x", plannedPostAt: null }),
          keyed("d-3")
        )
      },
      { name: "activate without a key", request: post(activatePath(), undefined, body, keyed("d-4")) },
      { name: "activate as a reader", request: post(activatePath(), "reader", body, keyed("d-4")) },
      { name: "activate without Idempotency-Key", request: post(activatePath(), "writer", body) },
      { name: "activate empty Idempotency-Key", request: post(activatePath(), "writer", body, keyed("")) },
      {
        name: "activate Idempotency-Key too long",
        request: post(activatePath(), "writer", body, keyed("k".repeat(256)))
      },
      {
        name: "activate text/plain",
        request: post(activatePath(), "writer", body, { "content-type": "text/plain", "idempotency-key": "d-5" })
      },
      { name: "activate no Content-Type", request: post(activatePath(), "writer", body, { "idempotency-key": "d-6" }) },
      {
        name: "activate over 16 KiB",
        request: post(
          activatePath(),
          "writer",
          JSON.stringify({ socialUsername: `@${"a".repeat(17 * 1024)}` }),
          keyed("d-7")
        )
      },
      { name: "activate malformed JSON", request: post(activatePath(), "writer", "{", keyed("d-8")) },
      { name: "activate empty body", request: post(activatePath(), "writer", "", keyed("d-8")) },
      {
        name: "activate rejected, then the key used again",
        request: post(activatePath(), "writer", body, keyed("d-8"))
      },
      { name: "activate a JSON array", request: post(activatePath(), "writer", "[]", keyed("d-9")) },
      {
        name: "activate without @",
        request: post(activatePath(), "writer", JSON.stringify({ socialUsername: "jane" }), keyed("d-9"))
      },
      {
        name: "activate unknown field",
        request: post(activatePath(), "writer", JSON.stringify({ socialUsername: "@j", extra: 1 }), keyed("d-9"))
      },
      {
        name: "activate plannedPostAt outside the window",
        request: post(
          activatePath(),
          "writer",
          JSON.stringify({ socialUsername: "@j", plannedPostAt: "2100-01-01" }),
          keyed("d-9")
        )
      },
      { name: "activate bad path id", request: post(activatePath("nope"), "writer", body, keyed("d-9")) },
      // the reads
      { name: "get", request: get(`/v1/activations/${activationId(1)}`, "reader") },
      { name: "get by a writer", request: get(`/v1/activations/${activationId(1)}`, "writer") },
      { name: "get in upper case", request: get(`/v1/activations/${activationId(1).toUpperCase()}`, "reader") },
      {
        name: "get not modified",
        request: get(`/v1/activations/${activationId(1)}`, "reader", { "if-none-match": "*" })
      },
      { name: "get another brand's", request: get(`/v1/activations/${activationId(1)}`, "other") },
      { name: "get none", request: get(`/v1/activations/${activationId(999)}`, "reader") },
      { name: "get as an analyst", request: get(`/v1/activations/${activationId(1)}`, "analyst") },
      { name: "get a bad id", request: get("/v1/activations/nope", "reader") },
      { name: "list", request: get("/v1/activations", "reader") },
      { name: "list a page of 1, with its Link", request: get("/v1/activations?limit=1", "reader") },
      {
        name: "list after a cursor",
        request: get(`/v1/activations?limit=1&startingAfter=${activationId(3)}`, "reader")
      },
      {
        name: "list by creator and campaign",
        request: get(`/v1/activations?creatorId=${creator.toUpperCase()}&campaignId=${campaign}`, "reader")
      },
      { name: "list limit 0", request: get("/v1/activations?limit=0", "reader") },
      { name: "list an unknown parameter", request: get("/v1/activations?sort=asc", "reader") },
      {
        name: "list a parameter twice",
        request: get(`/v1/activations?creatorId=${creator}&creatorId=${campaign}`, "reader")
      },
      { name: "analytics", request: get(`/v1/campaigns/${campaign}/analytics`, "analyst") },
      {
        name: "analytics in a range",
        request: get(`/v1/campaigns/${campaign}/analytics?from=2026-11-26&to=2026-11-26`, "analyst")
      },
      {
        name: "analytics from after to",
        request: get(`/v1/campaigns/${campaign}/analytics?from=2026-12-02&to=2026-12-01`, "analyst")
      },
      { name: "analytics not a date", request: get(`/v1/campaigns/${campaign}/analytics?from=2026-02-30`, "analyst") },
      { name: "analytics as a reader", request: get(`/v1/campaigns/${campaign}/analytics`, "reader") },
      { name: "analytics of another brand", request: get(`/v1/campaigns/${campaign}/analytics`, "other") },
      { name: "index", request: get("/") },
      { name: "the OpenAPI document", request: get("/openapi.json") },
      { name: "the OpenAPI document gzipped", request: get("/openapi.json", undefined, { "accept-encoding": "gzip" }) },
      {
        name: "the OpenAPI document not modified",
        request: get("/openapi.json", undefined, { "if-none-match": "*" })
      },
      {
        name: "activate gzipped",
        request: post(activatePath(), "writer", body, { ...keyed("d-10"), "content-encoding": "gzip" })
      },
      {
        name: "activate in Latin-1",
        request: post(activatePath(), "writer", body, {
          "content-type": "application/json; charset=iso-8859-1",
          "idempotency-key": "d-10"
        })
      },
      {
        name: "activate after a BOM",
        request: post(activatePath(), "writer", new TextEncoder().encode(`\ufeff${body}`) as never, keyed("d-11"))
      },
      {
        name: "a Host given twice",
        request: get("/v1/whoami", "apart", { host: "a, b" }),
        own: { library: "none", expected: [400, "VALIDATION_ERROR"] }
      },
      { name: "alive", request: get("/healthz") },
      { name: "ready", request: get("/readyz") },
      // what the edge answers itself
      { name: "no such route", request: get("/v1/nope"), own: { library: "equivalent", expected: [404, "NOT_FOUND"] } },
      {
        name: "another method",
        request: post("/v1/whoami", undefined, "{}"),
        own: { library: "none", expected: [405, "METHOD_NOT_ALLOWED"] }
      },
      {
        name: "another letter case",
        request: get("/V1/WHOAMI", "apart"),
        own: { library: "none", expected: [404, "NOT_FOUND"] }
      },
      {
        name: "a query on whoami",
        request: get("/v1/whoami?verbose=1", "apart"),
        own: { library: "none", expected: [400, "VALIDATION_ERROR"] }
      }
    ]
    const found: Array<string> = []
    for (const probe of probes) found.push(...(await differences(probe)))
    expect(found).toEqual([])
  })

  it("answer every declared operation alike without a key, with each scope alone, with every scope, with an id that is none and with a parameter it does not take", async () => {
    const keyNames = [undefined, "everything", ...KeyScope.literals.map((scope) => `only ${scope}`)]
    const probes = declaredOperations.flatMap((operation, n): Array<Probe> => {
      const path = samplePath(operation)
      const request = (at: string, key: string | undefined, i: number) =>
        operation.method === "get"
          ? get(at, key)
          : post(at, key, "{}", { ...json, "idempotency-key": `declared-${n}-${i}` })
      return [
        ...keyNames.map((key, i) => ({
          name: `${operation.operationId} ${key ?? "without a key"}`,
          request: request(path, key, i)
        })),
        ...(path === operation.path ? [] : [{
          name: `${operation.operationId} with an id that is none`,
          request: request(operation.path.replace(/:\w+/g, "nope"), "everything", keyNames.length)
        }]),
        // Without URL parameters of its own, the edge refuses any query itself (what the library
        // has no equivalent of, tested in the probes above and in http.test.ts).
        ...(operation.takesQuery ?
          [{
            name: `${operation.operationId} with a parameter it does not take`,
            request: request(`${path}?undeclared=1`, "everything", keyNames.length + 1)
          }] :
          [])
      ]
    })
    const found: Array<string> = []
    for (const probe of probes) found.push(...(await differences(probe)))
    expect(found).toEqual([])
  })

  it("answer 1,200 requests generated from the endpoints' schemas alike", async () => {
    const uuids = fc.constantFrom(creator, campaign, creator.toUpperCase(), "7c1f0a2e-9b3d-4e5f-8a6b-1c2d3e4f5a6b")
    const someKey = fc.constantFrom<string | undefined>(
      "writer",
      "reader",
      "analyst",
      "everything",
      "other",
      "ending",
      undefined
    )
    /** Mostly keys that may activate, so that most activations get past the key to their body and their Idempotency-Key. */
    const writers = fc.oneof({ weight: 5, arbitrary: fc.constantFrom("writer", "everything", "other") }, {
      weight: 1,
      arbitrary: someKey
    })
    const notJson = fc.oneof(fc.json(), fc.string({ maxLength: 30 }), fc.constant("{\"socialUsername\": \"@a\","))
    const payload = fc.oneof(
      { weight: 6, arbitrary: Arbitrary.make(ActivateRequest).map((request) => JSON.stringify(request)) },
      {
        weight: 2,
        arbitrary: fc.record({
          socialUsername: fc.string({ maxLength: 12 }),
          plannedPostAt: fc.oneof(fc.constant(null), fc.string({ maxLength: 12 }))
        }).map((r) => JSON.stringify(r))
      },
      { weight: 1, arbitrary: notJson }
    )
    const idempotencyKey = fc.oneof(
      { weight: 6, arbitrary: fc.integer({ min: 1, max: 40 }).map((n) => `g-${n}`) },
      { weight: 1, arbitrary: fc.string({ maxLength: 10 }) },
      { weight: 1, arbitrary: fc.constant(undefined) }
    )
    const query = (schema: typeof ListActivationsQuery | typeof AnalyticsQuery) =>
      fc.tuple(
        Arbitrary.make(schema as typeof ListActivationsQuery),
        fc.option(fc.constantFrom("x=1", "limit=0", "limit=abc", "from=2026-13-01", "creatorId=nope"), {
          nil: undefined
        })
      )
        .map(([params, extra]) => {
          const text = new URLSearchParams(
            Object.entries(params).filter((entry): entry is [string, string] => entry[1] !== undefined)
          ).toString()
          const all = [text, extra].filter((part) => part !== undefined && part !== "").join("&")
          return all === "" ? "" : `?${all}`
        })
    const probe: fc.Arbitrary<Probe> = fc.oneof(
      { weight: 1, arbitrary: someKey.map((key) => ({ name: `whoami ${key}`, request: get("/v1/whoami", key) })) },
      {
        weight: 5,
        arbitrary: fc.tuple(
          writers,
          uuids,
          uuids,
          idempotencyKey,
          payload,
          fc.constantFrom(json, {}, { "content-type": "application/json; charset=utf-8" })
        ).map(
          ([key, c, k, idempotency, body, headers]) => ({
            name: `activate ${key} ${c} ${k} ${idempotency} ${body}`,
            request: post(activatePath(c, k), key, body, {
              ...headers,
              ...(idempotency === undefined ? {} : { "idempotency-key": idempotency })
            })
          })
        )
      },
      {
        weight: 2,
        arbitrary: fc.tuple(
          someKey,
          fc.oneof(fc.integer({ min: 1, max: 60 }).map(activationId), fc.uuid(), fc.constant("nope"))
        ).map(([key, id]) => ({
          name: `get ${key} ${id}`,
          request: get(`/v1/activations/${id}`, key)
        }))
      },
      {
        weight: 2,
        arbitrary: fc.tuple(someKey, query(ListActivationsQuery)).map(([key, q]) => ({
          name: `list ${key} ${q}`,
          request: get(`/v1/activations${q}`, key)
        }))
      },
      {
        weight: 2,
        arbitrary: fc.tuple(someKey, uuids, query(AnalyticsQuery)).map(([key, k, q]) => ({
          name: `analytics ${key} ${k} ${q}`,
          request: get(`/v1/campaigns/${k}/analytics${q}`, key)
        }))
      },
      {
        weight: 1,
        arbitrary: fc.constantFrom("/healthz", "/readyz").map((path) => ({ name: path, request: get(path) }))
      }
    )
    const probes = fc.sample(probe, { numRuns: 1_200, seed: 20261126 })
    const found: Array<string> = []
    for (const generated of probes) found.push(...(await differences(generated)))
    expect(found).toEqual([])
  })
})
