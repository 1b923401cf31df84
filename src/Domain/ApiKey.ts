import { Schema } from "effect"

export const Scope = Schema.Literal("campaigns:read", "campaigns:write", "analytics:read")
export type Scope = typeof Scope.Type

/**
 * Whether a key with `scopes` may do what `required` grants: a key that may write campaigns may
 * read them too, as Stripe's and GitHub's write permissions include read (docs/integrators.md, Reads).
 */
export const grants = (scopes: ReadonlyArray<Scope>, required: Scope): boolean =>
  grantedBy(required).some((scope) => scopes.includes(scope))

/** The scopes any one of which grants `required`: itself, and for reading campaigns, writing them. */
export const grantedBy = (required: Scope): ReadonlyArray<Scope> =>
  required === "campaigns:read" ? ["campaigns:read", "campaigns:write"] : [required]

export const KeyId = Schema.String.pipe(Schema.pattern(/^[a-z0-9]{16}$/), Schema.brand("KeyId"))
export type KeyId = typeof KeyId.Type

export const BrandId = Schema.UUID.pipe(Schema.brand("BrandId"))
export type BrandId = typeof BrandId.Type

/** What a verified key resolves to; never carries the secret or its digest. */
export const ApiKeyIdentity = Schema.Struct({
  keyId: KeyId,
  brandId: BrandId,
  scopes: Schema.Array(Scope)
})
export type ApiKeyIdentity = typeof ApiKeyIdentity.Type

/** A rate limit: `max` requests per `windowSeconds`, as `600/60` on the command line. */
export interface RateLimitPolicy {
  readonly max: number
  readonly windowSeconds: number
}

/**
 * What a presented secret resolves to: the key's identity, when that secret stops working (the
 * key's expiry or the end of a rolled secret's grace, the earlier; null for never), the key's
 * own rate limit (null for the server's), and which of its secrets it was.
 */
export interface Authenticated {
  readonly identity: ApiKeyIdentity
  readonly endsAt: number | null
  readonly rateLimit: RateLimitPolicy | null
  /** The digest of the secret that matched: its last use is noted under it. */
  readonly secretSha256: string
}

/** A stored key as the key CLI lists it. */
export class ApiKeyInfo extends Schema.Class<ApiKeyInfo>("ApiKeyInfo")({
  keyId: KeyId,
  brandId: BrandId,
  name: Schema.NullOr(Schema.String),
  scopes: Schema.Array(Scope),
  createdAt: Schema.DateTimeUtc,
  expiresAt: Schema.NullOr(Schema.DateTimeUtc),
  revokedAt: Schema.NullOr(Schema.DateTimeUtc),
  /** When the secret the key had before its last roll stops working; null when none works. */
  previousSecretEndsAt: Schema.NullOr(Schema.DateTimeUtc),
  rateLimit: Schema.NullOr(Schema.Struct({ max: Schema.Int, windowSeconds: Schema.Int })),
  /** The last use of any of its secrets, to the minute. */
  lastUsedAt: Schema.NullOr(Schema.DateTimeUtc),
  /** The last use of the previous secret while it works: what to watch before its grace ends. */
  previousSecretLastUsedAt: Schema.NullOr(Schema.DateTimeUtc)
}) {}

export const Identity = Schema.Struct({
  ok: Schema.Literal(true),
  keyId: Schema.String.annotations({
    jsonSchema: { type: "string", pattern: "^[a-z0-9]{16}$", description: "The API key's public id" }
  }),
  brandId: Schema.String.annotations({
    jsonSchema: { type: "string", format: "uuid", description: "The brand the key belongs to" }
  }),
  scopes: Schema.Array(Scope).pipe(Schema.maxItems(Scope.literals.length)).annotations({
    title: "scopes",
    description: "What the key may do, each scope once"
  })
}).annotations({
  identifier: "Identity",
  examples: [{
    ok: true,
    keyId: "2u6jlxxhvilekt9a",
    brandId: "0b6f8c1e-4f5a-4c2b-9d7e-1a2b3c4d5e6f",
    scopes: ["campaigns:write"]
  }]
})
