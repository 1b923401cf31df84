import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { cpSync, mkdtempSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { call } from "./support/client.ts"
import { root, runCli, type RunningServer, startServer, tempDatabase, testTmp } from "./support/server.ts"

/**
 * The two ways docs/integrators.md, Typed client for TypeScript, gives an integrator, followed from an empty
 * directory outside the checkout: the project in test/integrators/<way> (its package.json, bun.lock,
 * tsconfig.json and main.ts) is copied there, installed from its lockfile, compiled by its own strict
 * tsc and run with Node against a running server. A lockfile that no longer installs frozen (a new
 * version of effect or @effect/platform in this repository changes the client's peer dependencies)
 * is refreshed by running `bun install` in a copy of the project, with dist/client copied in as
 * campaign-api-client/ for the Effect way.
 */

const fixtures = join(root, "test/integrators")
/**
 * Building the client, installing a project from the registry (or Bun's cache) and a strict tsc
 * take a minute on an idle machine and several on a loaded one (docs/contributing.md, Tests): a bound for a hang.
 */
const integratorDeadlineMs = 15 * 60_000
const brandId = "0b6f8c1e-4f5a-4c2b-9d7e-1a2b3c4d5e6f"
const scopes = ["campaigns:write", "analytics:read"]

/** Runs a command to its end; its output, or a failure that shows everything it wrote. */
const run = async (command: ReadonlyArray<string>, cwd: string, env: Record<string, string> = {}): Promise<string> => {
  const proc = Bun.spawn([...command], {
    cwd,
    env: { ...process.env, ...env },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe"
  })
  const [stdout, stderr, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited
  ])
  if (code !== 0) throw new Error(`${command.join(" ")} (in ${cwd}) exited with ${code}:\n${stdout}\n${stderr}`)
  return stdout
}

/** A fresh directory outside the checkout holding the integrator's project of `way`, installed from its lockfile. */
const project = async (way: "effect" | "openapi"): Promise<string> => {
  const dir = mkdtempSync(join(testTmp(), `integrator-${way}-`))
  for (const file of ["package.json", "bun.lock", "tsconfig.json", "main.ts"]) {
    cpSync(join(fixtures, way, file), join(dir, file))
  }
  if (way === "effect") cpSync(join(root, "dist/client"), join(dir, "campaign-api-client"), { recursive: true })
  await run(["bun", "install", "--frozen-lockfile"], dir)
  return dir
}

let server: RunningServer
let key: { readonly apiKey: string; readonly keyId: string }

beforeAll(async () => {
  const database = tempDatabase()
  const created = await runCli(["keys", "create", "--brand", brandId, "--scopes", scopes.join(","), "--json"], {
    DATABASE_URL: database
  })
  expect(created.code, created.stderr).toBe(0)
  key = JSON.parse(created.stdout)
  server = await startServer(database)
  // What an integrator is handed: the package as `bun run build:client` makes it from this checkout.
  await run(["bun", "run", "build:client"], root)
}, integratorDeadlineMs)

afterAll(async () => {
  await server?.stop()
})

/** Compiles the project with its own strict tsconfig and runs it with Node: what it printed. */
const compileAndRun = async (dir: string) => {
  await run([join(dir, "node_modules/.bin/tsc"), "-p", dir], dir)
  return JSON.parse(await run(["node", "dist/main.js"], dir, { API_URL: server.url, API_KEY: key.apiKey }))
}

/** Every operation's answer, as the server gives it to a plain request with the same key. */
const expectTheServersAnswers = async (printed: any, conflict: string) => {
  expect(printed.alive).toEqual({ ok: true, status: "alive" })
  expect(printed.ready).toMatchObject({ ok: true, status: "ready", database: "sqlite" })
  expect(printed.whoami).toEqual({ ok: true, keyId: key.keyId, brandId, scopes })

  const { activation } = printed
  expect(activation).toMatchObject({ status: "ACTIVE", socialUsername: "@janedoe", plannedPostAt: "2026-12-01" })
  const stored = await call(server.url, { path: `/v1/activations/${activation.id}`, apiKey: key.apiKey })
  expect(stored.status).toBe(200)
  expect(stored.json).toEqual({ ok: true, activation })
  expect(printed.fetched).toEqual({ ok: true, activation })
  expect(printed.page).toEqual({ ok: true, activations: [activation], hasMore: false })
  expect(printed.analytics).toEqual({
    campaignId: activation.campaignId,
    from: null,
    to: null,
    activations: 1,
    creators: 1,
    activationsByDay: [{ date: activation.activatedAt.slice(0, 10), activations: 1 }],
    plannedPostsByDay: [{ date: "2026-12-01", posts: 1 }],
    unscheduled: 0
  })
  expect(printed.conflict).toBe(conflict)
}

describe("an integrator's project outside the checkout (docs/integrators.md, Typed client for TypeScript)", () => {
  it("uses the Effect client package built from the definition: strict tsc, then every operation", async () => {
    const dir = await project("effect")
    const installed = JSON.parse(readFileSync(join(dir, "node_modules/campaign-api-client/package.json"), "utf8"))
    const ours = JSON.parse(readFileSync(join(root, "package.json"), "utf8"))
    expect(installed).toMatchObject({
      version: ours.version,
      type: "module",
      peerDependencies: {
        "effect": ours.dependencies.effect,
        "@effect/platform": ours.dependencies["@effect/platform"]
      }
    })
    // The service's version, not its manifest: no script or dependency list of the service ships in the package.
    expect(readFileSync(join(dir, "node_modules/campaign-api-client/index.js"), "utf8")).not.toContain(
      ours.scripts.build
    )
    await expectTheServersAnswers(await compileAndRun(dir), "IdempotencyConflict")
  }, integratorDeadlineMs)

  it("generates types from /openapi.json for openapi-fetch: strict tsc, then every operation", async () => {
    const dir = await project("openapi")
    await run(
      [join(dir, "node_modules/.bin/openapi-typescript"), `${server.url}/openapi.json`, "-o", "schema.d.ts"],
      dir
    )
    await expectTheServersAnswers(await compileAndRun(dir), "IDEMPOTENCY_CONFLICT")
  }, integratorDeadlineMs)

  it.each(["effect", "openapi"])(
    "docs/integrators.md shows the %s project the test runs: its program, tsconfig and versions",
    (way) => {
      const guide = readFileSync(join(root, "docs/integrators.md"), "utf8")
      for (const file of ["main.ts", "tsconfig.json"]) {
        const text = readFileSync(join(fixtures, way, file), "utf8")
        expect(guide.includes(text), `docs/integrators.md lacks test/integrators/${way}/${file}, verbatim`).toBe(true)
      }
      const installed = guide.split("\n").filter((line) => line.startsWith("npm install ")).flatMap((line) =>
        line.split(" ")
      )
      const manifest = JSON.parse(readFileSync(join(fixtures, way, "package.json"), "utf8"))
      for (const [name, version] of Object.entries<string>({ ...manifest.dependencies, ...manifest.devDependencies })) {
        if (!version.startsWith("file:")) {
          expect(installed, "docs/integrators.md's npm install lines").toContain(
            `${name}@${version}`
          )
        }
      }
    }
  )
})
