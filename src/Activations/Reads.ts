import { Context, Effect, Option } from "effect"
import { CurrentKey } from "../ApiKeys/Api.ts"
import { NotFound } from "../Domain/Errors.ts"
import { compile, etagOf, notModified } from "../Edge/Endpoint.ts"
import type { Handler } from "../Edge/Exchange.ts"
import { ActivationsApi } from "./Api.ts"
import { ActivationsRepo } from "./ActivationsRepo.ts"

const getEndpoint = compile(ActivationsApi.get)
const listEndpoint = compile(ActivationsApi.list)
const defaultLimit = 20

const noBody = new Uint8Array(0)

/**
 * The reads of activations (README, Reads): one brand's records through the repository, which
 * takes the brand for every read. Another brand's record answers as one that does not exist.
 */
export const ActivationReads = Effect.gen(function*() {
  const repo = yield* ActivationsRepo

  const get: Handler<CurrentKey> = (exchange, given) =>
    Effect.flatMap(getEndpoint.decodePath(exchange.params), ({ activationId }) =>
      Effect.flatMap(repo.findById(Context.get(given, CurrentKey).brandId, activationId), (found) => {
        if (Option.isNone(found)) {
          return Effect.fail(new NotFound({ message: `No activation ${activationId}.` }))
        }
        const body = getEndpoint.encodeSuccess({ ok: true, activation: found.value })
        const etag = etagOf(body)
        return Effect.succeed(
          notModified(exchange.request.headers.get("if-none-match"), etag)
            ? { status: 304, body: noBody, headers: { etag } }
            : { status: 200, body, headers: { etag } }
        )
      }))

  const list: Handler<CurrentKey> = (exchange, given) =>
    Effect.flatMap(listEndpoint.decodeQuery(exchange.request), (query) => {
      const limit = query.limit === undefined ? defaultLimit : Number(query.limit)
      // One more than the page: whether there is a next page, without counting.
      const page = { creatorId: query.creatorId, campaignId: query.campaignId, below: query.startingAfter, limit: limit + 1 }
      return Effect.map(repo.list(Context.get(given, CurrentKey).brandId, page), (rows) => {
        const hasMore = rows.length > limit
        const activations = hasMore ? rows.slice(0, limit) : rows
        const body = listEndpoint.encodeSuccess({ ok: true, activations, hasMore })
        if (!hasMore) return { status: 200, body }
        // The same filters and limit, from the last record shown: relative to this request (RFC 8288).
        const next = new URLSearchParams()
        if (query.creatorId !== undefined) next.set("creatorId", query.creatorId)
        if (query.campaignId !== undefined) next.set("campaignId", query.campaignId)
        if (query.limit !== undefined) next.set("limit", query.limit)
        next.set("startingAfter", activations.at(-1)!.id)
        return { status: 200, body, headers: { link: `<${exchange.path.replace(/\/$/, "")}?${next}>; rel="next"` } }
      })
    })

  return { get, list }
})
