import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { backends } from "./support/backends.ts"
import { activate, type Answer, uniqueKey, whoami } from "./support/client.ts"
import { expectEnvelope } from "./support/contract.ts"
import { type InProcessServer, serveInProcess } from "./support/inProcess.ts"
import { shuffle } from "./support/load.ts"
import { createKey } from "./support/server.ts"

describe.each(backends)("on $name", (backend) => {
  describe("idempotency under contention", () => {
    let database: string
    let server: InProcessServer

    beforeAll(async () => {
      database = await backend.database()
      server = await serveInProcess(database, { ...backend.env, RATE_LIMIT_MAX: "1000000" })
    })
    afterAll(async () => {
      await server?.stop()
    })

    it("makes one record per (brand, key) from 300 concurrent requests over 5 keys: the same body gets the original's bytes, another body 409", async () => {
      const brandId = crypto.randomUUID()
      const apiKeys = [await createKey(database, { brandId }), await createKey(database, { brandId })]
      const keys = Array.from({ length: 5 }, () => uniqueKey())
      const requests = shuffle(keys.flatMap((key, k) =>
        Array.from({ length: 60 }, (_, i) => ({
          key,
          body: { socialUsername: i % 3 === 0 ? `@other-${k}` : `@same-${k}` },
          apiKey: apiKeys[i % 2]!.apiKey
        }))
      ))

      const answers = await Promise.all(requests.map(async (request) => ({
        ...request,
        answer: await activate(server.url, request)
      })))

      for (const key of keys) {
        const forKey = answers.filter((a) => a.key === key)
        const originals = forKey.filter(({ answer }) =>
          answer.status === 200 && answer.headers.get("idempotent-replayed") === null
        )
        expect(originals, `one original answer for ${key}`).toHaveLength(1)
        const winner = originals[0]!
        const expectedFor = ({ body }: (typeof forKey)[number]) =>
          body.socialUsername === winner.body.socialUsername ? winner.answer.text : "IDEMPOTENCY_CONFLICT"
        const actual = ({ answer }: { answer: Answer }) => answer.status === 200 ? answer.text : answer.json?.code
        expect(forKey.map(actual)).toEqual(forKey.map(expectedFor))
        for (const { answer } of forKey.filter(({ answer }) => answer.status !== 200)) {
          expectEnvelope(answer, 409, "IDEMPOTENCY_CONFLICT")
        }
      }
      expect(await backend.count(database, "SELECT 1 FROM activations WHERE brand_id = ?", brandId)).toBe(keys.length)
      expect(await backend.count(database, "SELECT 1 FROM idempotency_keys WHERE brand_id = ?", brandId)).toBe(
        keys.length
      )
    })
  })

  describe("rate limit accuracy under concurrency", () => {
    const limit = 20
    let database: string
    let server: InProcessServer

    beforeAll(async () => {
      database = await backend.database()
      server = await serveInProcess(database, {
        ...backend.env,
        RATE_LIMIT_MAX: String(limit),
        RATE_LIMIT_WINDOW_SECONDS: "3600"
      })
    })
    afterAll(async () => {
      await server?.stop()
    })

    it(`lets exactly ${limit} of ${3 * limit} concurrent requests of one key through, each token spent once, and leaves another key untouched`, async () => {
      const busy = await createKey(database, { scopes: ["campaigns:read"] })
      const quiet = await createKey(database, { scopes: ["campaigns:read"] })
      const calls = shuffle([
        ...Array.from({ length: 3 * limit }, () => busy.apiKey),
        ...Array.from({ length: limit }, () => quiet.apiKey)
      ])

      const answers = await Promise.all(
        calls.map(async (apiKey) => ({ apiKey, answer: await whoami(server.url, apiKey) }))
      )

      const ofBusy = answers.filter((a) => a.apiKey === busy.apiKey).map((a) => a.answer)
      const allowed = ofBusy.filter((answer) => answer.status === 200)
      const refused = ofBusy.filter((answer) => answer.status !== 200)
      expect(allowed).toHaveLength(limit)
      expect(refused).toHaveLength(2 * limit)
      for (const answer of refused) {
        expectEnvelope(answer, 429, "RATE_LIMITED")
        expect(Number(answer.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
      }
      const remaining = allowed.map((answer) => /r=(\d+)/.exec(answer.headers.get("ratelimit") ?? "")?.[1]).map(Number)
      expect(remaining.sort((a, b) => a - b)).toEqual(Array.from({ length: limit }, (_, i) => i))

      expect(answers.filter((a) => a.apiKey === quiet.apiKey).map((a) => a.answer.status)).toEqual(
        Array.from({ length: limit }, () => 200)
      )
    })
  })
})
