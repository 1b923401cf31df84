/**
 * The benchmark's baseline: the service's essential work with no framework, on `Bun.serve` and
 * `bun:sqlite` alone. It is the physical limit the service is measured against.
 *
 * - The service's schema (it opens a database prepared by the service's own `keys create`), WAL,
 *   `synchronous = FULL` and the same busy timeout.
 * - whoami: parse the bearer key, look it up by key id (prepared statement), SHA-256 the secret and
 *   compare it in constant time, check revocation and expiry, answer the service's body.
 * - activate: authenticate, check the scope and the Idempotency-Key, parse and validate the body, then
 *   in one transaction look the (brand, key) up and replay it, or insert the activation and the
 *   idempotency row (the service's columns) and answer the service's body.
 *
 * - reads: authenticate, check the scope (`campaigns:read`, or `campaigns:write`), then a record by
 *   id and brand (answered as activate did, with a SHA-256 ETag), or a page of the brand's records
 *   newest first, `limit` and `campaignId` (lowercased), one more row than the page for `hasMore`.
 *
 * With a `postgres://` DATABASE_URL the same work runs on PostgreSQL through Bun's own client
 * (`Bun.SQL`, a pool of 10), each activation in one transaction, durable at commit.
 *
 * With a REDIS_URL, every authenticated request also makes the rate limit's one Redis round trip
 * (Bun's own client, `RedisClient`): a token taken from the key's bucket by a script of the same
 * work as the service's (two GETs and two SETs with expiry, `EVALSHA`), a 429 when it is empty, so
 * that `bench:shared` compares the service with a bare server doing the same essential work.
 *
 * Not done here (the service does it): rate limiting without Redis, logging, the full error catalogue.
 *
 *   PORT=3001 DATABASE_URL=/tmp/x.sqlite bun bench/baseline.ts
 *   PORT=3001 DATABASE_URL=postgres://postgres@127.0.0.1:5432/x REDIS_URL=redis://127.0.0.1:6379 bun bench/baseline.ts
 */
import { RedisClient, SQL } from "bun"
import { Database } from "bun:sqlite"
import { createHash, timingSafeEqual } from "node:crypto"

const port = Number(process.env.PORT ?? "3001")
const hostname = process.env.HOST ?? "127.0.0.1"
const databaseUrl = process.env.DATABASE_URL ?? "data/baseline.sqlite"
const idempotencyTtlMillis = 24 * 60 * 60 * 1000

interface KeyRow {
  readonly brand_id: string
  readonly scopes: string
  readonly secret_sha256: string
  readonly expires_at: number | string | null
  readonly revoked_at: number | string | null
}

interface IdempotencyRow {
  readonly fingerprint: string
  readonly status_code: number
  readonly response_body: string
}

type ActivationRow = [string, string, string, string, string, string, string, string | null, string]
type IdempotencyInsert = [string, string, string, string, number, string, number, number]

/** The statements, on either database; SQLite's answer synchronously, PostgreSQL's in a promise. */
interface StoredActivation {
  readonly id: string
  readonly campaign_id: string
  readonly creator_id: string
  readonly status: string
  readonly social_username: string
  readonly planned_post_at: string | null
  readonly activated_at: string
}

interface Store {
  readonly findKey: (keyId: string) => KeyRow | null | Promise<KeyRow | null>
  readonly findActivation: (brandId: string, id: string) => StoredActivation | null | Promise<StoredActivation | null>
  readonly pageByCampaign: (
    brandId: string,
    campaignId: string,
    limit: number
  ) => ReadonlyArray<StoredActivation> | Promise<ReadonlyArray<StoredActivation>>
  /** In one transaction: `work` gets the statements of that transaction. */
  readonly transaction: <A>(work: (tx: Transaction) => A | Promise<A>) => A | Promise<A>
  readonly close: () => void
}

interface Transaction {
  readonly deleteExpiredKey: (brandId: string, key: string, now: number) => unknown
  readonly findIdempotency: (brandId: string, key: string) => IdempotencyRow | null | Promise<IdempotencyRow | null>
  readonly insertActivation: (row: ActivationRow) => unknown
  readonly insertIdempotency: (row: IdempotencyInsert) => unknown
}

const activationColumns =
  "(id, brand_id, key_id, creator_id, campaign_id, status, social_username, planned_post_at, activated_at)"
const idempotencyColumns =
  "(brand_id, idempotency_key, fingerprint, resource_id, status_code, response_body, created_at, expires_at)"

const sqliteStore = (filename: string): Store => {
  const db = new Database(filename, { create: false, strict: true })
  db.run("PRAGMA journal_mode = WAL")
  db.run("PRAGMA synchronous = FULL")
  db.run("PRAGMA busy_timeout = 5000")
  // The schema is the service's: bench/run.ts prepares this database with the service's own
  // `keys create`, which runs its migrations.
  const migrated = db.query("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'idempotency_keys'").get()
  if (migrated === null) throw new Error(`${filename} has no schema: create a key in it with the service's CLI first`)
  const findKey = db.query<KeyRow, [string]>(
    "SELECT brand_id, scopes, secret_sha256, expires_at, revoked_at FROM api_keys WHERE key_id = ?"
  )
  // The service replaces an expired entry of the same key; the baseline deletes it first.
  const deleteExpiredKey = db.query<never, [string, string, number]>(
    "DELETE FROM idempotency_keys WHERE brand_id = ? AND idempotency_key = ? AND expires_at <= ?"
  )
  const findIdempotency = db.query<IdempotencyRow, [string, string]>(
    "SELECT fingerprint, status_code, response_body FROM idempotency_keys WHERE brand_id = ? AND idempotency_key = ?"
  )
  const insertActivation = db.query<never, ActivationRow>(
    `INSERT INTO activations ${activationColumns} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
  )
  const insertIdempotency = db.query<never, IdempotencyInsert>(
    `INSERT INTO idempotency_keys ${idempotencyColumns} VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
  )
  const readColumns = "id, campaign_id, creator_id, status, social_username, planned_post_at, activated_at"
  const findActivation = db.query<StoredActivation, [string, string]>(
    `SELECT ${readColumns} FROM activations WHERE id = ? AND brand_id = ?`
  )
  const pageByCampaign = db.query<StoredActivation, [string, string, number]>(
    `SELECT ${readColumns} FROM activations WHERE brand_id = ? AND lower(campaign_id) = ? ORDER BY id DESC LIMIT ?`
  )
  const tx: Transaction = {
    deleteExpiredKey: (brandId, key, now) => deleteExpiredKey.run(brandId, key, now),
    findIdempotency: (brandId, key) => findIdempotency.get(brandId, key),
    insertActivation: (row) => insertActivation.run(...row),
    insertIdempotency: (row) => insertIdempotency.run(...row)
  }
  return {
    findKey: (keyId) => findKey.get(keyId),
    findActivation: (brandId, id) => findActivation.get(id, brandId),
    pageByCampaign: (brandId, campaignId, limit) => pageByCampaign.all(brandId, campaignId, limit),
    transaction: (work) => db.transaction(() => work(tx))(),
    close: () => db.close()
  }
}

const postgresStore = (url: string): Store => {
  const sql = new SQL(url, { max: 10 })
  return {
    findKey: async (keyId) =>
      ((await sql`SELECT brand_id, scopes, secret_sha256, expires_at, revoked_at FROM api_keys WHERE key_id = ${keyId}`) as Array<
        KeyRow
      >)[0] ?? null,
    findActivation: async (brandId, id) =>
      ((await sql`SELECT id, campaign_id, creator_id, status, social_username, planned_post_at, activated_at
                  FROM activations WHERE id = ${id} AND brand_id = ${brandId}`) as Array<StoredActivation>)[0] ?? null,
    pageByCampaign: async (brandId, campaignId, limit) =>
      (await sql`SELECT id, campaign_id, creator_id, status, social_username, planned_post_at, activated_at
                 FROM activations WHERE brand_id = ${brandId} AND lower(campaign_id) = ${campaignId}
                 ORDER BY id DESC LIMIT ${limit}`) as Array<StoredActivation>,
    transaction: (work) =>
      sql.begin((db) =>
        work({
          deleteExpiredKey: (brandId, key, now) =>
            db`DELETE FROM idempotency_keys WHERE brand_id = ${brandId} AND idempotency_key = ${key} AND expires_at <= ${now}`,
          findIdempotency: async (brandId, key) =>
            ((await db`SELECT fingerprint, status_code, response_body FROM idempotency_keys
                       WHERE brand_id = ${brandId} AND idempotency_key = ${key}`) as Array<IdempotencyRow>)[0] ?? null,
          insertActivation: (row) =>
            db.unsafe(`INSERT INTO activations ${activationColumns} VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, [
              ...row
            ]),
          insertIdempotency: (row) =>
            db.unsafe(`INSERT INTO idempotency_keys ${idempotencyColumns} VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, [
              ...row
            ])
        })
      ) as never,
    close: () => void sql.close()
  }
}

const store = /^postgres(ql)?:\/\//.test(databaseUrl)
  ? postgresStore(databaseUrl)
  : sqliteStore(databaseUrl.replace(/^sqlite:(\/\/)?/, ""))

/** `value`, or what it resolves to: SQLite's answers stay synchronous (no extra turn of the event loop). */
const then = <A, B>(value: A | Promise<A>, f: (a: A) => B | Promise<B>): B | Promise<B> =>
  value instanceof Promise ? value.then(f) : f(value)

const jsonHeaders = { "content-type": "application/json" }

const json = (status: number, body: string, headers: Record<string, string> = {}): Response =>
  new Response(body, { status, headers: { ...jsonHeaders, ...headers } })

const error = (status: number, code: string, message: string, headers: Record<string, string> = {}): Response =>
  json(status, JSON.stringify({ ok: false, code, message }), headers)

const unauthorized = () =>
  error(401, "UNAUTHORIZED", "The API key is missing or invalid.", { "www-authenticate": "Bearer" })

// ---------------------------------------------------------------------------------------------
// Authentication

interface Identity {
  readonly keyId: string
  readonly brandId: string
  readonly scopes: ReadonlyArray<string>
}

const bearerFormat = /^bearer +cak_([a-z0-9]{16})_([0-9a-f]{64}) *$/i
const decoyDigest = createHash("sha256").update("decoy").digest()

// ---------------------------------------------------------------------------------------------
// The rate limit's Redis round trip (with REDIS_URL only)

const tokenBucket = `
local tokens = tonumber(redis.call("GET", KEYS[1]))
local last = tonumber(redis.call("GET", KEYS[2]))
local refill_ms, limit, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if not tokens then tokens, last = limit, now end
local refilled = math.floor((now - last) / refill_ms)
if refilled > 0 then tokens, last = math.min(tokens + refilled, limit), last + refilled * refill_ms end
local ttl = math.ceil(refill_ms * limit)
redis.call("SET", KEYS[1], tokens > 0 and tokens - 1 or 0, "PX", ttl)
redis.call("SET", KEYS[2], last, "PX", ttl)
return tokens > 0 and 1 or 0
`
const rateLimitMax = Number(process.env.RATE_LIMIT_MAX ?? "120")
const refillMillis = String((Number(process.env.RATE_LIMIT_WINDOW_SECONDS ?? "60") * 1000) / rateLimitMax)

/** Takes a token of the key's bucket: whether there was one. */
const takeToken: ((keyId: string) => Promise<boolean>) | undefined = await (async () => {
  if (process.env.REDIS_URL === undefined) return undefined
  const redis = new RedisClient(process.env.REDIS_URL)
  const sha = String(await redis.send("SCRIPT", ["LOAD", tokenBucket]))
  return async (keyId: string) =>
    (await redis.send("EVALSHA", [
      sha,
      "2",
      `baseline:{${keyId}}`,
      `baseline:{${keyId}}:refill`,
      refillMillis,
      String(rateLimitMax),
      String(Date.now())
    ])) === 1
})()

const limited = Symbol("limited")

type Authenticated = Identity | undefined | typeof limited

const authenticate = (request: Request): Authenticated | Promise<Authenticated> => {
  const match = bearerFormat.exec(request.headers.get("authorization") ?? "")
  if (match === null) return undefined
  const keyId = match[1]!
  return then(store.findKey(keyId), (row): Authenticated | Promise<Authenticated> => {
    const identity = checkKey(keyId, match[2]!, row)
    if (identity === undefined || takeToken === undefined) return identity
    return takeToken(keyId).then((taken) => (taken ? identity : limited))
  }) as Authenticated | Promise<Authenticated>
}

const rateLimited = () => error(429, "RATE_LIMITED", "Too many requests.", { "retry-after": "1" })

const checkKey = (keyId: string, secret: string, row: KeyRow | null): Identity | undefined => {
  const presented = createHash("sha256").update(secret).digest()
  const expected = row === null ? decoyDigest : Buffer.from(row.secret_sha256, "hex")
  const secretMatches = timingSafeEqual(presented, expected)
  if (!secretMatches || row === null || row.revoked_at !== null) return undefined
  if (row.expires_at !== null && Number(row.expires_at) <= Date.now()) return undefined
  return { keyId, brandId: row.brand_id, scopes: row.scopes === "" ? [] : row.scopes.split(" ") }
}

// ---------------------------------------------------------------------------------------------
// whoami

const whoami = (request: Request): Response | Promise<Response> =>
  then(
    authenticate(request),
    (identity) =>
      identity === undefined
        ? unauthorized()
        : identity === limited
        ? rateLimited()
        : json(200, JSON.stringify({ ok: true, ...identity }))
  )

// ---------------------------------------------------------------------------------------------
// activate

const uuid = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
const activatePath = new RegExp(`^/v1/creators/(${uuid})/campaigns/(${uuid})/activate$`)
const idempotencyKeyFormat = /^[\x21-\x7e]{1,255}$/
const dateFormat = /^\d{4}-\d{2}-\d{2}$/

interface ActivateBody {
  readonly socialUsername: string
  readonly plannedPostAt: string | null
}

/** The body's rules, minimally: the validated body or the message naming what is wrong. */
const validateBody = (value: unknown): ActivateBody | string => {
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return "The request body must be a JSON object."
  }
  const body = value as Record<string, unknown>
  for (const field of Object.keys(body)) {
    if (field !== "socialUsername" && field !== "plannedPostAt") return `${field} is not a known field.`
  }
  const { socialUsername, plannedPostAt = null } = body
  if (typeof socialUsername !== "string" || !socialUsername.startsWith("@") || socialUsername.length < 2) {
    return `socialUsername must start with "@"`
  }
  if (plannedPostAt !== null && (typeof plannedPostAt !== "string" || !dateFormat.test(plannedPostAt))) {
    return "plannedPostAt must be a date in the form YYYY-MM-DD"
  }
  return { socialUsername, plannedPostAt }
}

interface Activation {
  readonly identity: Identity
  readonly key: string
  readonly fingerprint: string
  readonly creatorId: string
  readonly campaignId: string
  readonly body: ActivateBody
}

/** One transaction: replay or conflict on a known key, else the activation and its stored response. */
const activateOnce = (input: Activation) =>
  store.transaction((tx) => {
    const now = Date.now()
    return then(tx.deleteExpiredKey(input.identity.brandId, input.key, now), () =>
      then(tx.findIdempotency(input.identity.brandId, input.key), (stored) =>
        replayOrInsert(tx, input, now, stored)))
  })

const replayOrInsert = (tx: Transaction, input: Activation, now: number, stored: IdempotencyRow | null) => {
  const { identity, key, fingerprint, body } = input
  if (stored !== null) {
    if (stored.fingerprint !== fingerprint) {
      return error(
        409,
        "IDEMPOTENCY_CONFLICT",
        "This Idempotency-Key was already used with a different request; use a new key for a new request."
      )
    }
    return json(stored.status_code, stored.response_body, { "idempotent-replayed": "true" })
  }
  const activation = {
    id: crypto.randomUUID(),
    campaignId: input.campaignId,
    creatorId: input.creatorId,
    status: "ACTIVE" as const,
    socialUsername: body.socialUsername,
    plannedPostAt: body.plannedPostAt,
    activatedAt: new Date(now).toISOString()
  }
  const responseBody = JSON.stringify({ ok: true, activation })
  const inserted = tx.insertActivation([
    activation.id,
    identity.brandId,
    identity.keyId,
    activation.creatorId,
    activation.campaignId,
    activation.status,
    activation.socialUsername,
    activation.plannedPostAt,
    activation.activatedAt
  ])
  return then(inserted, () =>
    then(
      tx.insertIdempotency([
        identity.brandId,
        key,
        fingerprint,
        activation.id,
        200,
        responseBody,
        now,
        now + idempotencyTtlMillis
      ]),
      () => json(200, responseBody)
    ))
}

const activate = async (request: Request, path: string, ids: RegExpExecArray): Promise<Response> => {
  const identity = await authenticate(request)
  if (identity === undefined) return unauthorized()
  if (identity === limited) return rateLimited()
  if (!identity.scopes.includes("campaigns:write")) {
    return error(403, "FORBIDDEN", `This API key lacks the scope "campaigns:write" that this operation requires.`)
  }
  const key = request.headers.get("idempotency-key")?.trim() ?? ""
  if (key === "") return error(400, "IDEMPOTENCY_KEY_REQUIRED", "The Idempotency-Key header is required.")
  if (!idempotencyKeyFormat.test(key)) {
    return error(400, "VALIDATION_ERROR", "Idempotency-Key must be 1 to 255 visible ASCII characters")
  }
  const contentType = request.headers.get("content-type")
  if (contentType !== null && contentType.split(";")[0]!.trim().toLowerCase() !== "application/json") {
    return error(415, "UNSUPPORTED_MEDIA_TYPE", "Content-Type must be application/json.")
  }
  let parsed: unknown
  try {
    parsed = JSON.parse(await request.text())
  } catch {
    return error(400, "MALFORMED_JSON", "The request body is not valid JSON.")
  }
  const body = validateBody(parsed)
  if (typeof body === "string") return error(400, "VALIDATION_ERROR", body)
  // The service's fingerprint: method, path and the body's canonical JSON (keys sorted).
  const canonical = JSON.stringify({ plannedPostAt: body.plannedPostAt, socialUsername: body.socialUsername })
  const fingerprint = createHash("sha256").update(`POST\n${path}\n${canonical}`).digest("hex")
  return activateOnce({ identity, key, fingerprint, creatorId: ids[1]!, campaignId: ids[2]!, body })
}

// ---------------------------------------------------------------------------------------------
// reads

const toActivation = (row: StoredActivation) => ({
  id: row.id,
  campaignId: row.campaign_id,
  creatorId: row.creator_id,
  status: row.status,
  socialUsername: row.social_username,
  plannedPostAt: row.planned_post_at,
  activatedAt: row.activated_at
})

const readableBy = (identity: Identity) =>
  identity.scopes.includes("campaigns:read") || identity.scopes.includes("campaigns:write")
const cannotRead = () =>
  error(403, "FORBIDDEN", `This API key lacks the scope "campaigns:read" that this operation requires.`)
const activationIdPath = new RegExp(`^/v1/activations/(${uuid})$`)

const getActivation = (request: Request, id: string): Response | Promise<Response> =>
  then(authenticate(request), (identity) => {
    if (identity === undefined) return unauthorized()
    if (identity === limited) return rateLimited()
    if (!readableBy(identity)) return cannotRead()
    return then(store.findActivation(identity.brandId, id.toLowerCase()), (row) => {
      if (row === null) return error(404, "NOT_FOUND", `No activation ${id}.`)
      const body = JSON.stringify({ ok: true, activation: toActivation(row) })
      return json(200, body, { etag: `"${Bun.SHA256.hash(body, "base64url").slice(0, 27)}"` })
    })
  })

const listActivations = (request: Request, url: URL): Response | Promise<Response> =>
  then(authenticate(request), (identity) => {
    if (identity === undefined) return unauthorized()
    if (identity === limited) return rateLimited()
    if (!readableBy(identity)) return cannotRead()
    const limit = Number(url.searchParams.get("limit") ?? "20")
    const campaignId = url.searchParams.get("campaignId")?.toLowerCase() ?? ""
    return then(
      store.pageByCampaign(identity.brandId, campaignId, limit + 1),
      (rows) =>
        json(
          200,
          JSON.stringify({
            ok: true,
            activations: rows.slice(0, limit).map(toActivation),
            hasMore: rows.length > limit
          })
        )
    )
  })

// ---------------------------------------------------------------------------------------------

const server = Bun.serve({
  hostname,
  port,
  async fetch(request) {
    const url = new URL(request.url)
    if (url.pathname === "/v1/whoami" && request.method === "GET") return whoami(request)
    if (url.pathname === "/v1/activations" && request.method === "GET") return listActivations(request, url)
    const read = activationIdPath.exec(url.pathname)
    if (read !== null && request.method === "GET") return getActivation(request, read[1]!)
    const ids = activatePath.exec(url.pathname)
    if (ids !== null && request.method === "POST") return activate(request, url.pathname, ids)
    // The open-loop bench starts a fresh instance's load on its first 200 here, as it does the service's.
    if (url.pathname === "/readyz") return json(200, JSON.stringify({ ok: true, status: "ready" }))
    return error(404, "NOT_FOUND", `No route for ${request.method} ${url.pathname}.`)
  }
})

console.error(`baseline listening on http://${server.hostname}:${server.port}`)

const shutdown = () => {
  server.stop(true)
  store.close()
  process.exit(0)
}
process.on("SIGTERM", shutdown)
process.on("SIGINT", shutdown)
