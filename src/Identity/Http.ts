import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { CampaignApi } from "../Api.ts"
import { CurrentKey } from "../ApiKeys/Api.ts"

/** GET /v1/whoami: any valid key, rate limited like every call (its `ApiKeyAuth`), no scope needed. */
export const whoami = HttpApiBuilder.handler(
  CampaignApi,
  "identity",
  "whoami",
  () => Effect.map(CurrentKey, ({ brandId, keyId, scopes }) => ({ ok: true as const, keyId, brandId, scopes }))
)

export const IdentityHandlers = Effect.succeed({ whoami })
