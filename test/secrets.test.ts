import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { readFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { activate, call, uniqueKey, whoami } from "./support/client.ts"
import { expectEnvelope } from "./support/contract.ts"
import { databaseFiles, permissions } from "./support/database.ts"
import {
  type CreatedTestKey,
  createKey,
  revokeKey,
  runCli,
  type RunningServer,
  startServer,
  tempDatabase
} from "./support/server.ts"

const secretOf = (apiKey: string) => apiKey.split("_")[2]!
const otherSecret = (secret: string) => [...secret].map((c) => (c === "0" ? "1" : "0")).join("")

let database: string
let server: RunningServer
let cliOutput: { stdout: string; stderr: string }
let fromCli: CreatedTestKey
let fromHelper: CreatedTestKey
let revoked: CreatedTestKey
/** Every plaintext key or secret that was created or presented during the run. */
const plaintexts: Array<string> = []

beforeAll(async () => {
  database = tempDatabase()
  const created = await runCli(
    ["keys", "create", "--brand", crypto.randomUUID(), "--scopes", "campaigns:write,campaigns:read", "--json"],
    { DATABASE_URL: database, LOG_LEVEL: "all" }
  )
  expect(created.code).toBe(0)
  cliOutput = created
  fromCli = JSON.parse(created.stdout)
  server = await startServer(database, { LOG_LEVEL: "all" })
  fromHelper = await createKey(database)
  revoked = await createKey(database)

  for (const key of [fromCli, fromHelper]) {
    expect((await whoami(server.url, key.apiKey)).status).toBe(200)
    expect((await activate(server.url, { apiKey: key.apiKey, key: uniqueKey() })).status).toBe(200)
    expect((await activate(server.url, { apiKey: key.apiKey, key: uniqueKey(), body: { socialUsername: "x" } })).status)
      .toBe(400)
    const wrong = `cak_${key.keyId}_${otherSecret(secretOf(key.apiKey))}`
    expect((await whoami(server.url, wrong)).status).toBe(401)
    plaintexts.push(key.apiKey, secretOf(key.apiKey), wrong, secretOf(wrong))
  }
  expect(await revokeKey(database, revoked.keyId)).toBe(true)
  expect((await whoami(server.url, revoked.apiKey)).status).toBe(401)
  plaintexts.push(revoked.apiKey, secretOf(revoked.apiKey))
})

afterAll(async () => {
  await server?.stop()
})

const containing = (haystack: string) => plaintexts.filter((plaintext) => haystack.includes(plaintext))

describe("secrets at rest and in logs", () => {
  it("keeps no plaintext key or secret in the database file, its -wal or its -shm", () => {
    const files = databaseFiles(database)
    expect(files).toContain(`${database}-wal`)
    for (const file of files) expect(containing(readFileSync(file).toString("latin1")), file).toEqual([])
  })

  it("never logs a plaintext key or secret, even at LOG_LEVEL=all", () => {
    expect(server.logs()).toMatch(/"request"/)
    expect(containing(server.logs())).toEqual([])
    expect(containing(cliOutput.stderr)).toEqual([])
  })

  it("creates the database file, its -wal and its -shm readable by their owner only (0600)", async () => {
    const fresh = tempDatabase()
    const local = await startServer(fresh)
    try {
      await createKey(fresh)
      for (const files of [databaseFiles(database), databaseFiles(fresh)]) {
        expect(files.length).toBe(3)
        for (const file of files) expect(permissions(file).toString(8), file).toBe("600")
      }
    } finally {
      await local.stop()
    }
  })
})

describe("the directories the service makes", () => {
  it.each(["serve", "keys create"])(
    "%s makes each directory of a new database 0700 and its files 0600, whatever the umask (000 here)",
    async (command) => {
      const top = join(dirname(tempDatabase()), "made")
      const levels = [top, join(top, "by"), join(top, "by", "the-service")]
      const database = join(levels.at(-1)!, "db.sqlite")
      if (command === "serve") {
        await (await startServer(database, {}, { umask: 0 })).stop()
      } else {
        const created = await runCli(
          ["keys", "create", "--brand", crypto.randomUUID(), "--scopes", "campaigns:read"],
          { DATABASE_URL: database },
          { umask: 0 }
        )
        expect(created.code, created.stderr).toBe(0)
      }
      expect(levels.map((level) => [level, permissions(level).toString(8)])).toEqual(
        levels.map((level) => [level, "700"])
      )
      for (const file of databaseFiles(database)) expect(permissions(file).toString(8), file).toBe("600")
    }
  )
})

describe("refusals that say nothing about the key", () => {
  it("answers an unknown key id, a known id with a wrong secret and a revoked key with the same 401, byte for byte and header for header", async () => {
    const refusal = async (apiKey: string) => {
      const answer = await call(server.url, { path: "/v1/whoami", apiKey })
      expectEnvelope(answer, 401, "UNAUTHORIZED")
      // All but the date and the request's own id, a new one each time.
      const headers: Array<[string, string]> = []
      answer.headers.forEach((value, name) => {
        if (name !== "date" && name !== "x-request-id") headers.push([name, value])
      })
      return { status: answer.status, text: answer.text, headers }
    }
    const secret = secretOf(fromHelper.apiKey)
    const unknownId = await refusal(`cak_${"z".repeat(16)}_${secret}`)
    expect(await refusal(`cak_${fromHelper.keyId}_${otherSecret(secret)}`)).toEqual(unknownId)
    expect(await refusal(revoked.apiKey)).toEqual(unknownId)
    expect(unknownId.headers).toContainEqual(["www-authenticate", "Bearer"])
  })
})
