import { BunContext } from "@effect/platform-bun"
import { SqliteClient, SqliteMigrator } from "@effect/sql-sqlite-bun"
import { describe, expect, it } from "@effect/vitest"
import { Database } from "bun:sqlite"
import { ConfigProvider, Effect, Either } from "effect"
import { existsSync, readFileSync } from "node:fs"
import { dirname, join, relative } from "node:path"
import {
  configProblems,
  DatabaseConfig,
  databaseName,
  KeysConfig,
  ServeConfig,
  settingsList,
  TrustedProxiesConfig,
  TrustedProxyHeaderConfig
} from "../src/Config.ts"
import CreateTables from "../src/Database/migrations/0001_create_tables.ts"
import { root, runCli, startServer, tempDatabase } from "./support/server.ts"
import { logLines } from "./support/telemetry.ts"

/** What reading `config` from exactly these variables says: its value, or one sentence per bad variable. */
const read = <A>(config: Effect.Effect<A, unknown>, variables: Record<string, string>) =>
  Effect.runSync(
    Effect.either(Effect.withConfigProvider(config, ConfigProvider.fromMap(new Map(Object.entries(variables)))))
  ).pipe(
    Either.mapLeft((error) => configProblems(error as Parameters<typeof configProblems>[0]))
  )

describe("configuration (docs/operators.md, Configuration)", () => {
  it.each([
    ["PORT", "abc", "PORT=abc: not a port number; use one from 0 to 65535 (0 picks a free port)."],
    ["PORT", "70000", "PORT=70000: not a port number; use one from 0 to 65535 (0 picks a free port)."],
    ["RATE_LIMIT_MAX", "0", "RATE_LIMIT_MAX=0: not a whole number above 0; give one, or leave it unset for 120."],
    [
      "CONNECTIONS_PER_ADDRESS",
      "0",
      "CONNECTIONS_PER_ADDRESS=0: not a whole number above 0; give one, or leave it unset for 1024."
    ],
    [
      "CONNECTIONS_PER_PROXY",
      "many",
      "CONNECTIONS_PER_PROXY=many: not a whole number above 0; give one, or leave it unset for 4096."
    ],
    [
      "LOG_LEVEL",
      "verbose",
      "LOG_LEVEL=verbose: not a log level; use one of all, trace, debug, info, warn, warning, error, fatal, none."
    ],
    [
      "PUBLIC_URL",
      "localhost:3000",
      "PUBLIC_URL=localhost:3000: not an http:// or https:// URL; give the base URL clients call, e.g. https://api.example.com."
    ],
    [
      "DATABASE_URL",
      "",
      "DATABASE_URL is empty; give a SQLite file path (sqlite: prefix allowed), or a postgres:// or postgresql:// URL, or leave it unset for data/campaign-api.sqlite."
    ],
    [
      "SHUTDOWN_DELAY_SECONDS",
      "soon",
      "SHUTDOWN_DELAY_SECONDS=soon: not a number of seconds from 0 to 300; leave it unset for 5."
    ],
    [
      "DOCS_ENABLED",
      "maybe",
      "DOCS_ENABLED=maybe: neither true nor false; use true or false (or yes/no, on/off, 1/0)."
    ],
    [
      "HOST",
      " ",
      "HOST= : names no address; use 0.0.0.0 (every interface), 127.0.0.1 or one of this machine's addresses."
    ],
    [
      "METRICS_PORT",
      "metrics",
      "METRICS_PORT=metrics: not a port number; use one from 0 to 65535 (0 picks a free port), or leave it unset for no metrics."
    ],
    ["METRICS_PORT", "3000", "METRICS_PORT=3000: the API's own PORT; give the metrics a port of their own."],
    [
      "METRICS_HOST",
      "",
      "METRICS_HOST=: names no address; use 127.0.0.1 (this machine only), 0.0.0.0 or one of this machine's addresses."
    ],
    [
      "TRUSTED_PROXY_HEADER",
      "X-Real-IP",
      "TRUSTED_PROXY_HEADER=X-Real-IP: not a header the client is read from; use X-Forwarded-For or Forwarded, whichever the trusted proxies write, or leave it unset for X-Forwarded-For."
    ]
  ])("%s=%j is one sentence naming the variable, its value and what to do", (name, value, sentence) => {
    expect(read(ServeConfig, { [name]: value })).toEqual(Either.left([sentence]))
  })

  it("names every bad variable at once, one sentence each", () => {
    const problems = read(ServeConfig, {
      PORT: "abc",
      RATE_LIMIT_MAX: "0",
      LOG_LEVEL: "verbose",
      DATABASE_URL: "",
      PUBLIC_URL: "localhost:3000",
      REDIS_URL: "http://127.0.0.1:6379"
    })
    expect(Either.isLeft(problems) && [...problems.left].map((line) => line.split(/[= ]/)[0]).sort()).toEqual(
      ["DATABASE_URL", "LOG_LEVEL", "PORT", "PUBLIC_URL", "RATE_LIMIT_MAX", "REDIS_URL"]
    )
  })

  it.each([
    "postgress://app:s3cret-word@127.0.0.1:5432/campaigns",
    "mysql://app:s3cret-word@127.0.0.1:3306/campaigns",
    "POSTGRESS://app:s3cret-word@db/campaigns",
    "file:s3cret-word.sqlite",
    "postgres:///s3cret-word"
  ])("a DATABASE_URL of another scheme or without a host is refused, never taken as a file name: %s", (url) => {
    const problems = read(KeysConfig, { DATABASE_URL: url })
    expect(problems).toEqual(
      Either.left([expect.stringMatching(/^DATABASE_URL (has the scheme|is a PostgreSQL URL without a host)/)])
    )
    expect(JSON.stringify(problems)).not.toContain("s3cret-word")
  })

  it.each([
    ["data/campaign-api.sqlite", { _tag: "sqlite", filename: "data/campaign-api.sqlite" }],
    ["sqlite:data/x.sqlite", { _tag: "sqlite", filename: "data/x.sqlite" }],
    ["sqlite:///var/lib/x.sqlite", { _tag: "sqlite", filename: "/var/lib/x.sqlite" }],
    ["./name:with-colon.sqlite", { _tag: "sqlite", filename: "./name:with-colon.sqlite" }]
  ])("DATABASE_URL=%s is a SQLite file", (url, target) => {
    expect(read(DatabaseConfig, { DATABASE_URL: url })).toEqual(Either.right(target))
  })

  it("names the database without a password: the SQLite file's absolute path, PostgreSQL's host and database", () => {
    const postgres = read(DatabaseConfig, {
      DATABASE_URL: "postgresql://app:s3cret-word@db.internal:5433/campaigns?sslmode=require"
    })
    expect(Either.map(postgres, databaseName)).toEqual(Either.right("postgres://db.internal:5433/campaigns"))
    const sqlite = read(DatabaseConfig, { DATABASE_URL: "data/x.sqlite" })
    expect(Either.map(sqlite, databaseName)).toEqual(Either.right(join(process.cwd(), "data/x.sqlite")))
  })
})

describe("the table of variables (docs/operators.md, Configuration)", () => {
  /** The names `config` asks the environment for, read from exactly these variables. */
  const namesRead = (config: Effect.Effect<unknown, unknown>, variables: Record<string, string> = {}) => {
    const asked = new Set<string>()
    const { flattened } = ConfigProvider.fromMap(new Map(Object.entries(variables)))
    const recording = ConfigProvider.fromFlat(ConfigProvider.makeFlat({
      load: (path, primitive, split) => {
        asked.add(path.join("_"))
        return flattened.load(path, primitive, split)
      },
      enumerateChildren: flattened.enumerateChildren,
      patch: flattened.patch
    }))
    Effect.runSync(Effect.either(Effect.withConfigProvider(config, recording)))
    return [...asked].sort()
  }

  it("is exactly what serve reads, and every default in it is a value the variable takes", () => {
    expect(namesRead(ServeConfig)).toEqual(settingsList.map(({ name }) => name).sort())
    expect(read(ServeConfig, {})).toEqual(Either.right(expect.anything()))
  })

  it("is the table of docs/operators.md, Configuration: the same variables, in the same order, with the same defaults", () => {
    const operators = readFileSync(join(root, "docs/operators.md"), "utf8")
    const section = operators.slice(
      operators.indexOf("\n## Configuration\n"),
      operators.indexOf("\n## ", operators.indexOf("\n## Configuration\n") + 1)
    )
    const rows = section.split("\n").filter((line) => /^\| `[A-Z_]+` \|/.test(line)).map((line) => {
      const [name, fallback] = line.split("|").slice(1, 3).map((cell) => cell.trim().replaceAll("`", ""))
      return [name, fallback]
    })
    expect(rows).toEqual(settingsList.map(({ default: fallback, name }) => [name, fallback ?? "unset"]))
  })
})

describe("serve with a bad configuration", () => {
  it("exits 78 with every bad variable named, one line each, and starts nothing", async () => {
    const result = await runCli(["serve"], {
      DATABASE_URL: tempDatabase(),
      PORT: "abc",
      RATE_LIMIT_MAX: "0",
      LOG_LEVEL: "verbose",
      PUBLIC_URL: "localhost:3000",
      TRUSTED_PROXY_HEADER: "X-Real-IP"
    })
    expect({ code: result.code, timedOut: result.timedOut, stdout: result.stdout }).toEqual({
      code: 78,
      timedOut: false,
      stdout: ""
    })
    expect(result.stderr.trim().split("\n").map((line) => line.split("=")[0]).sort()).toEqual(
      ["LOG_LEVEL", "PORT", "PUBLIC_URL", "RATE_LIMIT_MAX", "TRUSTED_PROXY_HEADER"]
    )
  })

  it("a DATABASE_URL scheme typo stops the start without creating anything or printing the password", async () => {
    const result = await runCli(["serve"], { DATABASE_URL: "postgress://app:s3cret-word@127.0.0.1:5432/x" })
    expect({ code: result.code, timedOut: result.timedOut }).toEqual({ code: 78, timedOut: false })
    expect(result.stderr.trim().split("\n")).toEqual([
      "DATABASE_URL has the scheme \"postgress:\", which this service does not take; use a SQLite file path (sqlite: prefix allowed), or a postgres:// or postgresql:// URL."
    ])
    expect(`${result.stdout}${result.stderr}`).not.toContain("s3cret-word")
    // Taken as a file path, it would have been made relative to the working directory, the checkout.
    expect(existsSync(join(root, "postgress:"))).toBe(false)
  })
})

describe("a start refused for a busy PORT or an unreachable REDIS_URL (docs/operators.md, Configuration)", () => {
  /** The migrations a SQLite database has had. */
  const migrationsOf = (database: string) => {
    const db = new Database(database, { readonly: true })
    try {
      return db.query("SELECT name FROM effect_sql_migrations ORDER BY migration_id").all()
    } finally {
      db.close()
    }
  }

  it("makes no database, nor its directory, and migrates none that is there", async () => {
    const older = tempDatabase()
    await SqliteMigrator.run({ loader: SqliteMigrator.fromRecord({ "0001_create_tables": CreateTables }) }).pipe(
      Effect.provide(SqliteClient.layer({ filename: older })),
      Effect.provide(BunContext.layer),
      Effect.runPromise
    )
    const busy = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } })
    try {
      const refusals: ReadonlyArray<readonly [string, Record<string, string>]> = [
        ["PORT", { PORT: String(busy.port) }],
        ["REDIS_URL", { REDIS_URL: "redis://127.0.0.1:1" }]
      ]
      for (const [variable, env] of refusals) {
        const directory = join(dirname(tempDatabase()), "data")
        for (const database of [join(directory, "campaign-api.sqlite"), older]) {
          const result = await runCli(["serve"], { ...env, DATABASE_URL: database })
          expect({ database, code: result.code, stderr: result.stderr.trim().split("\n") }).toEqual({
            database,
            code: 78,
            stderr: [expect.stringMatching(new RegExp(`^${variable}=`))]
          })
        }
        expect(existsSync(directory)).toBe(false)
        expect(migrationsOf(older)).toEqual([{ name: "create_tables" }])
      }
    } finally {
      busy.stop(true)
    }
  })
})

describe("the start-up log", () => {
  it("names the database by its absolute path, and says when it made the file and its directory", async () => {
    const database = join(dirname(tempDatabase()), "new-folder", "db.sqlite")
    const first = await startServer(relative(root, database))
    await first.stop()
    const created = logLines(first.logs()).find((line) => line.annotations?.database !== undefined)
    expect(created).toMatchObject({
      message: "created a new database",
      annotations: { database, createdDirectory: dirname(database) }
    })
    const again = await startServer(database, { LOG_LEVEL: "warn" })
    await again.stop()
    expect(logLines(again.logs()).find((line) => line.annotations?.database !== undefined)).toMatchObject({
      message: "database",
      annotations: { database }
    })
  })
})

describe("TRUSTED_PROXIES (docs/operators.md, Configuration)", () => {
  it.each([
    ["127.0.0.1", [{ address: "127.0.0.1", prefix: 32, family: "ipv4" }]],
    ["10.0.0.0/8, fd00::/8", [{ address: "10.0.0.0", prefix: 8, family: "ipv4" }, {
      address: "fd00::",
      prefix: 8,
      family: "ipv6"
    }]],
    ["::1 192.168.0.0/16", [{ address: "::1", prefix: 128, family: "ipv6" }, {
      address: "192.168.0.0",
      prefix: 16,
      family: "ipv4"
    }]]
  ])("takes addresses and CIDRs: %s", (value, proxies) => {
    expect(read(TrustedProxiesConfig, { TRUSTED_PROXIES: value })).toEqual(Either.right(proxies))
  })

  it("trusts none when unset", () => {
    expect(read(TrustedProxiesConfig, {})).toEqual(Either.right([]))
  })

  it.each([
    [{}, "x-forwarded-for"],
    [{ TRUSTED_PROXY_HEADER: "Forwarded" }, "forwarded"],
    [{ TRUSTED_PROXY_HEADER: " x-forwarded-for " }, "x-forwarded-for"]
  ])("reads the client from the one header TRUSTED_PROXY_HEADER names: %j", (variables, header) => {
    expect(read(TrustedProxyHeaderConfig, variables)).toEqual(Either.right(header))
  })

  it.each(["localhost", "10.0.0.0/33", "10.0.0.0/8/8", "fd00::/129", "10.0.0.1/-1", "10.0.0.1/ 8"])(
    "refuses %j with one sentence naming it",
    (value) => {
      const problems = read(ServeConfig, { TRUSTED_PROXIES: `127.0.0.1,${value}` })
      expect(problems).toEqual(
        Either.left([
          expect.stringMatching(/^TRUSTED_PROXIES=.*: .* is not an address or a CIDR; give them separated by commas/)
        ])
      )
    }
  )
})
