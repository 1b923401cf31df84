/**
 * Metrics (docs/operators.md, Operating it: Metrics): each counter moves by exactly what a test did, on both
 * backends, against a server built in process; no client-chosen value adds a series; the text is
 * what `promtool check metrics` accepts; and a real Prometheus scrapes the binary's listener and
 * answers a PromQL query with the requests made.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { spawn, type Subprocess } from "bun"
import { existsSync, mkdtempSync, readFileSync, renameSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { render } from "../src/Metrics/Exposition.ts"
import { makeRecorder } from "../src/Metrics/Series.ts"
import { backends } from "./support/backends.ts"
import { activate, activatePath, activateRoute, call, uniqueKey, whoami } from "./support/client.ts"
import { type InProcessServer, serveInProcess } from "./support/inProcess.ts"
import { eventually } from "./support/load.ts"
import { createKey, freePort, root, type RunningServer, startServer, tempDatabase, testTmp } from "./support/server.ts"

const prometheusPath = "/usr/bin/prometheus"
const promtoolPath = "/usr/bin/promtool"

/** Outside CI a missing binary skips its test with a printed line; in CI it fails the test. */
const requiredTool = (path: string, what: string): boolean => {
  if (existsSync(path)) return true
  const missing = `${what} is not installed at ${path} (Debian: apt-get install -y prometheus)`
  if (process.env.CI) throw new Error(`${missing}: CI must run this test`)
  console.log(`skipped: ${missing}`)
  return false
}

const scrape = async (metricsUrl: string): Promise<string> => {
  const response = await fetch(metricsUrl)
  expect(response.status).toBe(200)
  expect(response.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8")
  return response.text()
}

/** Every sample of the text, by its series (name and labels as written). */
const samples = (text: string): Map<string, number> =>
  new Map(
    text.split("\n").filter((line) => line !== "" && !line.startsWith("#")).map((line) => {
      const at = line.lastIndexOf(" ")
      return [line.slice(0, at), Number(line.slice(at + 1))] as const
    })
  )

const requestCount = (method: string, route: string, status: number) =>
  `http_server_request_duration_seconds_count{http_request_method="${method}",http_route="${route}",http_response_status_code="${status}"}`

/** What `act` moved each series by: the samples after it less those before (0 where absent). */
const delta = async (metricsUrl: string, act: () => Promise<unknown>) => {
  const before = samples(await scrape(metricsUrl))
  await act()
  const after = samples(await scrape(metricsUrl))
  return (series: string) => (after.get(series) ?? 0) - (before.get(series) ?? 0)
}

const promtool = (text: string) => {
  const checked = Bun.spawnSync([promtoolPath, "check", "metrics"], { stdin: new TextEncoder().encode(text) })
  return { exitCode: checked.exitCode, output: `${checked.stdout}${checked.stderr}`.trim() }
}

describe.each(backends)("metrics on $name", (backend) => {
  let server: InProcessServer
  let metricsUrl: string
  let database: string

  beforeAll(async () => {
    database = await backend.database()
    const metricsPort = freePort()
    metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`
    server = await serveInProcess(database, { ...backend.env, METRICS_PORT: String(metricsPort), RATE_LIMIT_MAX: "5" })
  })
  afterAll(async () => {
    await server?.stop()
  })

  it("serves GET /metrics on its own port only: the API's port has no such route", async () => {
    expect((await call(server.url, { path: "/metrics" })).status).toBe(404)
    expect((await fetch(metricsUrl.replace("/metrics", "/other"))).status).toBe(404)
    const text = await scrape(metricsUrl)
    for (const name of ["process_resident_memory_bytes", "process_cpu_seconds_total", "process_start_time_seconds"]) {
      expect(samples(text).get(name)).toBeGreaterThan(0)
    }
    // A timer that ran on time is a lag of 0.
    expect(samples(text).get("nodejs_eventloop_lag_max_seconds")).toBeGreaterThanOrEqual(0)
  })

  it("counts each whoami once, under its route pattern, method and status", async () => {
    const { apiKey } = await createKey(database)
    const moved = await delta(metricsUrl, async () => {
      for (let i = 0; i < 3; i++) expect((await whoami(server.url, apiKey)).status).toBe(200)
    })
    expect(moved(requestCount("GET", "/v1/whoami", 200))).toBe(3)
    expect(moved("api_unauthorized_total")).toBe(0)
  })

  it("counts fresh activations, replays and conflicts, each by exactly what was done", async () => {
    const { apiKey } = await createKey(database)
    const first = uniqueKey()
    const moved = await delta(metricsUrl, async () => {
      expect((await activate(server.url, { apiKey, key: first })).status).toBe(200)
      expect((await activate(server.url, { apiKey, key: uniqueKey() })).status).toBe(200)
      const replay = await activate(server.url, { apiKey, key: first })
      expect(replay.headers.get("idempotent-replayed")).toBe("true")
      const conflict = await activate(server.url, { apiKey, key: first, body: { socialUsername: "@someone-else" } })
      expect(conflict.json.code).toBe("IDEMPOTENCY_CONFLICT")
    })
    expect(moved("api_activations_created_total")).toBe(2)
    expect(moved("api_idempotent_replays_total")).toBe(1)
    expect(moved("api_idempotency_conflicts_total")).toBe(1)
    expect(moved(requestCount("POST", activateRoute, 200))).toBe(3)
    expect(moved(requestCount("POST", activateRoute, 409))).toBe(1)
    // Each fresh activation's writes were in one commit; the replay and the conflict wrote nothing.
    expect(moved("db_commit_batch_size_sum")).toBe(2)
    expect(moved("db_commit_batch_size_count")).toBeGreaterThanOrEqual(1)
  })

  it("counts 401s and 429s", async () => {
    const { apiKey } = await createKey(database)
    const moved = await delta(metricsUrl, async () => {
      expect((await call(server.url, { path: "/v1/whoami" })).status).toBe(401)
      expect((await whoami(server.url, "cak_notakey_0000")).status).toBe(401)
      // RATE_LIMIT_MAX is 5 for this server.
      for (let i = 0; i < 5; i++) expect((await whoami(server.url, apiKey)).status).toBe(200)
      for (let i = 0; i < 3; i++) expect((await whoami(server.url, apiKey)).status).toBe(429)
    })
    expect(moved("api_unauthorized_total")).toBe(2)
    expect(moved("api_rate_limited_total")).toBe(3)
    expect(moved(requestCount("GET", "/v1/whoami", 401))).toBe(2)
    expect(moved(requestCount("GET", "/v1/whoami", 429))).toBe(3)
  })

  it("writes text that promtool check metrics accepts", async () => {
    if (!requiredTool(promtoolPath, "promtool")) return
    expect(promtool(await scrape(metricsUrl))).toEqual({ exitCode: 0, output: "" })
  })
})

describe("the alerts of docs/operators.md, Metrics", () => {
  it("are rules promtool check rules accepts, on the series the service writes", () => {
    if (!requiredTool(promtoolPath, "promtool")) return
    const operators = readFileSync(join(root, "docs/operators.md"), "utf8")
    const rules = /```yaml\n# campaign-api\.rules\.yml\n([\s\S]*?)```/.exec(operators)?.[1]
    expect(rules).toBeDefined()
    for (
      const name of [
        "http_server_request_duration_seconds_count",
        "http_server_request_duration_seconds_bucket",
        "db_unavailable_total"
      ]
    ) {
      expect(rules).toContain(name)
    }
    const file = join(mkdtempSync(join(testTmp(), "campaign-api-rules-")), "campaign-api.rules.yml")
    writeFileSync(file, rules!)
    const checked = Bun.spawnSync([promtoolPath, "check", "rules", file])
    expect(`${checked.stdout}${checked.stderr}`).toContain("SUCCESS: 3 rules found")
    expect(checked.exitCode).toBe(0)
  })
})

describe("metrics' labels", () => {
  let server: InProcessServer
  let metricsUrl: string
  let database: string

  beforeAll(async () => {
    database = tempDatabase()
    const metricsPort = freePort()
    metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`
    server = await serveInProcess(database, { METRICS_PORT: String(metricsPort), RATE_LIMIT_MAX: "1000000" })
  })
  afterAll(async () => {
    await server?.stop()
  })

  const token = () => crypto.randomUUID().replace(/-/g, "")

  /** Requests whose path, key, id or Idempotency-Key is new every time, and nothing else. */
  const shapes: ReadonlyArray<(apiKey: string, id: string) => Promise<unknown>> = [
    (_, id) => call(server.url, { path: `/${id}/${id}` }),
    (_, id) => call(server.url, { path: `/v1/activations/${id}` }),
    (_, id) => whoami(server.url, `cak_${id.slice(0, 16)}_${id}${id}`),
    (apiKey) => call(server.url, { path: `/v1/activations/${crypto.randomUUID()}`, apiKey }),
    (_, id) =>
      activate(server.url, {
        apiKey: undefined,
        key: id,
        path: activatePath(crypto.randomUUID(), crypto.randomUUID())
      }),
    (apiKey, id) => call(server.url, { path: `/v1/whoami?${id}=${id}`, apiKey, headers: { "x-request-id": id } })
  ]

  it("10,000 requests with random paths, keys and ids leave the number of series unchanged", async () => {
    const { apiKey } = await createKey(database)
    // Once each: every series these shapes can reach exists from here on.
    for (const shape of shapes) await shape(apiKey, token())
    const before = await scrape(metricsUrl)
    const seen: Array<string> = []
    for (let sent = 0; sent < 10_000; sent += 50) {
      await Promise.all(Array.from({ length: 50 }, (_, i) => {
        const id = token()
        if (i === 0) seen.push(id)
        return shapes[(sent + i) % shapes.length]!(apiKey, id)
      }))
    }
    const after = await scrape(metricsUrl)
    expect([...samples(after).keys()]).toEqual([...samples(before).keys()])
    const unknown = requestCount("GET", "(unknown)", 404)
    expect(samples(after).get(unknown)! - samples(before).get(unknown)!).toBe(Math.ceil(10_000 / shapes.length))
    for (const id of seen) expect(after).not.toContain(id)
  })

  it("names a method the API does not know _OTHER", () => {
    const recorder = makeRecorder()
    recorder.answered("PROPFIND", "(unknown)", 404, 0.001)
    expect(render()).toContain(requestCount("_OTHER", "(unknown)", 404))
    expect(render()).not.toContain("PROPFIND")
  })
})

describe("the database's unavailability in metrics", () => {
  it("counts each request the database could not serve, readiness's own check included, and nothing once it is back", async () => {
    const database = tempDatabase()
    const metricsPort = freePort()
    const metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`
    const server = await serveInProcess(database, { METRICS_PORT: String(metricsPort) })
    try {
      const { apiKey } = await createKey(database)
      const moved = `${database}.moved`
      const away = await delta(metricsUrl, async () => {
        // The file gone from its path: no request may be answered from what may be stale.
        renameSync(database, moved)
        try {
          expect((await activate(server.url, { apiKey, key: uniqueKey() })).status).toBe(503)
          expect((await call(server.url, { path: "/readyz" })).status).toBe(503)
        } finally {
          renameSync(moved, database)
        }
      })
      expect(away("db_unavailable_total")).toBe(2)
      expect(away(requestCount("GET", "/readyz", 503))).toBe(1)
      const back = await delta(metricsUrl, async () => {
        expect((await activate(server.url, { apiKey, key: uniqueKey() })).status).toBe(200)
        // Readiness's last answer serves it for up to a second (docs/operators.md, Operating it: Health).
        await eventually(
          "/readyz to answer 200",
          async () => (await call(server.url, { path: "/readyz" })).status === 200
        )
      })
      expect(back("db_unavailable_total")).toBe(0)
    } finally {
      await server.stop()
    }
  })
})

describe("metrics scraped by a real Prometheus", () => {
  let database: string
  let server: RunningServer
  let metricsUrl: string
  let prometheus: Subprocess<"ignore", "pipe", "pipe"> | undefined
  let prometheusUrl: string
  let prometheusLog = ""

  beforeAll(async () => {
    database = tempDatabase()
    server = await startServer(database, { METRICS_PORT: "0" })
    const line = server.logs().split("\n").find((line) => line.includes("\"message\":\"metrics\""))
    metricsUrl = JSON.parse(line!).annotations.url
  })
  afterAll(async () => {
    prometheus?.kill("SIGKILL")
    await prometheus?.exited
    await server?.stop()
  })

  it("the binary logs where its metrics are, on loopback by default", () => {
    expect(new URL(metricsUrl).hostname).toBe("127.0.0.1")
    expect(new URL(metricsUrl).pathname).toBe("/metrics")
  })

  it("answers a PromQL query with the number of requests made", async () => {
    if (!requiredTool(prometheusPath, "Prometheus")) return
    const dir = mkdtempSync(join(testTmp(), "campaign-api-prometheus-"))
    const config = join(dir, "prometheus.yml")
    const target = new URL(metricsUrl).host
    writeFileSync(
      config,
      [
        "global:",
        "  scrape_interval: 1s",
        "  scrape_timeout: 1s",
        "scrape_configs:",
        "  - job_name: campaign-api",
        "    static_configs:",
        `      - targets: ["${target}"]`,
        ""
      ].join("\n")
    )
    const port = freePort()
    prometheusUrl = `http://127.0.0.1:${port}`
    prometheus = spawn([
      prometheusPath,
      `--config.file=${config}`,
      `--storage.tsdb.path=${join(dir, "data")}`,
      `--web.listen-address=127.0.0.1:${port}`
    ], { stdin: "ignore", stdout: "pipe", stderr: "pipe" })
    void new Response(prometheus.stderr).text().then((text) => {
      prometheusLog = text
    })

    const { apiKey } = await createKey(database)
    const made = 7
    for (let i = 0; i < made; i++) expect((await whoami(server.url, apiKey)).status).toBe(200)

    const query =
      `sum(http_server_request_duration_seconds_count{job="campaign-api",http_route="/v1/whoami",http_response_status_code="200"})`
    let answered: unknown
    await eventually("Prometheus to have scraped the requests", async () => {
      const response = await fetch(`${prometheusUrl}/api/v1/query?query=${encodeURIComponent(query)}`).catch(() =>
        undefined
      )
      if (response === undefined || !response.ok) return false
      const body = await response.json() as { data: { result: Array<{ value: [number, string] }> } }
      answered = body.data.result[0]?.value[1]
      return answered === String(made)
    }, { intervalMs: 250 }).catch(async (error) => {
      prometheus?.kill("SIGTERM")
      await prometheus?.exited
      await Bun.sleep(100)
      throw new Error(
        `${error.message}; the last answer was ${String(answered)}; Prometheus said:\n${prometheusLog.slice(-3000)}`
      )
    })
    expect(answered).toBe(String(made))
  })

  it("without METRICS_PORT nothing listens for metrics", async () => {
    const plain = await startServer(tempDatabase())
    try {
      expect(plain.logs()).not.toContain("\"message\":\"metrics\"")
    } finally {
      await plain.stop()
    }
  })
})
