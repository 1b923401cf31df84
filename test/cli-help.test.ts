import { describe, expect, it } from "@effect/vitest"
import { parse } from "../src/Cli/CommandLine.ts"
import { settingsList } from "../src/Config.ts"
import { postgres, runDatabasePrefix, sharedSkipped } from "./support/backends.ts"
import { runCli, tempDatabase } from "./support/server.ts"

const brandId = "0b6f8c1e-4f5a-4c2b-9d7e-1a2b3c4d5e6f"

const plain = (text: string) => text.replace(/\x1b\[[0-9;]*m/g, "")

/** What @effect/cli prints under every entry whatever it is: the type, not what it is for. */
const generic =
  /^(A user-defined piece of text\.|An integer\.|A true or false value\.|One of the following: .*|This setting is optional\.)$/

/** The lines describing `entry` (an option or argument) in a help text, its generic type lines left out. */
const describedAs = (help: string, entry: string): Array<string> => {
  const lines = help.split("\n")
  const start = lines.findIndex((line) => line.trim().startsWith(entry))
  if (start === -1) return []
  const block: Array<string> = []
  for (const line of lines.slice(start + 1)) {
    if (line.trim() !== "" && !line.startsWith("  ")) break
    if (line.trim() !== "") block.push(line.trim())
  }
  return block.filter((line) => !generic.test(line))
}

const help = async (args: ReadonlyArray<string>) => {
  const result = await runCli([...args, "--help"], { DATABASE_URL: tempDatabase() })
  expect({ args, code: result.code }).toEqual({ args, code: 0 })
  return plain(result.stdout)
}

describe("the command line's reading", () => {
  it("finds the command past built-in options and their values, the words help is for, and a bare serve", () => {
    const read = (...args: ReadonlyArray<string>) => {
      const { bareServe, command, words } = parse(["bun", "campaign-api", ...args])
      return { bareServe, command, words }
    }
    expect(read("serve")).toEqual({ bareServe: true, command: "serve", words: ["serve"] })
    expect(read("serve", "--help")).toEqual({ bareServe: false, command: "serve", words: ["serve"] })
    // The heap is sized for this serve too (docs/operators.md, Operating it: Memory): the level is not the command.
    expect(read("--log-level", "debug", "serve")).toEqual({ bareServe: false, command: "serve", words: [] })
    expect(read("--completions", "bash")).toEqual({ bareServe: false, command: undefined, words: [] })
    expect(read("keys", "create", "--brand", brandId, "--json")).toEqual({
      bareServe: false,
      command: "keys",
      words: ["keys", "create"]
    })
    expect(read()).toEqual({ bareServe: false, command: undefined, words: [] })
  })
})

describe("--help", () => {
  it("prints no colour codes and no type-only lines when its output is not a terminal", async () => {
    for (const args of [[], ["keys"], ["keys", "create"]]) {
      const result = await runCli([...args, "--help"], { DATABASE_URL: tempDatabase() })
      expect(result.stdout).not.toMatch(/\x1b\[/)
      expect(result.stdout.split("\n").filter((line) => generic.test(line.trim()) && !/optional|One of/.test(line)))
        .toEqual([])
    }
  })

  it("campaign-api describes itself and lists serve, keys and backup", async () => {
    const text = await help([])
    expect(text).toContain("Campaign Activation and Identity API")
    expect(text).toMatch(/- serve\s+Start the HTTP API/)
    expect(text).toMatch(/- keys\s+Manage API keys/)
    expect(text).toMatch(/- backup <file>\s+Write a consistent copy of the SQLite database/)
  })

  it("keys lists create, list, show, roll, update and revoke with what each does", async () => {
    const text = await help(["keys"])
    expect(text).toContain("Manage API keys")
    expect(text).toMatch(/- create .*\s+Create an API key/)
    expect(text).toMatch(/- list .*\s+List API keys/)
    expect(text).toMatch(/- show .*\s+Show one API key/)
    expect(text).toMatch(/- roll .*\s+Give a key a new secret/)
    expect(text).toMatch(/- update .*\s+Change an active key/)
    expect(text).toMatch(/- revoke .*\s+Revoke an API key/)
  })

  it.each([
    [["keys", "create"], "Create an API key", [
      "--brand",
      "--scopes",
      "--name",
      "--expires-in",
      "--rate-limit",
      "--json"
    ]],
    [["keys", "list"], "List API keys", ["--brand", "--json"]],
    [["keys", "show"], "Show one API key", ["<keyId>", "--json"]],
    [["keys", "roll"], "Give a key a new secret", ["<keyId>", "--grace", "--json"]],
    [["keys", "update"], "Change an active key", [
      "<keyId>",
      "--scopes",
      "--name",
      "--rate-limit",
      "--expires-in",
      "--no-expiry"
    ]],
    [["keys", "revoke"], "Revoke an API key", ["<keyId>"]],
    [["backup"], "Write a consistent copy of the SQLite database", ["<file>"]]
  ])("%j describes the command and every option and argument", async (args, summary, entries) => {
    const text = await help(args)
    expect(text).toContain(summary)
    for (const entry of entries) {
      expect({ entry, described: describedAs(text, entry).length > 0 }).toEqual({ entry, described: true })
    }
  })

  it("serve describes the command and every variable it reads, with its default and meaning, from the configuration's own table", async () => {
    const text = await help(["serve"])
    expect(text).toContain("Start the HTTP API")
    const listed = (name: string) => describedAs(text.slice(text.indexOf("ENVIRONMENT")), name)
    // The table itself is held to what the configuration reads (config.test.ts): these are some of its names.
    for (
      const name of [
        "PORT=3000",
        "SHUTDOWN_DELAY_SECONDS=5",
        "METRICS_PORT (unset)",
        "DOCS_ENABLED=true",
        "OTEL_SERVICE_NAME=campaign-api"
      ]
    ) {
      expect({ name, described: listed(name).length > 0 }).toEqual({ name, described: true })
    }
    for (const { default: fallback, meaning, name } of settingsList) {
      expect(listed(fallback === undefined ? `${name} (unset)` : `${name}=${fallback}`)).toEqual([meaning])
    }
  })
})

describe("help pages", () => {
  it.each(["revoke", "show", "roll", "update"])(
    "keys %s asks for the key id, never the whole key, whose secret would stay in the shell's history",
    async (command) => {
      const text = await help(["keys", command])
      expect(describedAs(text, "<keyId>").join(" ")).toContain("never the whole API key")
      expect(text).not.toContain("cak_")
    }
  )

  it.each([[["keys"], "$ campaign-api keys"], [["keys", "create"], "$ campaign-api keys create --brand"], [
    ["keys", "revoke"],
    "$ campaign-api keys revoke <keyId>"
  ], [["backup"], "$ campaign-api backup <file>"]])(
    "%j names the program and its commands in the usage line",
    async (args, usage) => {
      expect(await help(args)).toContain(usage)
    }
  )

  it("prints help whatever words come before --help (they are not read as a pattern)", async () => {
    const result = await runCli(["a(b", "--help"], { DATABASE_URL: tempDatabase() })
    expect(result.code).toBe(0)
    expect(plain(result.stdout)).toContain("USAGE")
    expect(result.stderr).toBe("")
  })

  it("puts each command's description under it rather than padding the list to the longest usage", async () => {
    const lines = (await help([])).split("\n").filter((line) => line.startsWith("  - "))
    expect(lines.length).toBe(9)
    for (const line of lines) expect(line.trim()).not.toMatch(/\S {2,}\S/)
  })

  it("lists the built-in options once, in the root description, not on every page", async () => {
    for (const args of [[], ["keys"], ["keys", "create"], ["serve"], ["backup"]]) {
      const text = await help(args)
      for (const builtIn of ["--wizard", "--completions", "--log-level"]) expect(text).not.toContain(builtIn)
    }
    expect(await help([])).toMatch(/--help.*--version/)
    const version = await runCli(["--version"], {})
    expect(version.stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/)
  })
})

describe("usage errors say what to do", () => {
  it("an unknown keys command names the keys commands", async () => {
    const result = await runCli(["keys", "delete", "x"], { DATABASE_URL: tempDatabase() })
    expect(result.code).toBe(2)
    expect(result.stderr).toContain("use one of create, list, show, roll, update, revoke")
    expect(result.stderr).not.toContain("serve")
  })

  it.each([
    ["--brand", "--brand needs a value: the brand's UUID, e.g. --brand 0b6f8c1e-4f5a-4c2b-9d7e-1a2b3c4d5e6f."],
    [
      "--scopes",
      "--scopes needs a value: a comma-separated list of campaigns:read, campaigns:write, analytics:read, e.g. --scopes campaigns:read."
    ],
    ["--name", "--name needs a value: a label of at most 200 characters, in quotes if it has spaces."],
    ["--expires-in", "--expires-in needs a value: a whole number of days from 1 to 36500, e.g. --expires-in 90."]
  ])("%s without its value says so and what it takes", async (option, sentence) => {
    const args = [
      "keys",
      "create",
      "--brand",
      brandId,
      "--scopes",
      "campaigns:read",
      "--name",
      "x",
      "--expires-in",
      "3"
    ]
    const at = args.indexOf(option)
    const result = await runCli([...args.slice(0, at), ...args.slice(at + 2), option], { DATABASE_URL: tempDatabase() })
    expect(result.code).toBe(2)
    expect(result.stderr.trim()).toBe(sentence)
  })
})

describe("usage errors speak in one voice", () => {
  const hint = "(run the same command with --help to see what each does)."

  it.each([
    [["key", "list"], `Unknown command 'key': did you mean 'keys'? Use one of serve, keys, backup ${hint}`],
    [["bakup", "x.sqlite"], `Unknown command 'bakup': did you mean 'backup'? Use one of serve, keys, backup ${hint}`],
    [
      ["keys", "lst"],
      `Unknown command 'keys lst': did you mean 'keys list'? Use one of create, list, show, roll, update, revoke ${hint}`
    ],
    [["launch"], `Unknown command 'launch': use one of serve, keys, backup ${hint}`],
    [
      ["keys", "list", "--jsn"],
      "keys list has no option --jsn: did you mean --json? Its options are --brand and --json (run the same command with --help to see what each takes)."
    ],
    [
      ["keys", "create", "--brnd", brandId, "--scopes", "campaigns:read"],
      "keys create has no option --brnd: did you mean --brand? Its options are --brand, --scopes, --name, --expires-in, --rate-limit and --json (run the same command with --help to see what each takes)."
    ],
    [
      ["keys", "list", "--bogus"],
      "keys list has no option --bogus: its options are --brand and --json (run the same command with --help to see what each takes)."
    ]
  ])("a mistyped command or option %j gets the nearest one, when one is near", async (args, sentence) => {
    const result = await runCli(args, { DATABASE_URL: tempDatabase() })
    expect({ code: result.code, stdout: result.stdout, stderr: result.stderr }).toEqual({
      code: 2,
      stdout: "",
      stderr: `${sentence}\n`
    })
  })

  it("a missing --brand says what it takes, with an example", async () => {
    const result = await runCli(["keys", "create", "--scopes", "campaigns:read"], { DATABASE_URL: tempDatabase() })
    expect({ code: result.code, stderr: result.stderr }).toEqual({
      code: 2,
      stderr: "keys create needs --brand: the brand's UUID, e.g. --brand 0b6f8c1e-4f5a-4c2b-9d7e-1a2b3c4d5e6f.\n"
    })
  })

  /** What @effect/cli says of a command line, word for word, at the pinned version. */
  const libraryWords =
    /Invalid subcommand|Expected to find option|Expected a value|Received unknown argument|Missing argument|is not recognized|More than one reference|Missing command name|Collision between/

  it.each([
    ["an unknown command", ["key", "list"]],
    ["an unknown keys command", ["keys", "lst"]],
    ["an option before the keys command", ["keys", "--json", "list"]],
    ["an unknown option", ["keys", "list", "--bogus"]],
    ["an option of another command", ["backup", "--json", "copy.sqlite"]],
    ["a missing --brand", ["keys", "create", "--scopes", "campaigns:read"]],
    ["a --brand that is not a UUID", ["keys", "create", "--brand", "acme", "--scopes", "campaigns:read"]],
    ["an option given twice", ["keys", "create", "--brand", brandId, "--brand", brandId, "--scopes", "campaigns:read"]],
    ["a missing key id", ["keys", "revoke"]],
    ["a word too many", ["keys", "revoke", "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"]],
    ["an unquoted name with a space", [
      "keys",
      "create",
      "--brand",
      brandId,
      "--scopes",
      "campaigns:read",
      "--name",
      "my",
      "key"
    ]],
    ["an option without its value", ["keys", "roll", "aaaaaaaaaaaaaaaa", "--grace"]],
    ["a bad --log-level", ["--log-level", "loud", "keys", "list"]],
    ["serve with an option", ["serve", "--port", "4000"]],
    ["--expires-in with --no-expiry", ["keys", "update", "aaaaaaaaaaaaaaaa", "--expires-in", "3", "--no-expiry"]]
  ])(
    "%s: one sentence of the service's own, naming no program, and the same command with --help prints help",
    async (_, args) => {
      const env = { DATABASE_URL: tempDatabase() }
      const result = await runCli(args, env)
      expect({ args, code: result.code, stdout: result.stdout }).toEqual({ args, code: 2, stdout: "" })
      const lines = result.stderr.trimEnd().split("\n")
      expect(lines).toHaveLength(1)
      expect(lines[0]).toMatch(/^\S.*\.$/)
      expect(lines[0]).not.toMatch(libraryWords)
      expect(lines[0]).not.toContain("campaign-api")
      const helped = await runCli([...args, "--help"], env)
      expect({ args, code: helped.code, stderr: helped.stderr }).toEqual({ args, code: 0, stderr: "" })
      expect(plain(helped.stdout)).toMatch(/^\$ campaign-api/m)
    }
  )
})

describe("serve takes no options", () => {
  it.each([
    [["--port", "4000"], "set PORT=4000 in its environment instead"],
    [["--port=4000"], "set PORT=4000 in its environment instead"],
    [["--shutdown-delay-seconds", "0"], "set SHUTDOWN_DELAY_SECONDS=0 in its environment instead"],
    [["--database-url", "postgres://app:s3cret-word@db/x"], "set DATABASE_URL=<value> in its environment instead"],
    [["--bogus"], "--bogus names none of its variables"]
  ])("serve %j is a usage error naming the environment variable to use instead", async (options, sentence) => {
    const result = await runCli(["serve", ...options], { DATABASE_URL: tempDatabase() })
    expect({ code: result.code, timedOut: result.timedOut, stdout: result.stdout }).toEqual({
      code: 2,
      timedOut: false,
      stdout: ""
    })
    expect(result.stderr.trim().split("\n")).toEqual([expect.stringContaining(sentence)])
    expect(result.stderr).not.toContain("s3cret-word")
  })
})

describe("a PostgreSQL DATABASE_URL that cannot be reached", () => {
  it.each([
    "postgres://app:s3cret-word@127.0.0.1:1/campaigns",
    "postgresql://app@127.0.0.1:1/campaigns?password=s3cret-word&sslmode=disable"
  ])("stops the start with 78 and one sentence that never shows the password: %s", async (url) => {
    const result = await runCli(["serve"], { DATABASE_URL: url })
    expect({ code: result.code, timedOut: result.timedOut }).toEqual({ code: 78, timedOut: false })
    expect(result.stderr.trim().split("\n")).toEqual([
      expect.stringMatching(/^DATABASE_URL=postgres(ql)?:\/\/app.*cannot be reached/)
    ])
    expect(`${result.stdout}${result.stderr}`).not.toContain("s3cret-word")
  })

  it.skipIf(sharedSkipped !== undefined)(
    "that names a database the server does not have says how to create it, for serve and the key commands alike",
    async () => {
      const url = new URL(await postgres.database())
      const name = `${runDatabasePrefix()}never_created`
      url.pathname = `/${name}`
      url.password = "s3cret-word"
      for (
        const args of [["serve"], ["keys", "create", "--brand", brandId, "--scopes", "campaigns:read"], [
          "keys",
          "list"
        ]]
      ) {
        const result = await runCli(args, { DATABASE_URL: url.toString() })
        expect({ args, code: result.code, timedOut: result.timedOut, stdout: result.stdout }).toEqual({
          args,
          code: 78,
          timedOut: false,
          stdout: ""
        })
        expect(result.stderr.trim().split("\n")).toEqual([
          `DATABASE_URL=postgres://${url.username}:***@${url.host}/${name} names a database that does not exist on that server: create it (createdb -h ${url.hostname} -p ${url.port} -U ${url.username} ${name}) or correct the URL.`
        ])
      }
    }
  )
})

describe("a REDIS_URL that cannot be reached at start", () => {
  // Once running, a Redis lost is served through without limits (instances.test.ts); at start it
  // is most likely a mistyped URL, which would leave the server with no limit at all.
  it.each([
    "redis://app:s3cret-word@127.0.0.1:1",
    "redis://:s3cret-word@127.0.0.1:1/0"
  ])("stops the start with 78 and one sentence that never shows the password: %s", async (url) => {
    const result = await runCli(["serve"], { DATABASE_URL: tempDatabase(), REDIS_URL: url })
    expect({ code: result.code, timedOut: result.timedOut, stdout: result.stdout }).toEqual({
      code: 78,
      timedOut: false,
      stdout: ""
    })
    expect(result.stderr.trim().split("\n")).toEqual([
      expect.stringMatching(
        /^REDIS_URL=redis:\/\/.*127\.0\.0\.1:1.* cannot be reached \(connect ECONNREFUSED 127\.0\.0\.1:1\): start Redis or correct the URL\.$/
      )
    ])
    expect(`${result.stdout}${result.stderr}`).not.toContain("s3cret-word")
  })
})

describe("exit codes", () => {
  it("0 for a successful command", async () => {
    const env = { DATABASE_URL: tempDatabase() }
    const created = await runCli(["keys", "create", "--brand", brandId, "--scopes", "campaigns:read", "--json"], env)
    expect(created.code).toBe(0)
    const revoked = await runCli(["keys", "revoke", JSON.parse(created.stdout).keyId], env)
    expect(revoked.code).toBe(0)
  })

  it.each([
    ["an unknown command", ["launch"]],
    ["an unknown keys subcommand", ["keys", "rotate"]],
    ["an unknown option", ["keys", "list", "--bogus"]],
    ["a missing --scopes", ["keys", "create", "--brand", brandId]],
    ["a --brand that is not a UUID", ["keys", "create", "--brand", "acme", "--scopes", "campaigns:read"]],
    ["an unknown scope", ["keys", "create", "--brand", brandId, "--scopes", "campaigns:delete"]],
    ["a missing key id", ["keys", "revoke"]],
    ["a missing backup file", ["backup"]],
    ["a name over 200 characters", [
      "keys",
      "create",
      "--brand",
      brandId,
      "--scopes",
      "campaigns:read",
      "--name",
      "n".repeat(201)
    ]]
  ])("2 and one line on stderr for %s", async (_, args) => {
    const result = await runCli(args, { DATABASE_URL: tempDatabase() })
    expect(result.code).toBe(2)
    expect(result.stdout).toBe("")
    expect(result.stderr.trim().split("\n")).toEqual([expect.stringMatching(/\w/)])
  })

  it("1 for keys revoke of an id with no active key", async () => {
    const env = { DATABASE_URL: tempDatabase() }
    expect((await runCli(["keys", "create", "--brand", brandId, "--scopes", "campaigns:read"], env)).code).toBe(0)
    const result = await runCli(["keys", "revoke", "aaaaaaaaaaaaaaaa"], env)
    expect(result.code).toBe(1)
    expect(result.stderr).toContain("aaaaaaaaaaaaaaaa")
  })

  it.each([
    ["PORT", "http"],
    ["PORT", "70000"],
    ["PORT", ""],
    ["HOST", " "],
    ["DATABASE_URL", "sqlite:"],
    ["RATE_LIMIT_MAX", "0"],
    ["RATE_LIMIT_WINDOW_SECONDS", "-1"],
    ["IDEMPOTENCY_TTL_HOURS", "0"],
    ["IDEMPOTENCY_TTL_HOURS", "0.0000001"],
    ["LOG_LEVEL", "loud"],
    ["OTEL_EXPORTER_OTLP_ENDPOINT", "not a url"],
    ["DATABASE_POOL_MAX", "1"],
    ["REDIS_URL", "http://127.0.0.1:6379"]
  ])("78 and a message naming %s for the bad value %j", async (name, value) => {
    const result = await runCli(["serve"], { DATABASE_URL: tempDatabase(), [name]: value })
    expect({ code: result.code, timedOut: result.timedOut }).toEqual({ code: 78, timedOut: false })
    expect(result.stderr).toContain(name)
  })
})
