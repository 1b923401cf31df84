import { Context, Effect, Option } from "effect"
import { CurrentKey } from "../ApiKeys/Api.ts"
import type { Activation } from "../Domain/Activation.ts"
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
 * The answers' JSON, written directly: every field of a stored record is a string (or null) that
 * the schemas' encoders pass through as they are, so encoding twenty records through them cost a
 * page more than its query (bench/BENCHMARKS.md, What the reads cost). The keys are in the schemas'
 * order (the repository builds records so), and a test holds these bytes to the encoders' own.
 */
export const recordJson = (activation: Activation): string => JSON.stringify({ ok: true, activation })
export const pageJson = (activations: ReadonlyArray<Activation>, hasMore: boolean): string =>
  JSON.stringify({ ok: true, activations, hasMore })

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
        const body = recordJson(found.value)
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
        const body = pageJson(activations, hasMore)
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
