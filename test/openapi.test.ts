import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Validator } from "@seriousme/openapi-schema-validator"
import addFormats from "ajv-formats"
import Ajv2020 from "ajv/dist/2020"
import { grantedBy, Scope } from "../src/Domain/ApiKey.ts"
import { activate, activatePath, type Answer, call } from "./support/client.ts"
import { declaredOperations } from "./support/declared.ts"
import { type InProcessServer, serveInProcess } from "./support/inProcess.ts"
import { createKey, runCli, tempDatabase } from "./support/server.ts"

type Json = Record<string, any>

const rateLimitMax = 3
const publicUrl = "https://campaigns.example.test/"

let server: InProcessServer
let database: string
let document: Json

beforeAll(async () => {
  database = tempDatabase()
  server = await serveInProcess(database, { RATE_LIMIT_MAX: String(rateLimitMax), PUBLIC_URL: publicUrl })
  const answer = await call(server.url, { path: "/openapi.json" })
  expect(answer.status).toBe(200)
  expect(answer.headers.get("content-type")).toMatch(/^application\/json/)
  document = answer.json
})

afterAll(async () => {
  await server?.stop()
})

const operations = () =>
  Object.entries<Json>(document.paths).flatMap(([path, methods]) =>
    Object.entries<Json>(methods).map(([method, operation]) => ({ path, method, operation }))
  )

const operation = (operationId: string): Json => {
  const found = operations().find(({ operation }) => operation.operationId === operationId)
  if (found === undefined) throw new Error(`no operation ${operationId}`)
  return found.operation
}

const component = (ref: string): Json => {
  const prefix = "#/components/schemas/"
  if (!ref.startsWith(prefix)) throw new Error(`not a component schema: ${ref}`)
  const schema = document.components.schemas[ref.slice(prefix.length)]
  if (schema === undefined) throw new Error(`dangling $ref ${ref}`)
  return schema
}

const responseSchema = (response: Json): Json => response.content["application/json"].schema

const alternatives = (schema: Json): Array<Json> =>
  (schema.anyOf ?? schema.oneOf ?? [schema]).map((s: Json) => (s.$ref === undefined ? s : component(s.$ref)))

/** A response's headers by name, each a reusable one (`#/components/headers/…`) resolved. */
const headersOf = (response: Json): Record<string, Json> =>
  Object.fromEntries(
    Object.entries<Json>(response.headers ?? {}).map(([name, header]) => {
      if (header.$ref === undefined) return [name, header]
      const prefix = "#/components/headers/"
      if (!String(header.$ref).startsWith(prefix)) throw new Error(`not a component header: ${header.$ref}`)
      const resolved = document.components.headers?.[header.$ref.slice(prefix.length)]
      if (resolved === undefined) throw new Error(`dangling $ref ${header.$ref}`)
      return [name, resolved]
    })
  )

/** Another spelling of the path (404) or another method (405): any operation's path may get them. */
const routeMisses = { "404": ["NOT_FOUND"], "405": ["METHOD_NOT_ALLOWED"] }

/** A query parameter an operation does not take, or one given twice: any operation may get it. */
const unknownQuery = { "400": ["VALIDATION_ERROR"] }

/** A read's: a bad path id or query parameter, the key, its rate limit and its scope. */
const readErrors = {
  "400": ["VALIDATION_ERROR"],
  "401": ["UNAUTHORIZED"],
  "403": ["FORBIDDEN"],
  "429": ["RATE_LIMITED"],
  ...routeMisses,
  "500": ["INTERNAL_ERROR"],
  "503": ["SERVICE_UNAVAILABLE"]
}

/** The error codes of docs/integrators.md (Errors) for each operation, by status. */
const contractErrors: Record<string, Record<string, Array<string>>> = {
  "activations.activate": {
    "400": ["IDEMPOTENCY_KEY_REQUIRED", "MALFORMED_JSON", "VALIDATION_ERROR"],
    "401": ["UNAUTHORIZED"],
    "403": ["FORBIDDEN"],
    "409": ["IDEMPOTENCY_CONFLICT", "IDEMPOTENCY_IN_PROGRESS"],
    "413": ["PAYLOAD_TOO_LARGE"],
    "415": ["UNSUPPORTED_MEDIA_TYPE"],
    "429": ["RATE_LIMITED"],
    ...routeMisses,
    "500": ["INTERNAL_ERROR"],
    "503": ["SERVICE_UNAVAILABLE"]
  },
  "activations.get": readErrors,
  "activations.list": readErrors,
  // The brand's line (docs/integrators.md, Analytics) refuses with a 429 of its own.
  "analytics.campaign": { ...readErrors, "429": ["CONCURRENCY_LIMITED", "RATE_LIMITED"] },
  "identity.whoami": {
    ...unknownQuery,
    "401": ["UNAUTHORIZED"],
    "429": ["RATE_LIMITED"],
    ...routeMisses,
    "500": ["INTERNAL_ERROR"],
    "503": ["SERVICE_UNAVAILABLE"]
  },
  "health.alive": { ...unknownQuery, ...routeMisses, "500": ["INTERNAL_ERROR"], "503": ["SERVICE_UNAVAILABLE"] },
  "health.ready": { ...unknownQuery, ...routeMisses, "500": ["INTERNAL_ERROR"], "503": ["SERVICE_UNAVAILABLE"] }
}

/** The operations a GET route answers: the GET, and HEAD, as the GET without its body. */
const getOperations = declaredOperations.filter(({ method }) => method === "get").map(({ operationId }) => operationId)

/** The operations that need an API key, as the definition declares them. */
const secured = declaredOperations.filter(({ secured }) => secured).map(({ operationId }) => operationId)

// HTTP's own, which no operation's response lists.
const standardHeaders = ["content-type", "content-length", "date", "connection", "keep-alive"]

describe("GET /openapi.json", () => {
  it("is a valid OpenAPI 3.1 document", async () => {
    expect(document.openapi).toMatch(/^3\.1\./)
    const result = await new Validator().validate(document)
    expect(result.errors ?? []).toEqual([])
    expect(result.valid).toBe(true)
  })

  it("matches the reviewed snapshot of the wire contract", async () => {
    await expect(`${JSON.stringify(document, null, 2)}\n`).toMatchFileSnapshot("__snapshots__/openapi.json")
  })

  it("has exactly the definition's operations and HEAD on each GET, the nine of docs/integrators.md among them, and every $ref resolves", () => {
    const listed = operations().map(({ method, operation, path }) => [operation.operationId, method, path]).sort()
    expect(listed).toEqual(
      declaredOperations.flatMap(({ documentPath, method, operationId }) => [
        [operationId, method, documentPath],
        ...(method === "get" ? [[`${operationId}.head`, "head", documentPath]] : [])
      ]).sort()
    )
    expect(listed).toEqual(expect.arrayContaining([
      ["activations.activate", "post", "/v1/creators/{creatorId}/campaigns/{campaignId}/activate"],
      ["activations.get", "get", "/v1/activations/{activationId}"],
      ["activations.get.head", "head", "/v1/activations/{activationId}"],
      ["activations.list", "get", "/v1/activations"],
      ["activations.list.head", "head", "/v1/activations"],
      ["analytics.campaign", "get", "/v1/campaigns/{campaignId}/analytics"],
      ["analytics.campaign.head", "head", "/v1/campaigns/{campaignId}/analytics"],
      ["documents.index", "get", "/"],
      ["documents.index.head", "head", "/"],
      ["documents.openApi", "get", "/openapi.json"],
      ["documents.openApi.head", "head", "/openapi.json"],
      ["health.alive", "get", "/healthz"],
      ["health.alive.head", "head", "/healthz"],
      ["health.ready", "get", "/readyz"],
      ["health.ready.head", "head", "/readyz"],
      ["identity.whoami", "get", "/v1/whoami"],
      ["identity.whoami.head", "head", "/v1/whoami"]
    ]))
    const refs = [...JSON.stringify(document).matchAll(/"\$ref":"([^"]+)"/g)].map((match) => match[1]!)
    expect(refs.length).toBeGreaterThan(0)
    for (const ref of refs.filter((ref) => !ref.startsWith("#/components/headers/"))) {
      expect(() => component(ref)).not.toThrow()
    }
    for (const { operation } of operations()) {
      for (const response of Object.values<Json>(operation.responses)) expect(() => headersOf(response)).not.toThrow()
    }
  })

  it("never mentions HttpApiDecodeError, which never reaches the wire", () => {
    expect(JSON.stringify(document)).not.toContain("HttpApiDecodeError")
    expect(Object.keys(document.components.schemas)).not.toContain("Issue")
  })

  it("documents every error response as the envelope with exactly the codes of docs/integrators.md", () => {
    for (const [operationId, expected] of Object.entries(contractErrors)) {
      const responses: Json = operation(operationId).responses
      const documented = Object.fromEntries(
        Object.entries(responses)
          .filter(([status]) => Number(status) >= 400)
          .map(([status, response]) => {
            const codes = alternatives(responseSchema(response)).map((schema) => {
              expect(schema).toMatchObject({
                type: "object",
                required: ["ok", "code", "message"],
                properties: { ok: { enum: [false] }, message: { type: "string" } },
                additionalProperties: false
              })
              expect(schema.properties.code.enum).toHaveLength(1)
              return schema.properties.code.enum[0] as string
            })
            return [status, codes.sort()]
          })
      )
      expect({ operationId, errors: documented }).toEqual({ operationId, errors: expected })
    }
  })

  it("declares the bearer scheme, with its format, on the key-protected operations only, and the scope each needs", () => {
    expect(document.components.securitySchemes).toEqual({
      bearer: expect.objectContaining({
        type: "http",
        scheme: "bearer",
        bearerFormat: "cak_<keyId>_<secret>",
        description: expect.any(String)
      })
    })
    // As the definition declares them: the scope an operation requires is the middleware that checks it.
    const scopes = Object.fromEntries(
      declaredOperations.map(({ operationId, scope }) => [operationId, scope === undefined ? [] : [scope]])
    )
    // Each scope that grants the one required is an alternative: a writer may read (docs/integrators.md, Reads).
    for (const { operationId } of declaredOperations) {
      expect(operation(operationId).security).toEqual(
        secured.includes(operationId)
          ? (scopes[operationId]!.length === 0
            ? [{ bearer: [] }]
            : grantedBy(scopes[operationId]![0]!).map((scope) => ({ bearer: [scope] })))
          : []
      )
    }
    expect(operation("activations.list").security).toEqual([{ bearer: ["campaigns:read"] }, {
      bearer: ["campaigns:write"]
    }])
    // And those are the scopes of docs/integrators.md (docs/integrators.md, Reads and Analytics).
    expect(scopes).toMatchObject({
      "activations.activate": ["campaigns:write"],
      "activations.get": ["campaigns:read"],
      "activations.list": ["campaigns:read"],
      "analytics.campaign": ["analytics:read"],
      "identity.whoami": [],
      "health.alive": [],
      "health.ready": [],
      "documents.index": [],
      "documents.openApi": []
    })
  })

  it("carries the version that --version prints", async () => {
    const printed = await runCli(["--version"], {})
    expect(printed.code).toBe(0)
    expect(printed.stdout.trim()).toBe(document.info.version)
  })

  it("gives examples for the request, the answers and the parameters, each valid by its own schema", () => {
    const ajv = new Ajv2020({ strict: false })
    addFormats(ajv)
    for (const [name, schema] of Object.entries<Json>(document.components.schemas)) {
      ajv.addSchema(schema, `#/components/schemas/${name}`)
    }
    const withExamples = ["ActivateRequest", "ActivateResponse", "Identity"]
    for (const name of withExamples) {
      const schema = component(`#/components/schemas/${name}`)
      expect(schema.examples, name).toEqual([expect.any(Object)])
      const validate = ajv.getSchema(`#/components/schemas/${name}`)!
      expect({ name, valid: validate(schema.examples[0]), errors: validate.errors ?? null }).toEqual({
        name,
        valid: true,
        errors: null
      })
    }
    for (const parameter of operation("activations.activate").parameters as Array<Json>) {
      expect({ name: parameter.name, valid: ajv.validate(parameter.schema, parameter.example) }).toEqual({
        name: parameter.name,
        valid: true
      })
    }
  })

  it("bounds what it can: integer counts, the page's limit and size, the ids' and days' lengths, the scopes", () => {
    const analytics = component("#/components/schemas/CampaignAnalytics").properties
    for (const count of [analytics.activations, analytics.creators, analytics.unscheduled]) {
      expect(count).toMatchObject({ type: "integer", minimum: 0 })
    }
    expect(component("#/components/schemas/ActivationsOnDay").properties.activations).toMatchObject({
      type: "integer",
      minimum: 0
    })
    expect(component("#/components/schemas/PlannedPostsOnDay").properties.posts).toMatchObject({
      type: "integer",
      minimum: 0
    })
    const list: Array<Json> = operation("activations.list").parameters
    expect(list.find((p) => p.name === "limit")!.schema).toMatchObject({
      type: "integer",
      minimum: 1,
      maximum: 100,
      default: 20
    })
    for (const name of ["creatorId", "campaignId", "startingAfter"]) {
      expect(list.find((p) => p.name === name)!.schema).toMatchObject({ format: "uuid", minLength: 36, maxLength: 36 })
    }
    for (const { operation } of operations()) {
      for (const parameter of (operation.parameters ?? []).filter((p: Json) => p.in === "path")) {
        expect(parameter.schema, `${operation.operationId} ${parameter.name}`).toMatchObject({ maxLength: 36 })
      }
    }
    for (const name of ["from", "to"]) {
      expect(operation("analytics.campaign").parameters.find((p: Json) => p.name === name).schema).toMatchObject({
        maxLength: 10
      })
    }
    expect(component("#/components/schemas/ActivationList").properties.activations.maxItems).toBe(100)
    expect(component("#/components/schemas/Identity").properties.scopes.maxItems).toBe(Scope.literals.length)
    for (const { operation } of operations()) {
      for (const [status, response] of Object.entries<Json>(operation.responses)) {
        const retryAfter = response.headers?.["Retry-After"]
        if (retryAfter !== undefined) {
          expect(retryAfter.schema, `${operation.operationId} ${status}`).toMatchObject({
            type: "integer",
            format: "int32",
            minimum: 1
          })
        }
      }
    }
  })

  it("declares HEAD on each GET route as the GET without content: its parameters, security, statuses and headers", () => {
    for (const operationId of getOperations) {
      const { responses, ...get } = operation(operationId)
      const head = operation(`${operationId}.head`)
      expect(head).toMatchObject({ parameters: get.parameters, security: get.security, tags: get.tags })
      expect(head.requestBody).toBeUndefined()
      expect(Object.keys(head.responses), operationId).toEqual(Object.keys(responses))
      for (const [status, response] of Object.entries<Json>(head.responses)) {
        expect(response.content, `${operationId}.head ${status}`).toBeUndefined()
        expect(response.headers, `${operationId}.head ${status}`).toEqual(responses[status].headers)
      }
    }
  })

  it("declares X-Content-Type-Options: nosniff, required, on every response of every operation", () => {
    for (const { operation } of operations()) {
      for (const [status, response] of Object.entries<Json>(operation.responses)) {
        expect(headersOf(response)["X-Content-Type-Options"], `${operation.operationId} ${status}`).toMatchObject({
          required: true,
          schema: { type: "string", enum: ["nosniff"] }
        })
      }
    }
  })

  it("says on each operation's 400 that a query parameter it does not take is refused, and on the analytics' that `from` after `to` is", () => {
    for (const { operation } of operations()) {
      expect(operation.responses["400"]?.description, operation.operationId).toContain(
        "A query parameter the operation does not take, or one given twice, is `VALIDATION_ERROR`"
      )
    }
    const analytics = operation("analytics.campaign")
    expect(analytics.responses["400"].description).toContain("`from` after `to` is `VALIDATION_ERROR`")
    const [from, to] = ["from", "to"].map((name) => analytics.parameters.find((p: Json) => p.name === name))
    expect([from.description, to.description]).toEqual([
      expect.stringContaining("After `to`: 400 `VALIDATION_ERROR`"),
      expect.stringContaining("Before `from`: 400 `VALIDATION_ERROR`")
    ])
  })

  it("lists If-None-Match on the get, and names a contact", () => {
    expect(operation("activations.get").parameters).toContainEqual(
      expect.objectContaining({ name: "If-None-Match", in: "header", required: false })
    )
    expect(document.info.contact).toEqual({ name: expect.any(String) })
  })

  it("names PUBLIC_URL as its server", () => {
    expect(document.servers).toEqual([{ url: "https://campaigns.example.test", description: expect.any(String) }])
  })

  it("gives ids, dates and times their formats", () => {
    const activation = component("#/components/schemas/Activation").properties
    expect([activation.id.format, activation.campaignId.format, activation.creatorId.format]).toEqual([
      "uuid",
      "uuid",
      "uuid"
    ])
    expect(activation.activatedAt.format).toBe("date-time")
    expect(alternatives(activation.plannedPostAt).map((s) => s.format ?? s.type)).toEqual(["date", "null"])
    expect(component("#/components/schemas/Identity").properties.brandId.format).toBe("uuid")
  })

  it("requires the Idempotency-Key header on activate, in its two forms: a bare key or the same quoted, each 1 to 255 characters", () => {
    const parameters: Array<Json> = operation("activations.activate").parameters
    const headers = parameters.filter((p) => p.in === "header")
    expect(headers).toEqual([expect.objectContaining({ name: "Idempotency-Key", required: true })])
    expect(parameters.filter((p) => p.in === "path").map((p) => p.name)).toEqual(["creatorId", "campaignId"])
    const forms: Array<Json> = headers[0]!.schema.anyOf
    expect(forms.map((form) => [form.title, form.type])).toEqual([["Key", "string"], ["Quoted key", "string"]])
    const ajv = new Ajv2020({ strict: false })
    const [bare, quoted] = forms.map((form) => ajv.compile(form))
    expect([bare!("k".repeat(255)), bare!("k".repeat(256)), bare!("\"k\"")]).toEqual([true, false, false])
    // 255 escaped double quotes: 512 characters as sent, 255 once unquoted.
    expect([quoted!(`"${"\\\"".repeat(255)}"`), quoted!(`"${"k".repeat(256)}"`), quoted!("k")]).toEqual([
      true,
      false,
      false
    ])
    expect(forms.filter((form) => form.maxLength > 255)).toEqual([])
  })

  it("documents X-Request-Id, RateLimit, RateLimit-Policy, Retry-After, Idempotent-Replayed and WWW-Authenticate", () => {
    for (const operationId of Object.keys(contractErrors)) {
      for (const [status, response] of Object.entries<Json>(operation(operationId).responses)) {
        const headers = Object.keys(response.headers ?? {})
        const where = `${operationId} ${status}`
        expect(headers, where).toContain("X-Request-Id")
        expect(headersOf(response)["X-Request-Id"].required, where).toBe(true)
        // A 405 is answered before the key is read, a 401 refuses it; a route's 404, a 500 or a 503
        // may come before the key is checked: there the RateLimit headers may be missing.
        const limited = secured.includes(operationId) && status !== "401" && status !== "405"
        // Nor does a 429 that is no measure of the key's quota (docs/integrators.md, Analytics: the brand's line).
        const unmetered = status === "429" && contractErrors[operationId]!["429"]!.includes("CONCURRENCY_LIMITED")
        const always = limited && !["404", "500", "503"].includes(status) && !unmetered
        for (const name of ["RateLimit", "RateLimit-Policy"]) {
          expect(headers.includes(name), `${where} ${name}`).toBe(limited)
          if (limited) expect(headersOf(response)[name]!.required === true, `${where} ${name} required`).toBe(always)
        }
        if (status === "429") expect(headers, where).toContain("Retry-After")
        if (secured.includes(operationId) && (status === "401" || status === "403")) {
          expect(headers, where).toContain("WWW-Authenticate")
        }
      }
    }
    expect(Object.keys(operation("activations.activate").responses["200"].headers)).toContain("Idempotent-Replayed")
    expect(Object.keys(operation("activations.activate").responses["409"].headers)).toContain("Retry-After")
  })

  it("has a title, a description, and a summary and description on every operation and response", () => {
    expect(document.info.title).toBe("Campaign Activation and Identity API")
    expect(document.info.description.length).toBeGreaterThan(20)
    expect(document.info.version).toMatch(/^\d+\.\d+\.\d+$/)
    for (const { operation } of operations()) {
      expect(operation.summary, operation.operationId).toEqual(expect.stringMatching(/\w/))
      expect(operation.description, operation.operationId).toEqual(expect.stringMatching(/\w/))
      for (const [status, response] of Object.entries<Json>(operation.responses)) {
        expect(response.description, `${operation.operationId} ${status}`).toEqual(expect.stringMatching(/\w/))
      }
      for (const parameter of operation.parameters ?? []) {
        expect(parameter.description, `${operation.operationId} ${parameter.name}`).toEqual(expect.stringMatching(/\w/))
      }
    }
    expect(operation("activations.activate").summary).toBe("Activate a campaign for a creator")
    expect(operation("identity.whoami").summary).toBe("Resolve the API key")
  })
})

describe("live responses against the document", () => {
  const ajv = new Ajv2020({ allErrors: true, strict: true })
  addFormats(ajv)

  beforeAll(() => {
    for (const [name, schema] of Object.entries<Json>(document.components.schemas)) {
      ajv.addSchema(schema, `#/components/schemas/${name}`)
    }
  })

  const templateOf = (path: string): string | undefined =>
    Object.keys(document.paths).find((template) =>
      new RegExp(`^${template.replace(/\{[^}]+\}/g, "[^/]+")}$`).test(path)
    )

  /**
   * Checks an answer against the document's operation for the method and path it was sent to: a
   * status it lists, a body its schema takes (none for HEAD, as the document says), and the headers
   * it lists.
   */
  const conforms = (method: string, path: string, answer: Answer) => {
    const template = templateOf(path.split("?")[0]!)
    expect(template, `${method} ${path} is documented`).toBeDefined()
    const documented: Json | undefined = document.paths[template!][method.toLowerCase()]
    expect(documented, `${method} ${template} is an operation of the document`).toBeDefined()
    expect(Object.keys(documented!.responses), `${documented!.operationId} lists ${answer.status}`).toContain(
      String(answer.status)
    )
    const response: Json = documented!.responses[String(answer.status)]
    if (method === "HEAD") {
      expect(response.content, `${documented!.operationId} ${answer.status} has no content`).toBeUndefined()
      expect(answer.text).toBe("")
    } else {
      const validate = ajv.compile(responseSchema(response))
      expect(answer.headers.get("content-type")).toMatch(/^application\/json/)
      expect(
        { body: answer.json, errors: validate(answer.json) ? [] : validate.errors },
        `${documented!.operationId} ${answer.status}`
      ).toEqual({ body: answer.json, errors: [] })
    }
    const declared = headersOf(response)
    const documentedHeaders = Object.keys(declared).map((name) => name.toLowerCase())
    const ownHeaders: Array<string> = []
    answer.headers.forEach((_, name) => {
      if (!standardHeaders.includes(name)) ownHeaders.push(name)
    })
    expect(documentedHeaders, `${documented!.operationId} ${answer.status} documents what it sends`).toEqual(
      expect.arrayContaining(ownHeaders)
    )
    const required = Object.entries<Json>(declared).filter(([, header]) => header.required === true)
      .map(([name]) => name.toLowerCase())
    expect(
      required.filter((name) => !answer.headers.has(name)),
      `${documented!.operationId} ${answer.status} sends what it requires`
    )
      .toEqual([])
    for (const [name, header] of Object.entries<Json>(declared)) {
      const value = answer.headers.get(name)
      if (value !== null && header.schema?.enum !== undefined) {
        expect(header.schema.enum, `${documented!.operationId} ${answer.status} ${name}`).toContain(value)
      }
    }
  }

  it("a path of another spelling (404) and another method (405, with Allow) are answered as each operation documents", async () => {
    const wrongMethod = await call(server.url, { method: "DELETE", path: "/v1/whoami" })
    expect(wrongMethod.status).toBe(405)
    conforms("GET", "/v1/whoami", wrongMethod)
    const activateAsGet = await call(server.url, { path: activatePath() })
    expect(activateAsGet.status).toBe(405)
    conforms("POST", activatePath(), activateAsGet)
    const encoded = await call(server.url, { path: activatePath().replace(/activate$/, "%61ctivate"), method: "POST" })
    expect(encoded.status).toBe(404)
    conforms("POST", activatePath(), encoded)
  })

  it("whoami: 200, 401 and 429", async () => {
    const key = await createKey(database, { scopes: ["analytics:read"] })
    const ok = await call(server.url, { path: "/v1/whoami", apiKey: key.apiKey })
    expect(ok.status).toBe(200)
    conforms("GET", "/v1/whoami", ok)
    const anonymous = await call(server.url, { path: "/v1/whoami" })
    expect(anonymous.status).toBe(401)
    conforms("GET", "/v1/whoami", anonymous)
    for (let i = 1; i < rateLimitMax; i++) await call(server.url, { path: "/v1/whoami", apiKey: key.apiKey })
    const limited = await call(server.url, { path: "/v1/whoami", apiKey: key.apiKey })
    expect(limited.status).toBe(429)
    conforms("GET", "/v1/whoami", limited)
  })

  it("activate: 200, its replay and a conflicting reuse (409)", async () => {
    const writer = await createKey(database)
    const key = `contract-${crypto.randomUUID()}`
    const body = { socialUsername: "@contract", plannedPostAt: "2026-12-01" }
    const created = await activate(server.url, { apiKey: writer.apiKey, key, body })
    expect(created.status).toBe(200)
    conforms("POST", activatePath(), created)
    const replayed = await activate(server.url, { apiKey: writer.apiKey, key, body })
    expect(replayed.headers.get("idempotent-replayed")).toBe("true")
    conforms("POST", activatePath(), replayed)
    const conflict = await activate(server.url, { apiKey: writer.apiKey, key, body: { socialUsername: "@other" } })
    expect(conflict.json.code).toBe("IDEMPOTENCY_CONFLICT")
    conforms("POST", activatePath(), conflict)
  })

  it("activate: 400s, 403, 413 and 415", async () => {
    const send = async (headers: Record<string, string>, body: string, scope: Scope = "campaigns:write") => {
      const { apiKey } = await createKey(database, { scopes: [scope] })
      return call(server.url, { method: "POST", path: activatePath(), apiKey, headers, body })
    }
    const json = { "content-type": "application/json" }
    const withKey = () => ({ ...json, "idempotency-key": `contract-${crypto.randomUUID()}` })
    const answers: Array<[string, Answer]> = [
      ["VALIDATION_ERROR", await send(withKey(), JSON.stringify({ socialUsername: "jane" }))],
      ["MALFORMED_JSON", await send(withKey(), "{not json")],
      ["IDEMPOTENCY_KEY_REQUIRED", await send(json, JSON.stringify({ socialUsername: "@jane" }))],
      ["FORBIDDEN", await send(withKey(), JSON.stringify({ socialUsername: "@jane" }), "campaigns:read")],
      ["PAYLOAD_TOO_LARGE", await send(withKey(), JSON.stringify({ socialUsername: `@${"a".repeat(17 * 1024)}` }))],
      ["UNSUPPORTED_MEDIA_TYPE", await send({ ...withKey(), "content-type": "text/plain" }, "@jane")]
    ]
    for (const [code, answer] of answers) {
      expect(answer.json?.code).toBe(code)
      conforms("POST", activatePath(), answer)
    }
  })

  it("healthz and readyz: 200", async () => {
    for (const path of ["/healthz", "/readyz"]) {
      const answer = await call(server.url, { path })
      expect(answer.status).toBe(200)
      conforms("GET", path, answer)
    }
  })

  /** A key of one brand that may call every operation: a new one each time, as the rate limit is 3 a minute. */
  const brandId = crypto.randomUUID()
  const everything = () =>
    createKey(database, { brandId, scopes: ["campaigns:write", "campaigns:read", "analytics:read"] })

  it("a query parameter the operation does not take: the 400 each operation declares", async () => {
    const { json } = await activate(server.url, {
      apiKey: (await everything()).apiKey,
      key: `contract-${crypto.randomUUID()}`,
      body: { socialUsername: "@contract" }
    })
    const paths = [
      "/v1/whoami",
      "/healthz",
      "/readyz",
      "/v1/activations",
      `/v1/activations/${json.activation.id}`,
      `/v1/campaigns/${crypto.randomUUID()}/analytics`
    ]
    for (const path of paths) {
      const answer = await call(server.url, { path: `${path}?x=1`, apiKey: (await everything()).apiKey })
      expect({ path, status: answer.status, code: answer.json?.code }).toEqual({
        path,
        status: 400,
        code: "VALIDATION_ERROR"
      })
      conforms("GET", path, answer)
    }
    const posted = await activate(server.url, {
      apiKey: (await everything()).apiKey,
      key: `contract-${crypto.randomUUID()}`,
      path: `${activatePath()}?x=1`,
      body: { socialUsername: "@contract" }
    })
    expect([posted.status, posted.json.code]).toEqual([400, "VALIDATION_ERROR"])
    conforms("POST", activatePath(), posted)
  })

  it("analytics: `from` after `to` is the 400 it declares, and a range its 200", async () => {
    const { apiKey } = await everything()
    const path = `/v1/campaigns/${crypto.randomUUID()}/analytics`
    const backwards = await call(server.url, { path: `${path}?from=2026-12-02&to=2026-12-01`, apiKey })
    expect([backwards.status, backwards.json.code]).toEqual([400, "VALIDATION_ERROR"])
    conforms("GET", path, backwards)
    const ranged = await call(server.url, { path: `${path}?from=2026-12-01&to=2026-12-01`, apiKey })
    expect(ranged.status).toBe(200)
    conforms("GET", path, ranged)
  })

  it("list: `limit` in each decimal spelling of an integer from 1 to 100 is the 200 it declares", async () => {
    const { apiKey } = await everything()
    for (const limit of ["05", "%2B5", "5.0"]) {
      const answer = await call(server.url, { path: `/v1/activations?limit=${limit}`, apiKey })
      expect({ limit, status: answer.status }).toEqual({ limit, status: 200 })
      conforms("GET", "/v1/activations", answer)
    }
  })

  it("HEAD on each GET route: answered as the head operation the document declares, without a body", async () => {
    const { json } = await activate(server.url, {
      apiKey: (await everything()).apiKey,
      key: `contract-${crypto.randomUUID()}`,
      body: { socialUsername: "@contract" }
    })
    const record = `/v1/activations/${json.activation.id}`
    const { headers } = await call(server.url, { path: record, apiKey: (await everything()).apiKey })
    const analytics = `/v1/campaigns/${crypto.randomUUID()}/analytics`
    const heads: Array<[string, Record<string, string>, number]> = [
      ["/healthz", {}, 200],
      ["/healthz?x=1", {}, 400],
      ["/readyz", {}, 200],
      ["/v1/whoami", {}, 401],
      ["/v1/whoami", {}, 200],
      ["/v1/whoami?x=1", {}, 400],
      [record, {}, 200],
      [record, { "if-none-match": headers.get("etag")! }, 304],
      [`/v1/activations/${crypto.randomUUID()}`, {}, 404],
      ["/v1/activations", {}, 200],
      ["/v1/activations?limit=0", {}, 400],
      [analytics, {}, 200],
      [`${analytics}?from=2026-12-02&to=2026-12-01`, {}, 400]
    ]
    for (const [path, sent, status] of heads) {
      const apiKey = status === 401 ? undefined : (await everything()).apiKey
      const answer = await call(server.url, { method: "HEAD", path, apiKey, headers: sent })
      expect({ path, status: answer.status }).toEqual({ path, status })
      conforms("HEAD", path, answer)
    }
  })
})
