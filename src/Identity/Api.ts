import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { ApiKeyAuth } from "../ApiKeys/Api.ts"
import { Identity } from "../Domain/ApiKey.ts"

export class IdentityApi extends HttpApiGroup.make("identity")
  .add(
    HttpApiEndpoint.get("whoami", "/whoami")
      .addSuccess(Identity)
      .middleware(ApiKeyAuth)
      .annotate(OpenApi.Summary, "Resolve the API key")
      .annotate(
        OpenApi.Description,
        "Returns the key id, brand and scopes of the API key in the `Authorization` header. Any valid key may call it; it is rate limited like every authenticated call, so it is the first call to make when setting up an integration."
      )
  )
  .annotate(OpenApi.Title, "Identity")
{}
