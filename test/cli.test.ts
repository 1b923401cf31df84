import { describe, expect, it } from "@effect/vitest"
import { chmodSync, statSync, writeFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { whoami } from "./support/client.ts"
import { inspect } from "./support/database.ts"
import { runCli, startServer, tempDatabase } from "./support/server.ts"

const brandId = "0b6f8c1e-4f5a-4c2b-9d7e-1a2b3c4d5e6f"

describe("keys command line", () => {
  it("creates a key with --json as one line of JSON that the running server accepts", async () => {
    const database = tempDatabase()
    const env = { DATABASE_URL: database }
    const server = await startServer(database)
    try {
      const created = await runCli(
        ["keys", "create", "--brand", brandId, "--scopes", "campaigns:write,analytics:read", "--name", "ci", "--json"],
        env
      )
      expect(created.code).toBe(0)
      const lines = created.stdout.trim().split("\n")
      expect(lines).toHaveLength(1)
      const key = JSON.parse(lines[0]!)
      expect(Object.keys(key)).toEqual(["apiKey", "keyId", "brandId", "scopes"])
      expect(key.apiKey).toMatch(new RegExp(`^cak_${key.keyId}_[0-9a-f]{64}$`))
      expect(key.brandId).toBe(brandId)
      expect(key.scopes).toEqual(["campaigns:write", "analytics:read"])

      const identity = await whoami(server.url, key.apiKey)
      expect(identity.status).toBe(200)
      expect(identity.json).toStrictEqual({ ok: true, keyId: key.keyId, brandId, scopes: key.scopes })

      const revoked = await runCli(["keys", "revoke", key.keyId], env)
      expect(revoked.code).toBe(0)
      const after = await whoami(server.url, key.apiKey)
      expect(after.status).toBe(401)
    } finally {
      await server.stop()
    }
  })

  it("prints the key once in text form and stores only its digest", async () => {
    const database = tempDatabase()
    const created = await runCli(["keys", "create", "--brand", brandId, "--scopes", "campaigns:read"], {
      DATABASE_URL: database
    })
    expect(created.code).toBe(0)
    const apiKey = /cak_[a-z0-9]{16}_[0-9a-f]{64}/.exec(created.stdout)?.[0]
    expect(apiKey).toBeDefined()
    expect(created.stdout).toContain("shown only this once")
    const secret = apiKey!.split("_")[2]!
    const rows = inspect(database, (db) => db.query("SELECT * FROM api_keys").all())
    expect(JSON.stringify(rows)).not.toContain(secret)
    const digest = new Bun.CryptoHasher("sha256").update(secret).digest("hex")
    expect(rows).toEqual([expect.objectContaining({ secret_sha256: digest, brand_id: brandId, revoked_at: null })])
  })

  it("lists keys as a table and as JSON, never with secrets, and shows revocation", async () => {
    const database = tempDatabase()
    const env = { DATABASE_URL: database }
    const created = JSON.parse(
      (await runCli(["keys", "create", "--brand", brandId, "--scopes", "campaigns:read", "--expires-in", "30", "--json"], env))
        .stdout
    )
    await runCli(["keys", "revoke", created.keyId], env)
    const table = await runCli(["keys", "list"], env)
    expect(table.code).toBe(0)
    expect(table.stdout).toMatch(/KEY ID\s+BRAND\s+NAME\s+SCOPES\s+STATUS/)
    expect(table.stdout).toContain(created.keyId)
    expect(table.stdout).toContain("revoked")
    const json = await runCli(["keys", "list", "--json"], env)
    const listed = JSON.parse(json.stdout)
    expect(listed).toEqual([
      expect.objectContaining({ keyId: created.keyId, brandId, scopes: ["campaigns:read"], status: "revoked" })
    ])
    expect(Date.parse(listed[0].expiresAt) - Date.parse(listed[0].createdAt)).toBe(30 * 24 * 3600 * 1000)
    expect(json.stdout).not.toContain(created.apiKey.split("_")[2])
  })

  it("refuses bad input with a message and a non-zero exit, creating nothing", async () => {
    const database = tempDatabase()
    const env = { DATABASE_URL: database }
    const badBrand = await runCli(["keys", "create", "--brand", "nope", "--scopes", "campaigns:read"], env)
    expect(badBrand.code).not.toBe(0)
    const badScope = await runCli(["keys", "create", "--brand", brandId, "--scopes", "campaigns:delete"], env)
    expect(badScope.code).not.toBe(0)
    const farFuture = await runCli(["keys", "create", "--brand", brandId, "--scopes", "campaigns:read", "--expires-in", "100000000"], env)
    expect(farFuture.code).toBe(2)
    const days = await runCli(["keys", "create", "--brand", brandId, "--scopes", "campaigns:read", "--expires-in", "30d"], env)
    expect(days.code).toBe(2)
    expect(days.stderr + days.stdout).toContain("--expires-in takes a whole number of days from 1 to 36500")
    const unknown = await runCli(["keys", "revoke", "aaaaaaaaaaaaaaaa"], env)
    expect(unknown.code).toBe(1)
    expect(unknown.stderr).toContain("No active API key with id aaaaaaaaaaaaaaaa")
    const list = await runCli(["keys", "list", "--json"], env)
    expect(JSON.parse(list.stdout)).toEqual([])
  })

  it("lists names in a table that stays aligned: wide characters, control characters escaped, long names cut, empty as -", async () => {
    const database = tempDatabase()
    const env = { DATABASE_URL: database }
    for (const name of ["tab\there", "日本語の名前", "", "x".repeat(190)]) {
      expect((await runCli(["keys", "create", "--brand", brandId, "--scopes", "campaigns:read", "--name", name], env)).code).toBe(0)
    }
    const lines = (await runCli(["keys", "list"], env)).stdout.trimEnd().split("\n")
    const scopesAt = lines.map((line) => Bun.stringWidth(line.slice(0, line.indexOf(line.startsWith("KEY ID") ? "SCOPES" : "campaigns:read"))))
    expect(new Set(scopesAt).size).toBe(1)
    expect(lines[1]).toContain("tab\\there")
    expect(lines[3]).toMatch(/^\S+ +\S+ +- +campaigns:read/)
    expect(lines[4]).toContain("…")
    expect(Math.max(...lines.map((line) => Bun.stringWidth(line)))).toBeLessThanOrEqual(160)
  })

  it("revokes by the whole key as well as by its id, and never prints a secret it was given", async () => {
    const database = tempDatabase()
    const env = { DATABASE_URL: database }
    const created = await runCli(["keys", "create", "--brand", brandId, "--scopes", "campaigns:read", "--json"], env)
    const { apiKey, keyId } = JSON.parse(created.stdout)
    const secret = apiKey.split("_")[2]
    const revoked = await runCli(["keys", "revoke", apiKey], env)
    expect(revoked.code).toBe(0)
    expect(revoked.stdout).toContain(`Revoked API key ${keyId}`)
    expect(`${revoked.stdout}${revoked.stderr}`).not.toContain(secret)
    const again = await runCli(["keys", "revoke", apiKey], env)
    expect(again.code).toBe(1)
    expect(`${again.stdout}${again.stderr}`).not.toContain(secret)
    const garbled = await runCli(["keys", "revoke", `x${apiKey}`], env)
    expect(garbled.code).toBe(2)
    expect(`${garbled.stdout}${garbled.stderr}`).not.toContain(secret)
  })

  it("stops at start with one sentence naming the variable and exit 78 when a path, address or port cannot be used", async () => {
    const directory = dirname(tempDatabase())
    const notDatabase = join(directory, "notes.txt")
    writeFileSync(notDatabase, "not a database")
    chmodSync(notDatabase, 0o644)
    const cases: Array<[Record<string, string>, string]> = [
      [{ DATABASE_URL: "/proc/no-such-dir/db.sqlite" }, "DATABASE_URL=/proc/no-such-dir/db.sqlite cannot be created"],
      [{ DATABASE_URL: directory }, `DATABASE_URL=${directory} is a directory`],
      [{ DATABASE_URL: notDatabase }, `DATABASE_URL=${notDatabase} is not a SQLite database`],
      [{ DATABASE_URL: tempDatabase(), HOST: "not-a-host" }, "HOST=not-a-host: not an address of this machine"]
    ]
    for (const [env, sentence] of cases) {
      const result = await runCli(["serve"], env)
      expect({ env, code: result.code, stderr: result.stderr.trim().split("\n") }).toEqual({
        env,
        code: 78,
        stderr: [expect.stringContaining(sentence)]
      })
    }
    // The file that is not a database is left as it was, its mode included.
    expect(statSync(notDatabase).mode & 0o777).toBe(0o644)
    const server = await startServer(tempDatabase())
    try {
      const port = new URL(server.url).port
      const taken = await runCli(["serve"], { DATABASE_URL: tempDatabase(), PORT: port })
      expect(taken.code).toBe(78)
      expect(taken.stderr.trim()).toBe(`PORT=${port}: another process is listening on 127.0.0.1:${port}; stop it or choose another PORT.`)
    } finally {
      await server.stop()
    }
  })

  it("stops the server at start on a bad configuration value, naming the variable", async () => {
    for (const [name, value] of [["PORT", "abc"], ["RATE_LIMIT_MAX", "0"], ["IDEMPOTENCY_TTL_HOURS", "x"], ["LOG_LEVEL", "loud"]]) {
      const result = await runCli(["serve"], { DATABASE_URL: tempDatabase(), [name!]: value! })
      expect(result.code).toBe(78)
      expect(result.stderr).toContain(name)
    }
  })
})
