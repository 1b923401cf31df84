import type { EdgeRequest } from "./ServerRequest.ts"

/**
 * One request as the edge keeps it while it is served, for its answer, its access line and its
 * span: the library's request it made (the middleware and the handler see that alone), what the
 * router found, and who sent it (`Caller.ts`). A plain object made once per request.
 */
export interface Exchange {
  readonly request: EdgeRequest
  /** The path as sent, without the query string. */
  readonly path: string
  /** The route pattern from the HttpApi definition, e.g. `/v1/whoami`. */
  readonly route: string
  readonly requestId: string
  readonly clientAddress: string
  readonly clientRequestId: string | null
}
