import { Context, Effect } from "effect"
import type { CampaignApi } from "../Api.ts"
import { CurrentKey } from "../ApiKeys/Api.ts"
import { compile } from "../Edge/Endpoint.ts"
import type { Handlers } from "../Edge/Exchange.ts"
import { IdentityApi } from "./Api.ts"

const endpoint = compile(IdentityApi.endpoints.whoami)

/** GET /v1/whoami: any valid key, rate limited like every call (its `ApiKeyAuth`), no scope needed. */
export const IdentityHandlers = Effect.gen(function*() {
  const handlers: Handlers<typeof CampaignApi>["identity"] = {
    whoami: (_, given) => {
      const key = Context.get(given, CurrentKey)
      return Effect.succeed({
        status: 200,
        body: endpoint.encodeSuccess({ ok: true, keyId: key.keyId, brandId: key.brandId, scopes: key.scopes })
      })
    }
  }
  return handlers
})
