import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { AnalyticsReadKey } from "../ApiKeys/Api.ts"
import { ErrorCases } from "../Declaration.ts"
import { analyticsLine, AnalyticsPath, AnalyticsQuery, AnalyticsResponse } from "../Domain/Activation.ts"
import { ConcurrencyLimited, Envelope, ValidationError } from "../Domain/Errors.ts"

const { longestWaitSeconds, waiting } = analyticsLine

const campaign = HttpApiEndpoint.get("campaign", "/campaigns/:campaignId/analytics")
  .setPath(AnalyticsPath)
  .setUrlParams(AnalyticsQuery)
  .addSuccess(AnalyticsResponse)
  .addError(Envelope(ValidationError))
  .addError(Envelope(ConcurrencyLimited))
  .middleware(AnalyticsReadKey)
  // The handler's check, which no schema of a single parameter can say, and the brand's line.
  .annotate(ErrorCases, {
    "400": "`from` after `to` is `VALIDATION_ERROR`.",
    "429":
      `\`CONCURRENCY_LIMITED\`: ${waiting} of the brand's calls were already waiting behind the one being answered, or this call waited ${longestWaitSeconds} s; it carries \`Retry-After\` and none of the key's RateLimit headers.`
  })
  .annotate(OpenApi.Summary, "A campaign's numbers")
  .annotate(
    OpenApi.Description,
    "The brand's activations of the campaign whose `activatedAt` falls on a UTC day from `from` to `to`, both inclusive and optional (`from` after `to` is 400 `VALIDATION_ERROR`): how many, how many distinct creators, how many per day, their planned posts per day, and how many have no planned post. A campaign without activations is all zeros, not 404. A brand's calls are answered one at a time: a call made while another of the brand's is being answered waits its turn, " +
      `with at most ${waiting} of the brand's calls waiting and none for more than ${longestWaitSeconds} s: a call past either is refused with 429 \`CONCURRENCY_LIMITED\` and \`Retry-After\`, and may be sent again once one of the brand's calls has been answered. Requires the scope \`analytics:read\`.`
  )

export class AnalyticsApi extends HttpApiGroup.make("analytics")
  .add(campaign)
  .annotate(OpenApi.Title, "Analytics")
{
  static readonly campaign = campaign
}
