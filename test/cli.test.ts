import { describe, expect, it } from "@effect/vitest"
import { chmodSync, existsSync, readFileSync, statSync, writeFileSync } from "node:fs"
import { dirname, join, relative } from "node:path"
import { backends, postgres, sharedSkipped } from "./support/backends.ts"
import { activate, type Answer, uniqueKey, whoami } from "./support/client.ts"
import { expectEnvelope } from "./support/contract.ts"
import { activationExists, countRows, inspect, integrityCheck, orphans, permissions } from "./support/database.ts"
import { eventually, runLoops } from "./support/load.ts"
import { createKey, type Environment, program, root, runCli, startServer, tempDatabase } from "./support/server.ts"

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
      // keys show --json's fields, and the secret first (docs/operators.md, The key command line).
      expect(Object.keys(key)).toEqual([
        "apiKey",
        "keyId",
        "brandId",
        "name",
        "scopes",
        "status",
        "createdAt",
        "expiresAt",
        "revokedAt",
        "lastUsedAt",
        "rateLimit"
      ])
      expect(key.apiKey).toMatch(new RegExp(`^cak_${key.keyId}_[0-9a-f]{64}$`))
      expect(key.brandId).toBe(brandId)
      expect(key.scopes).toEqual(["campaigns:write", "analytics:read"])
      const shown = await runCli(["keys", "show", key.keyId, "--json"], env)
      expect(JSON.parse(shown.stdout)).toStrictEqual(
        Object.fromEntries(Object.entries(key).filter(([field]) => field !== "apiKey"))
      )

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
      (await runCli([
        "keys",
        "create",
        "--brand",
        brandId,
        "--scopes",
        "campaigns:read",
        "--expires-in",
        "30",
        "--json"
      ], env))
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
    const farFuture = await runCli([
      "keys",
      "create",
      "--brand",
      brandId,
      "--scopes",
      "campaigns:read",
      "--expires-in",
      "100000000"
    ], env)
    expect(farFuture.code).toBe(2)
    const days = await runCli([
      "keys",
      "create",
      "--brand",
      brandId,
      "--scopes",
      "campaigns:read",
      "--expires-in",
      "30d"
    ], env)
    expect(days.code).toBe(2)
    expect(days.stderr + days.stdout).toContain("--expires-in takes a whole number of days from 1 to 36500")
    expect(existsSync(database)).toBe(false)
    const { keyId } = await createKey(database)
    const unknown = await runCli(["keys", "revoke", "aaaaaaaaaaaaaaaa"], env)
    expect(unknown.code).toBe(1)
    expect(unknown.stderr).toContain("No active API key with id aaaaaaaaaaaaaaaa")
    const list = await runCli(["keys", "list", "--json"], env)
    expect(JSON.parse(list.stdout)).toEqual([expect.objectContaining({ keyId, status: "active" })])
  })

  it("lists names in a table that stays aligned: wide characters, control characters escaped, long names cut, empty as -", async () => {
    const database = tempDatabase()
    const env = { DATABASE_URL: database }
    for (const name of ["tab\there", "日本語の名前", "", "x".repeat(190)]) {
      expect(
        (await runCli(["keys", "create", "--brand", brandId, "--scopes", "campaigns:read", "--name", name], env)).code
      ).toBe(0)
    }
    const lines = (await runCli(["keys", "list"], { ...env, COLUMNS: "160" })).stdout.trimEnd().split("\n")
    const scopesAt = lines.map((line) =>
      Bun.stringWidth(line.slice(0, line.indexOf(line.startsWith("KEY ID") ? "SCOPES" : "campaigns:read")))
    )
    expect(new Set(scopesAt).size).toBe(1)
    expect(lines[1]).toContain("tab\\there")
    expect(lines[3]).toMatch(/^\S+ +\S+ +- +campaigns:read/)
    expect(lines[4]).toContain("…")
    expect(Math.max(...lines.map((line) => Bun.stringWidth(line)))).toBeLessThanOrEqual(160)
  })

  it("takes a key's id, never the whole key: a whole key is a usage error showing the id to use, never the secret, and changes nothing", async () => {
    const database = tempDatabase()
    const env = { DATABASE_URL: database }
    const created = await runCli(["keys", "create", "--brand", brandId, "--scopes", "campaigns:read", "--json"], env)
    const { apiKey, keyId } = JSON.parse(created.stdout)
    const secret = apiKey.split("_")[2]
    const stored = () => inspect(database, (db) => db.query("SELECT * FROM api_keys").all())
    const before = stored()
    for (
      const args of [["revoke", apiKey], ["show", apiKey], ["roll", apiKey, "--grace", "0"], [
        "update",
        apiKey,
        "--name",
        "x"
      ]]
    ) {
      const refused = await runCli(["keys", ...args], env)
      expect({ args: args[0], code: refused.code, stdout: refused.stdout, stderr: refused.stderr.trim() }).toEqual({
        args: args[0],
        code: 2,
        stdout: "",
        stderr: `keys ${
          args[0]
        } takes the key id alone, here ${keyId}, never the API key: its secret would stay in the shell's history.`
      })
    }
    const garbled = await runCli(["keys", "revoke", `x${apiKey}`], env)
    expect(garbled.code).toBe(2)
    expect(`${garbled.stdout}${garbled.stderr}`).not.toContain(secret)
    expect(stored()).toEqual(before)
    const revoked = await runCli(["keys", "revoke", keyId], env)
    expect(revoked.code).toBe(0)
    expect(revoked.stdout).toContain(`Revoked API key ${keyId}`)
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
      // Held on 127.0.0.1, asked for on every address or on that one: taken on this machine either way.
      for (const host of ["127.0.0.1", "0.0.0.0"]) {
        const taken = await runCli(["serve"], { DATABASE_URL: tempDatabase(), PORT: port, HOST: host })
        expect({ host, code: taken.code, stderr: taken.stderr.trim() }).toEqual({
          host,
          code: 78,
          stderr:
            `PORT=${port}: another process on this machine is listening on port ${port}; stop it or choose another PORT.`
        })
        // The metrics' listener the same (docs/operators.md, Operating it: Metrics).
        const metricsTaken = await runCli(["serve"], {
          DATABASE_URL: tempDatabase(),
          METRICS_PORT: port,
          METRICS_HOST: host
        })
        expect({ host, code: metricsTaken.code, stderr: metricsTaken.stderr.trim() }).toEqual({
          host,
          code: 78,
          stderr:
            `METRICS_PORT=${port}: another process on this machine is listening on port ${port}; stop it or choose another METRICS_PORT.`
        })
      }
    } finally {
      await server.stop()
    }
  })

  it("stops the server at start on a bad configuration value, naming the variable", async () => {
    for (
      const [name, value] of [["PORT", "abc"], ["RATE_LIMIT_MAX", "0"], ["IDEMPOTENCY_TTL_HOURS", "x"], [
        "LOG_LEVEL",
        "loud"
      ]]
    ) {
      const result = await runCli(["serve"], { DATABASE_URL: tempDatabase(), [name!]: value! })
      expect(result.code).toBe(78)
      expect(result.stderr).toContain(name)
    }
  })
})

/**
 * Runs the real command line on a terminal `columns` wide, as a person would: what appeared on it
 * (stdout and stderr together), line by line, without colour codes, and as it was (`raw`).
 */
const onTerminal = async (args: ReadonlyArray<string>, env: Environment, columns: number) => {
  let output = ""
  const decoder = new TextDecoder()
  const closed = Promise.withResolvers<void>()
  const proc = Bun.spawn([...program, ...args], {
    cwd: root,
    env: Object.fromEntries(
      Object.entries({ ...process.env, ...env }).filter((entry): entry is [string, string] => entry[1] !== undefined)
    ),
    terminal: {
      cols: columns,
      rows: 24,
      data: (_, data) => void (output += decoder.decode(data, { stream: true })),
      exit: () => closed.resolve()
    }
  })
  const code = await proc.exited
  await closed.promise
  return { code, raw: output, lines: output.replace(/\x1b\[[0-9;]*m/g, "").split("\r\n").filter((line) => line !== "") }
}

describe("keys list fits the width it is shown in", () => {
  const otherBrand = "9c1d2e3f-4a5b-4c6d-8e7f-8091a2b3c4d5"

  /** A database whose keys make the whole table about 190 columns wide; their `keys list --json`. */
  const listedKeys = async () => {
    const database = tempDatabase()
    const env = { DATABASE_URL: database }
    const named = await runCli(
      [
        "keys",
        "create",
        "--brand",
        brandId,
        "--scopes",
        "campaigns:read,campaigns:write,analytics:read",
        "--name",
        "n".repeat(100),
        "--expires-in",
        "30"
      ],
      env
    )
    expect(named.code).toBe(0)
    await createKey(database, { brandId: otherBrand, scopes: ["campaigns:read"] })
    const listed: Array<{ keyId: string; brandId: string; createdAt: string; expiresAt: string | null }> = JSON.parse(
      (await runCli(["keys", "list", "--json"], env)).stdout
    )
    return { env, listed }
  }

  const expectNarrow = (lines: ReadonlyArray<string>, listed: Awaited<ReturnType<typeof listedKeys>>["listed"]) => {
    const table = lines.filter((line) => !line.startsWith("Database: "))
    expect(table.map((line) => Bun.stringWidth(line)).filter((width) => width > 80)).toEqual([])
    expect(table[0]!.split(/ {2,}/)).toEqual(["KEY ID", "BRAND", "NAME", "STATUS", "LAST USED", "LIMIT"])
    for (const key of listed) {
      const row = table.find((line) => line.startsWith(key.keyId))
      expect(row).toContain(`${key.brandId.slice(0, 8)}…`)
      expect(row).not.toContain(key.brandId)
      expect(row).toMatch(/ active +never +default$/)
    }
  }

  const expectWide = (lines: ReadonlyArray<string>, listed: Awaited<ReturnType<typeof listedKeys>>["listed"]) => {
    const table = lines.filter((line) => !line.startsWith("Database: "))
    expect(table.map((line) => Bun.stringWidth(line)).filter((width) => width > 200)).toEqual([])
    expect(table[0]!.split(/ {2,}/)).toEqual([
      "KEY ID",
      "BRAND",
      "NAME",
      "SCOPES",
      "STATUS",
      "CREATED",
      "EXPIRES",
      "LAST USED",
      "LIMIT"
    ])
    for (const key of listed) {
      const row = table.find((line) => line.startsWith(key.keyId))
      expect(row).toContain(key.brandId)
      expect(row).toContain(key.createdAt)
      expect(row).toContain(key.expiresAt ?? "never")
    }
    expect(table.join("\n")).toContain("campaigns:read,campaigns:write,analytics:read")
  }

  it("on a terminal 80 columns wide, keeps last use and limit, drops the dates and scopes, shortens brands, and cuts the name to fit; at 200 shows every field whole", async () => {
    const { env, listed } = await listedKeys()
    // A COLUMNS left over from before the terminal was resized does not count: the terminal's own width does.
    const narrow = await onTerminal(["keys", "list"], { ...env, COLUMNS: "200" }, 80)
    expect(narrow.code).toBe(0)
    expectNarrow(narrow.lines, listed)
    expect(narrow.lines.find((line) => line.includes("nnnn"))).toMatch(/n… /)
    const wide = await onTerminal(["keys", "list"], { ...env, COLUMNS: "80" }, 200)
    expect(wide.code).toBe(0)
    expectWide(wide.lines, listed)
  })

  it("when the output is not a terminal, fits 80 columns, or the width COLUMNS gives", async () => {
    const { env, listed } = await listedKeys()
    const piped = await runCli(["keys", "list"], { ...env, COLUMNS: undefined })
    expect(piped.code).toBe(0)
    expectNarrow(piped.stdout.trimEnd().split("\n"), listed)
    const wide = await runCli(["keys", "list"], { ...env, COLUMNS: "200" })
    expectWide(wide.stdout.trimEnd().split("\n"), listed)
    const json = await runCli(["keys", "list", "--json"], { ...env, COLUMNS: "20" })
    expect(JSON.parse(json.stdout)).toEqual(listed)
  })
})

describe("the database a key command uses", () => {
  it("is named on stderr by its absolute path, said to be new when keys create made it, and --json stdout stays one line", async () => {
    const database = tempDatabase()
    // Relative, as an operator in the checkout would write it: the notice names the file it resolves to.
    const env = { DATABASE_URL: relative(root, database) }
    const created = await runCli(["keys", "create", "--brand", brandId, "--scopes", "campaigns:read", "--json"], env)
    expect(created.code).toBe(0)
    expect(created.stderr).toBe(`Database: ${database} (new: no database was there)\n`)
    const lines = created.stdout.trimEnd().split("\n")
    expect(lines).toHaveLength(1)
    const { keyId } = JSON.parse(lines[0]!)

    for (const args of [["keys", "list"], ["keys", "list", "--json"], ["keys", "revoke", keyId]]) {
      const result = await runCli(args, env)
      expect({ args, code: result.code, stderr: result.stderr }).toEqual({
        args,
        code: 0,
        stderr: `Database: ${database}\n`
      })
    }
  })

  it("is made only by keys create: every other key command refuses a missing one with one sentence naming its absolute path, exit 1, and makes nothing, not even its directory", async () => {
    const directory = join(dirname(tempDatabase()), "mistyped")
    const database = join(directory, "db.sqlite")
    const env = { DATABASE_URL: relative(root, database) }
    for (
      const args of [["list"], ["list", "--json"], ["show", "aaaaaaaaaaaaaaaa"], ["roll", "aaaaaaaaaaaaaaaa"], [
        "update",
        "aaaaaaaaaaaaaaaa",
        "--name",
        "x"
      ], ["revoke", "aaaaaaaaaaaaaaaa"]]
    ) {
      const result = await runCli(["keys", ...args], env)
      expect({ args, code: result.code, stdout: result.stdout, stderr: result.stderr }).toEqual({
        args,
        code: 1,
        stdout: "",
        stderr:
          `There is no database at ${database}: set DATABASE_URL to the server's database (only serve and keys create make a new one).\n`
      })
      expect(existsSync(directory)).toBe(false)
    }
    const created = await runCli(["keys", "create", "--brand", brandId, "--scopes", "campaigns:read", "--json"], env)
    expect({ code: created.code, stderr: created.stderr }).toEqual({
      code: 0,
      stderr: `Database: ${database} (new: no database was there)\n`
    })
    expect(JSON.parse((await runCli(["keys", "list", "--json"], env)).stdout)).toEqual([
      expect.objectContaining({ keyId: JSON.parse(created.stdout).keyId })
    ])
  })

  it("is not opened for a usage error: keys update with nothing to change exits 2 whether or not there is a database", async () => {
    const directory = join(dirname(tempDatabase()), "mistyped")
    const database = join(directory, "db.sqlite")
    const result = await runCli(["keys", "update", "aaaaaaaaaaaaaaaa"], { DATABASE_URL: database })
    expect({ code: result.code, stdout: result.stdout, stderr: result.stderr }).toEqual({
      code: 2,
      stdout: "",
      stderr:
        "keys update changes --scopes, --name, --rate-limit, --expires-in or --no-expiry: give at least one (run the same command with --help to see what each takes).\n"
    })
    expect(existsSync(directory)).toBe(false)
  })

  it("is named in the terminal's own colour, as a notice and not an error", async () => {
    const env = { DATABASE_URL: tempDatabase() }
    expect((await runCli(["keys", "create", "--brand", brandId, "--scopes", "campaigns:read"], env)).code).toBe(0)
    const shown = await onTerminal(["keys", "list"], env, 80)
    expect(shown.code).toBe(0)
    expect(shown.raw.split("\r\n").find((line) => line.includes("Database: "))).toBe(`Database: ${env.DATABASE_URL}`)
  })

  it.skipIf(sharedSkipped !== undefined)(
    "on PostgreSQL is named by host, port and database, never with its user or password",
    async () => {
      const url = new URL(await postgres.database())
      url.password = "s3cret-word"
      const env = { DATABASE_URL: url.toString() }
      const named = `Database: postgres://${url.host}${url.pathname}\n`
      const created = await runCli(["keys", "create", "--brand", brandId, "--scopes", "campaigns:read", "--json"], env)
      expect(created).toMatchObject({ code: 0, stderr: named })
      expect(created.stdout.trimEnd().split("\n")).toHaveLength(1)
      expect(JSON.parse(created.stdout).brandId).toBe(brandId)
      const listed = await runCli(["keys", "list", "--json"], env)
      expect(listed).toMatchObject({ code: 0, stderr: named })
      expect(JSON.parse(listed.stdout)).toHaveLength(1)
      for (const { stdout, stderr } of [created, listed]) {
        expect(`${stdout}${stderr}`).not.toContain("s3cret-word")
        expect(stderr).not.toContain("@")
      }
    }
  )
})

describe("backup", () => {
  it("copies the database while the server writes: the copy serves as it is, with every activation answered before it began, whole, and mode 0600", async () => {
    const database = tempDatabase()
    const key = await createKey(database)
    const server = await startServer(database, { RATE_LIMIT_MAX: "1000000" })
    const answered: Array<
      { readonly idempotencyKey: string; readonly body: { socialUsername: string }; readonly answer: Answer }
    > = []
    const load = runLoops(8, async (loop) => {
      const attempt = { key: uniqueKey(), body: { socialUsername: `@backup-${loop}` } }
      const answer = await activate(server.url, { apiKey: key.apiKey, ...attempt })
      expect(answer.status).toBe(200)
      answered.push({ idempotencyKey: attempt.key, body: attempt.body, answer })
    })
    const copy = join(dirname(tempDatabase()), "copy.sqlite")
    let beforeBackup: typeof answered = []
    let backup: Awaited<ReturnType<typeof runCli>>
    try {
      await eventually("activations under way", () => answered.length >= 100)
      beforeBackup = [...answered]
      backup = await runCli(["backup", copy], { DATABASE_URL: database })
      const afterBackup = answered.length
      await eventually("writes after the backup", () => answered.length >= afterBackup + 50)
    } finally {
      load.stop()
      await load.done
      await server.stop()
    }
    expect(load.errors).toEqual([])
    expect(backup.code).toBe(0)
    expect(backup.stderr).toBe(`Database: ${database}\n`)
    const bytes = statSync(copy).size
    expect(backup.stdout).toBe(`Backup written: ${copy} (${bytes} bytes).\n`)
    expect(permissions(copy)).toBe(0o600)
    expect(integrityCheck(copy)).toBe("ok")
    expect(orphans(copy)).toEqual({ activations: 0, idempotencyKeys: 0 })
    // A copy of one moment: everything answered before it began, and less than the server wrote in all.
    expect(countRows(copy, "activations")).toBeGreaterThanOrEqual(beforeBackup.length)
    expect(countRows(copy, "activations")).toBeLessThan(countRows(database, "activations"))

    // Restored: the copy is DATABASE_URL as it is. The key works and each activation replays byte for byte.
    // Its limit as high as the first server's: the replays below are as many as were answered, over 120 at times.
    const restored = await startServer(copy, { RATE_LIMIT_MAX: "1000000" })
    try {
      expect((await whoami(restored.url, key.apiKey)).status).toBe(200)
      for (const { answer, body, idempotencyKey } of beforeBackup) {
        expect(activationExists(copy, answer.json.activation.id)).toBe(true)
        const replay = await activate(restored.url, { apiKey: key.apiKey, key: idempotencyKey, body })
        expect({ status: replay.status, text: replay.text }).toEqual({ status: 200, text: answer.text })
      }
    } finally {
      await restored.stop()
    }
  })

  it("never overwrites a file, refuses a database that is not there, :memory: and PostgreSQL, with one sentence and exit 1, leaving nothing behind", async () => {
    const database = tempDatabase()
    await createKey(database)
    const existing = join(dirname(database), "existing")
    writeFileSync(existing, "keep me")
    const missingDirectory = join(dirname(database), "no-such-directory", "copy.sqlite")
    const refusals: ReadonlyArray<readonly [Environment, string, RegExp]> = [
      [{ DATABASE_URL: database }, existing, /already exists: a backup never overwrites a file/],
      [{ DATABASE_URL: database }, missingDirectory, /does not exist: make the directory first/],
      [
        { DATABASE_URL: join(dirname(database), "absent.sqlite") },
        join(dirname(database), "a.sqlite"),
        /There is no database at/
      ],
      [{ DATABASE_URL: ":memory:" }, join(dirname(database), "b.sqlite"), /no file to back up/],
      [
        { DATABASE_URL: "postgres://app:s3cret-word@127.0.0.1:5432/x" },
        join(dirname(database), "c.sqlite"),
        /use pg_dump/
      ]
    ]
    for (const [env, file, sentence] of refusals) {
      const result = await runCli(["backup", file], env)
      expect({ file, code: result.code, stdout: result.stdout }).toEqual({ file, code: 1, stdout: "" })
      expect(result.stderr).toMatch(sentence)
      expect(result.stderr.trimEnd().split("\n").length).toBeLessThanOrEqual(2)
      expect(result.stderr).not.toContain("s3cret-word")
      if (file !== existing) expect(existsSync(file)).toBe(false)
    }
    expect(readFileSync(existing, "utf8")).toBe("keep me")
    expect(existsSync(join(dirname(database), "absent.sqlite"))).toBe(false)
  })
})

describe.each(backends)("a key's life through the command line, against a running server on $name", (backend) => {
  const cliJson = async (args: ReadonlyArray<string>, env: Environment) => {
    const result = await runCli([...args, "--json"], env)
    expect(result.code, result.stderr).toBe(0)
    expect(result.stdout.trim().split("\n")).toHaveLength(1)
    return JSON.parse(result.stdout)
  }
  const imfDate = (iso: string) => new Date(iso).toUTCString()
  const minuteOf = (millis: number) => millis - (millis % 60_000)

  it(`own limit, update, roll with a grace, Api-Key-Expires and last use: each change seen ${backend.keysSeen}`, async () => {
    const database = await backend.database()
    const env = { DATABASE_URL: database }
    const server = await startServer(database, backend.env)
    try {
      const created = await cliJson(
        [
          "keys",
          "create",
          "--brand",
          brandId,
          "--scopes",
          "campaigns:read",
          "--rate-limit",
          "3/60",
          "--expires-in",
          "2"
        ],
        env
      )
      const { expiresAt } = await cliJson(["keys", "show", created.keyId], env)
      await backend.afterKeyChange()
      const answers = [await whoami(server.url, created.apiKey), await whoami(server.url, created.apiKey)]
      expect(answers.map((answer) => answer.status)).toEqual([200, 200])
      expect(answers[0]!.headers.get("ratelimit-policy")).toBe(`"default";q=3;w=60`)
      expect(answers.map((answer) => answer.headers.get("ratelimit"))).toEqual([
        `"default";r=2;t=0`,
        `"default";r=1;t=0`
      ])
      expect(answers[0]!.headers.get("api-key-expires")).toBe(imfDate(expiresAt))
      expect((await whoami(server.url, created.apiKey)).status).toBe(200)
      const limited = await whoami(server.url, created.apiKey)
      expectEnvelope(limited, 429, "RATE_LIMITED")
      expect(limited.json.message).toContain("3 requests per 60 seconds for this API key")
      expect(limited.headers.get("api-key-expires")).toBe(imfDate(expiresAt))

      const updated = await runCli([
        "keys",
        "update",
        created.keyId,
        "--rate-limit",
        "default",
        "--scopes",
        "campaigns:write"
      ], env)
      expect(updated.code, updated.stderr).toBe(0)
      await backend.afterKeyChange()
      const afterUpdate = await whoami(server.url, created.apiKey)
      expect(afterUpdate.status).toBe(200)
      expect(afterUpdate.json.scopes).toEqual(["campaigns:write"])
      expect(afterUpdate.headers.get("ratelimit-policy")).toBe(`"default";q=120;w=60`)

      const rolled = await cliJson(["keys", "roll", created.keyId, "--grace", "1h"], env)
      expect(Object.keys(rolled)).toEqual(["apiKey", "keyId", "previousSecretEndsAt"])
      expect(rolled.keyId).toBe(created.keyId)
      await backend.afterKeyChange()
      const [previous, current] = [await whoami(server.url, created.apiKey), await whoami(server.url, rolled.apiKey)]
      expect([previous.status, current.status]).toEqual([200, 200])
      expect(previous.json).toEqual(current.json)
      expect(previous.headers.get("api-key-expires")).toBe(imfDate(rolled.previousSecretEndsAt))
      expect(current.headers.get("api-key-expires")).toBe(imfDate(expiresAt))

      // Rolling again ends the oldest secret at once, and with --grace 0 the one it replaces too.
      const again = await cliJson(["keys", "roll", created.keyId, "--grace", "0"], env)
      await backend.afterKeyChange()
      expectEnvelope(await whoami(server.url, created.apiKey), 401, "UNAUTHORIZED")
      expectEnvelope(await whoami(server.url, rolled.apiKey), 401, "UNAUTHORIZED")
      const usedFrom = Date.now()
      expect((await whoami(server.url, again.apiKey)).status).toBe(200)
      const usedUntil = Date.now()

      // Written at the graceful stop, at the latest.
      expect(await server.stop()).toBe(0)
      const shown = await cliJson(["keys", "show", created.keyId], env)
      expect(Object.keys(shown)).toEqual([
        "keyId",
        "brandId",
        "name",
        "scopes",
        "status",
        "createdAt",
        "expiresAt",
        "revokedAt",
        "lastUsedAt",
        "rateLimit"
      ])
      expect([minuteOf(usedFrom), minuteOf(usedUntil)]).toContain(Date.parse(shown.lastUsedAt))
      expect(shown).toMatchObject({ scopes: ["campaigns:write"], rateLimit: null, status: "active", expiresAt })
      const listed = await cliJson(["keys", "list", "--brand", brandId.toUpperCase()], env)
      expect(listed).toEqual([shown])
      expect(await cliJson(["keys", "list", "--brand", crypto.randomUUID()], env)).toEqual([])
    } finally {
      await server.stop()
    }
  })

  it("keys update sets an expiry from now, or clears it; one before a roll's grace ends ends the previous secret then too, and says so", async () => {
    const database = await backend.database()
    const env = { DATABASE_URL: database }
    const server = await startServer(database, backend.env)
    const day = 24 * 3600 * 1000
    try {
      const created = await cliJson(["keys", "create", "--brand", brandId, "--scopes", "campaigns:read"], env)
      const rolled = await cliJson(["keys", "roll", created.keyId, "--grace", "7d"], env)

      // Later than the grace: the grace stays, and nothing is said of it.
      const from = Date.now()
      const later = await runCli(["keys", "update", created.keyId, "--expires-in", "30"], env)
      const until = Date.now()
      expect(later.code, later.stderr).toBe(0)
      const { expiresAt: laterEnd } = await cliJson(["keys", "show", created.keyId], env)
      expect(Date.parse(laterEnd)).toBeGreaterThanOrEqual(from + 30 * day)
      expect(Date.parse(laterEnd)).toBeLessThanOrEqual(until + 30 * day)
      expect(later.stdout).toBe(
        `Updated API key ${created.keyId}: expires ${laterEnd}. It applies from the next request on, on every instance (on PostgreSQL as soon as the change is announced: milliseconds, 1 s at worst).\n`
      )
      await backend.afterKeyChange()
      const beforeCut = await whoami(server.url, created.apiKey)
      expect(beforeCut.headers.get("api-key-expires")).toBe(imfDate(rolled.previousSecretEndsAt))

      // Earlier than the grace: both secrets stop at the expiry, and the command says so.
      const cut = await runCli(["keys", "update", created.keyId, "--expires-in", "2"], env)
      expect(cut.code, cut.stderr).toBe(0)
      const shown = await cliJson(["keys", "show", created.keyId], env)
      expect(Date.parse(shown.expiresAt) - Date.parse(laterEnd)).toBeLessThan(-27 * day)
      expect(cut.stdout).toBe(
        `Updated API key ${created.keyId}: expires ${shown.expiresAt}. It applies from the next request on, on every instance (on PostgreSQL as soon as the change is announced: milliseconds, 1 s at worst). The secret it had before its last roll now stops then too, before its grace would have ended: a key's expiry covers both its secrets.\n`
      )
      const text = await runCli(["keys", "show", created.keyId], env)
      expect(text.stdout).toMatch(new RegExp(`previous secret: +works until ${shown.expiresAt}, last used`))
      await backend.afterKeyChange()
      const [previous, current] = [await whoami(server.url, created.apiKey), await whoami(server.url, rolled.apiKey)]
      expect([previous.status, current.status]).toEqual([200, 200])
      expect(previous.headers.get("api-key-expires")).toBe(imfDate(shown.expiresAt))
      expect(current.headers.get("api-key-expires")).toBe(imfDate(shown.expiresAt))

      // No expiry: the key's secret no longer expires; the grace cut short is not given back.
      const cleared = await runCli(["keys", "update", created.keyId, "--no-expiry"], env)
      expect(cleared.stdout).toBe(
        `Updated API key ${created.keyId}: no expiry. It applies from the next request on, on every instance (on PostgreSQL as soon as the change is announced: milliseconds, 1 s at worst).\n`
      )
      expect(await cliJson(["keys", "show", created.keyId], env)).toMatchObject({ expiresAt: null, status: "active" })
      await backend.afterKeyChange()
      const afterClear = [await whoami(server.url, created.apiKey), await whoami(server.url, rolled.apiKey)]
      expect(afterClear.map((answer) => answer.headers.get("api-key-expires"))).toEqual([
        imfDate(shown.expiresAt),
        null
      ])

      // Create's rules, and create's words.
      const refused = await runCli(["keys", "update", created.keyId, "--expires-in", "36501"], env)
      expect({ code: refused.code, stdout: refused.stdout }).toEqual({ code: 2, stdout: "" })
      expect(refused.stderr.trim()).toBe(
        "--expires-in takes a whole number of days from 1 to 36500, e.g. --expires-in 90."
      )
    } finally {
      await server.stop()
    }
  })

  it("keys show tells when a rolled key's previous secret was last used, apart from the new one's, to watch it stop", async () => {
    const database = await backend.database()
    const env = { DATABASE_URL: database }
    const created = await cliJson(["keys", "create", "--brand", brandId, "--scopes", "campaigns:read"], env)
    const rolled = await cliJson(["keys", "roll", created.keyId, "--grace", "2h"], env)
    const server = await startServer(database, backend.env)
    const usedFrom = Date.now()
    try {
      expect((await whoami(server.url, created.apiKey)).status).toBe(200)
    } finally {
      expect(await server.stop()).toBe(0)
    }
    const usedUntil = Date.now()
    const shown = await runCli(["keys", "show", created.keyId], env)
    expect(shown.code).toBe(0)
    const line = shown.stdout.split("\n").find((line) => line.startsWith("previous secret:"))
    const minutes = [usedFrom, usedUntil].map((millis) =>
      `${new Date(millis - (millis % 60_000)).toISOString().slice(0, 16)}Z`
    )
    expect(minutes.map((minute) => `previous secret: works until ${rolled.previousSecretEndsAt}, last used ${minute}`))
      .toContain(
        line!.replace(/ +/, " ")
      )
    // The new secret unused: the previous one's use is the key's last use.
    expect(shown.stdout).toMatch(new RegExp(`last used: +(${minutes.join("|")})`))
  })

  it("refuses bad input with one sentence, exit 2 for usage and 1 for an unknown key, and changes nothing", async () => {
    const database = await backend.database()
    const env = { DATABASE_URL: database }
    const created = await cliJson([
      "keys",
      "create",
      "--brand",
      brandId,
      "--scopes",
      "campaigns:read",
      "--rate-limit",
      "10/60"
    ], env)
    const before = await cliJson(["keys", "show", created.keyId], env)
    const refusals: ReadonlyArray<readonly [ReadonlyArray<string>, 1 | 2, string]> = [
      [["roll", created.keyId, "--grace", "31d"], 2, "--grace takes 0 or a whole number of minutes, hours or days"],
      [["roll", created.keyId, "--grace", "x"], 2, "--grace takes 0 or a whole number of minutes, hours or days"],
      [["update", created.keyId, "--rate-limit", "0/60"], 2, "--rate-limit takes <requests>/<seconds>"],
      [["update", created.keyId, "--rate-limit", "5"], 2, "--rate-limit takes <requests>/<seconds>"],
      [
        ["create", "--brand", brandId, "--scopes", "campaigns:read", "--rate-limit", "5/0"],
        2,
        "--rate-limit takes <requests>/<seconds>"
      ],
      [["update", created.keyId, "--scopes", "nope"], 2, "--scopes takes a comma-separated list"],
      [["update", created.keyId], 2, "give at least one"],
      [["update", "aaaaaaaaaaaaaaaa", "--name", "x"], 1, "No active API key with id aaaaaaaaaaaaaaaa."],
      [["roll", "aaaaaaaaaaaaaaaa"], 1, "No active API key with id aaaaaaaaaaaaaaaa."],
      [["show", "aaaaaaaaaaaaaaaa"], 1, "No API key with id aaaaaaaaaaaaaaaa."]
    ]
    for (const [args, code, sentence] of refusals) {
      const result = await runCli(["keys", ...args], env)
      expect({ args, code: result.code }).toEqual({ args, code })
      expect(result.stdout).toBe("")
      const said = result.stderr.split("\n").filter((line) => line !== "" && !line.startsWith("Database: "))
      expect(said).toHaveLength(1)
      expect(said[0]).toContain(sentence)
    }
    expect(await cliJson(["keys", "show", created.keyId], env)).toEqual(before)
    expect(await cliJson(["keys", "list"], env)).toEqual([before])
  })
})
