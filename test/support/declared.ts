import { Option } from "effect"
import { CampaignApi } from "../../src/Api.ts"
import { ApiKeyAuth, isScopedKey, scopeOf } from "../../src/ApiKeys/Api.ts"
import { declaredEndpoints, middlewareOf } from "../../src/Declaration.ts"
import type { Scope } from "../../src/Domain/ApiKey.ts"

/**
 * The operations the definition declares, as the tests read them: what a test that covers every
 * operation, scope or probe iterates over, so that a new endpoint is checked by those tests without
 * a list to extend. What docs/integrators.md states of the existing operations stays written out where a
 * test checks it.
 */
export interface DeclaredOperation {
  /** `group.endpoint`, the OpenAPI document's operationId. */
  readonly operationId: string
  /** Lower case, as the OpenAPI document keys it. */
  readonly method: string
  /** As the definition writes it (`/v1/activations/:activationId`). */
  readonly path: string
  /** As the OpenAPI document writes it (`/v1/activations/{activationId}`). */
  readonly documentPath: string
  /** Whether it needs an API key: it declares `ApiKeyAuth` or a scoped key. */
  readonly secured: boolean
  /** The scope its key needs, if any. */
  readonly scope: Scope | undefined
  /** Whether it declares URL parameters (a query): those without one are refused a query by the edge itself. */
  readonly takesQuery: boolean
}

export const declaredOperations: ReadonlyArray<DeclaredOperation> = declaredEndpoints(CampaignApi).map(
  (declared) => {
    const middleware = middlewareOf(declared)
    const { group, endpoint } = declared
    return {
      operationId: `${group.identifier}.${endpoint.name}`,
      method: endpoint.method.toLowerCase(),
      path: endpoint.path,
      documentPath: endpoint.path.replace(/:(\w+)/g, "{$1}"),
      secured: middleware.some((tag) => tag.key === ApiKeyAuth.key || isScopedKey(tag)),
      scope: scopeOf(middleware),
      takesQuery: Option.isSome(endpoint.urlParamsSchema)
    }
  }
)

/** A declared operation by its operationId. */
export const declaredOperation = (operationId: string): DeclaredOperation => {
  const found = declaredOperations.find((operation) => operation.operationId === operationId)
  if (found === undefined) throw new Error(`the definition declares no ${operationId}`)
  return found
}

/**
 * A path of the operation that routes to it, each path parameter a fresh UUID (an id that names
 * nothing: the same answer for every method that shares the route).
 */
export const samplePath = ({ path }: DeclaredOperation): string => path.replace(/:\w+/g, () => crypto.randomUUID())

/** Every route a GET answers: the declared GET operations' and the documents'. */
export const getRoutes = (): ReadonlyArray<string> => [
  ...new Set([
    "/",
    "/openapi.json",
    "/docs",
    ...declaredOperations.filter(({ method }) => method === "get").map(samplePath)
  ])
]
