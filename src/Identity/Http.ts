import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { CampaignApi } from "../Api.ts"
import { CurrentApiKey } from "../Middleware/Api.ts"

export const HttpIdentityLive = HttpApiBuilder.group(CampaignApi, "identity", (handlers) =>
  handlers.handle("whoami", () =>
    Effect.map(CurrentApiKey, (key) => ({
      ok: true as const,
      keyId: key.keyId,
      brandId: key.brandId,
      scopes: key.scopes
    }))))
