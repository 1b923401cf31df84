import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { AnalyticsReadKey } from "../ApiKeys/Api.ts"
import { ErrorCases } from "../Declaration.ts"
import { AnalyticsPath, AnalyticsQuery, AnalyticsResponse } from "../Domain/Activation.ts"
import { Envelope, ValidationError } from "../Domain/Errors.ts"

const campaign = HttpApiEndpoint.get("campaign", "/campaigns/:campaignId/analytics")
  .setPath(AnalyticsPath)
  .setUrlParams(AnalyticsQuery)
  .addSuccess(AnalyticsResponse)
  .addError(Envelope(ValidationError))
  .middleware(AnalyticsReadKey)
  // The handler's check, which no schema of a single parameter can say.
  .annotate(ErrorCases, { "400": "`from` after `to` is `VALIDATION_ERROR`." })
  .annotate(OpenApi.Summary, "A campaign's numbers")
  .annotate(
    OpenApi.Description,
    "The brand's activations of the campaign whose `activatedAt` falls on a UTC day from `from` to `to`, both inclusive and optional (`from` after `to` is 400 `VALIDATION_ERROR`): how many, how many distinct creators, how many per day, their planned posts per day, and how many have no planned post. A campaign without activations is all zeros, not 404. A brand's calls are answered one at a time: a call made while another of the brand's is being answered waits its turn (it is not refused). Requires the scope `analytics:read`."
  )

export class AnalyticsApi extends HttpApiGroup.make("analytics")
  .add(campaign)
  .annotate(OpenApi.Title, "Analytics")
{
  static readonly campaign = campaign
}
