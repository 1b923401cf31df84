import createClient from "openapi-fetch"
import type { paths } from "./schema.js"

const apiKey = process.env["API_KEY"]
if (apiKey === undefined) throw new Error("Set API_KEY to an API key first: export API_KEY=cak_...")
const client = createClient<paths>({
  baseUrl: process.env["API_URL"] ?? "http://localhost:3000",
  headers: { Authorization: `Bearer ${apiKey}` }
})

// openapi-fetch answers `{ data }` or `{ error }`: here any error envelope ends the program.
const body = <T>({ data, error, response }: { data?: T; error?: { code: string; message: string }; response: Response }): T => {
  if (data === undefined) throw new Error(`${response.status} ${error?.code}: ${error?.message}`)
  return data
}

const alive = body(await client.GET("/healthz"))
const ready = body(await client.GET("/readyz"))
const whoami = body(await client.GET("/v1/whoami"))

const path = { creatorId: crypto.randomUUID(), campaignId: crypto.randomUUID() }
const idempotencyKey = crypto.randomUUID()
const { activation } = body(
  await client.POST("/v1/creators/{creatorId}/campaigns/{campaignId}/activate", {
    params: { path, header: { "Idempotency-Key": idempotencyKey } },
    body: { socialUsername: "@janedoe", plannedPostAt: "2026-12-01" }
  })
)
const fetched = body(await client.GET("/v1/activations/{activationId}", { params: { path: { activationId: activation.id } } }))
const page = body(await client.GET("/v1/activations", { params: { query: { campaignId: path.campaignId, limit: 10 } } }))
const { analytics } = body(
  await client.GET("/v1/campaigns/{campaignId}/analytics", { params: { path: { campaignId: path.campaignId } } })
)

// The same Idempotency-Key with another body: the API's error envelope, typed from the document.
const { error } = await client.POST("/v1/creators/{creatorId}/campaigns/{campaignId}/activate", {
  params: { path, header: { "Idempotency-Key": idempotencyKey } },
  body: { socialUsername: "@someoneelse" }
})
const conflict = error?.code ?? "activated"

console.log(JSON.stringify({ alive, ready, whoami, activation, fetched, page, analytics, conflict }))
