import { Effect } from "effect"
import type { CampaignApi } from "../Api.ts"
import { Authentication } from "../ApiKeys/Authentication.ts"
import { compile } from "../Edge/Endpoint.ts"
import type { Handlers } from "../Edge/Exchange.ts"
import { IdentityApi } from "./Api.ts"

const endpoint = compile(IdentityApi.endpoints.whoami)

/** GET /v1/whoami: any valid key, rate limited like every call, no scope needed. */
export const IdentityHandlers = Effect.gen(function*() {
  const authentication = yield* Authentication
  const handlers: Handlers<typeof CampaignApi>["identity"] = {
    whoami: (exchange) =>
      Effect.map(authentication.authenticate(exchange), (key) => ({
        status: 200,
        body: endpoint.encodeSuccess({ ok: true, keyId: key.keyId, brandId: key.brandId, scopes: key.scopes })
      }))
  }
  return handlers
})
