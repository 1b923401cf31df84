import { describe, expect, it } from "@effect/vitest"
import { spawnSync } from "bun"
import { readFileSync, writeFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { whoami } from "./support/client.ts"
import { createKey, program, root, startServer, tempDatabase } from "./support/server.ts"

const unitFile = join(root, "deploy/campaign-api.service")
const unit = readFileSync(unitFile, "utf8")

/** The unit's `Environment=` settings, as systemd hands them to the service. */
const environmentOf = (text: string): Record<string, string> =>
  Object.fromEntries(
    text.split("\n").flatMap((line) => {
      const match = /^Environment=([A-Z_]+)=(.*)$/.exec(line.trim())
      return match === null ? [] : [[match[1]!, match[2]!]]
    })
  )

const systemdAnalyze = spawnSync(["sh", "-c", "command -v systemd-analyze"]).stdout.toString().trim()
const missing = systemdAnalyze === "" ? "systemd-analyze is not installed" : undefined
if (missing !== undefined) console.log(`deploy.test.ts: ${missing}: the unit file's verification is skipped`)

describe("the systemd unit in deploy/ (docs/operators.md, Deployment)", () => {
  it.skipIf(missing !== undefined && !process.env["CI"])("passes systemd-analyze verify without a warning", () => {
    // Its ExecStart pointed at a program that exists here: systemd checks that the command is executable.
    const copy = join(dirname(tempDatabase()), "campaign-api.service")
    writeFileSync(
      copy,
      unit.replace(/^ExecStart=.*$/m, `ExecStart=${program.map((word) => Bun.which(word) ?? word).join(" ")} serve`)
    )
    const verified = spawnSync([systemdAnalyze || "systemd-analyze", "verify", copy])
    expect({ exitCode: verified.exitCode, stderr: verified.stderr.toString(), stdout: verified.stdout.toString() })
      .toEqual({ exitCode: 0, stderr: "", stdout: "" })
  })

  it("starts the server as it configures it: an absolute database path, loopback, the drain, and a bad configuration not restarted", async () => {
    const environment = environmentOf(unit)
    expect(environment).toMatchObject({ HOST: "127.0.0.1", SHUTDOWN_DELAY_SECONDS: expect.any(String) })
    expect(environment["DATABASE_URL"]).toMatch(/^\/var\/lib\/campaign-api\//)
    expect(unit).toMatch(/^StateDirectory=campaign-api$/m)
    expect(unit).toMatch(/^RestartPreventExitStatus=78$/m)
    expect(unit).toMatch(/^ExecStart=\/usr\/local\/bin\/campaign-api serve$/m)
    // Every value the unit sets is one the server takes: it starts on them (its own database and port aside).
    const database = tempDatabase()
    const key = await createKey(database)
    const server = await startServer(database, {
      ...environment,
      DATABASE_URL: database,
      PORT: "0",
      SHUTDOWN_DELAY_SECONDS: "0"
    })
    try {
      expect((await whoami(server.url, key.apiKey)).status).toBe(200)
    } finally {
      expect(await server.stop()).toBe(0)
    }
  })
})

describe("the single binary (docs/operators.md, The single binary)", () => {
  const binary = process.env["CAMPAIGN_API_TEST_BINARY"]
  const checkout = root.endsWith("/") ? root : `${root}/`

  it("holds no path of the checkout it was built from", () => {
    expect(binary, "the suite builds the binary (globalSetup.ts)").toBeDefined()
    expect(binary!.startsWith(checkout)).toBe(false)
    const bytes = readFileSync(binary!)
    const at = bytes.indexOf(checkout)
    expect(at === -1 ? undefined : bytes.subarray(Math.max(0, at - 40), at + 120).toString("latin1")).toBeUndefined()
  })

  it("started in the checkout, with its node_modules there, maps no file of the checkout", async () => {
    expect(binary, "the suite builds the binary (globalSetup.ts)").toBeDefined()
    const server = await startServer(tempDatabase(), {}, { cwd: root })
    try {
      const maps = readFileSync(`/proc/${server.process.pid}/maps`, "utf8").split("\n")
      // The process read is the binary's own: it maps its executable.
      expect(maps.some((line) => line.endsWith(` ${binary}`))).toBe(true)
      expect(maps.filter((line) => line.includes(checkout))).toEqual([])
    } finally {
      expect(await server.stop()).toBe(0)
    }
  })
})
