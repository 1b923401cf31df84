import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect } from "effect"
import { CampaignApi } from "../Api.ts"
import { CurrentKey } from "../ApiKeys/Api.ts"
import type { ApiKeyIdentity, Identity } from "../Domain/ApiKey.ts"

/**
 * What whoami answers for a key, made once for each key the cache holds and frozen, so that the
 * edge encodes it once (`Endpoint.ts`); a key changed or reloaded is a new object, and a new answer.
 */
const identities = new WeakMap<ApiKeyIdentity, typeof Identity.Type>()
const identityOf = (key: ApiKeyIdentity): typeof Identity.Type => {
  let identity = identities.get(key)
  if (identity === undefined) {
    identity = Object.freeze({ ok: true as const, keyId: key.keyId, brandId: key.brandId, scopes: key.scopes })
    identities.set(key, identity)
  }
  return identity
}

/** GET /v1/whoami: any valid key, rate limited like every call (its `ApiKeyAuth`), no scope needed. */
export const whoami = HttpApiBuilder.handler(
  CampaignApi,
  "identity",
  "whoami",
  () => Effect.map(CurrentKey, identityOf)
)

export const IdentityHandlers = Effect.succeed({ whoami })
