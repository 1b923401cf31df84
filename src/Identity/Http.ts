import { HttpApiBuilder, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import { CampaignApi } from "../Api.ts"
import { CurrentApiKey } from "../Middleware/Api.ts"

// The response is built directly: the identity is already typed, and encoding it through
// the success schema on every call is work the hottest endpoint does not need.
export const HttpIdentityLive = HttpApiBuilder.group(CampaignApi, "identity", (handlers) =>
  handlers.handle("whoami", () =>
    Effect.map(CurrentApiKey, (key) =>
      HttpServerResponse.unsafeJson({ ok: true, keyId: key.keyId, brandId: key.brandId, scopes: key.scopes }))))
