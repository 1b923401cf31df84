import { DateTime, Duration, type Option } from "effect"
import { ApiKeyInfo, type BrandId, type KeyId, type RateLimitPolicy, type Scope } from "../Domain/ApiKey.ts"
import type { ApiKeyRow, KeyChangesRequested, SecretUse } from "./ApiKeysRepo.ts"

/**
 * What the keys' service takes and gives its commands (`ApiKeys.ts`): the options of a new key,
 * what a create, an update and a roll return, and a key as `keys list` and `keys show` print it.
 */

export interface CreateOptions {
  readonly brandId: BrandId
  readonly scopes: ReadonlyArray<Scope>
  readonly name: Option.Option<string>
  readonly expiresIn: Option.Option<Duration.Duration>
  readonly rateLimit?: RateLimitPolicy | null
}

export interface CreatedKey {
  readonly apiKey: string
  readonly info: ApiKeyInfo
}

/** What `update` may change; an absent field stays as it is, and an expiry of null is none. */
export interface KeyUpdate extends Omit<KeyChangesRequested, "expiresAt"> {
  /** From now, as at create; null: the key no longer expires. */
  readonly expiresIn?: Duration.Duration | null
}

/** A key as an update left it. */
export interface UpdatedKey {
  readonly expiresAt: DateTime.Utc | null
  /**
   * When the secret a rolled key had before stops, if the update's expiry brought that forward:
   * a key's expiry covers both its secrets (docs/operators.md, The key command line). Null otherwise.
   */
  readonly graceCutTo: DateTime.Utc | null
}

/** A rolled key: its new secret, printed once, and when the secret it had stops working. */
export interface RolledKey {
  readonly apiKey: string
  readonly keyId: KeyId
  readonly previousSecretEndsAt: DateTime.Utc
}

/** How long a rolled key's previous secret may keep working at most (docs/operators.md, The key command line). */
export const maxGrace = Duration.days(30)

export const dateOrNull = (millis: number | null) => millis === null ? null : DateTime.unsafeMake(millis)

export const toInfo = (row: ApiKeyRow, uses: ReadonlyArray<SecretUse>, now: number): ApiKeyInfo => {
  const previousWorks = row.previousSecretEndsAt !== null && row.previousSecretEndsAt > now && row.revokedAt === null
  const previousUse = previousWorks ? uses.find((use) => use.secretSha256 === row.previousSecretSha256) : undefined
  const lastUse = uses.reduce<number | null>(
    (latest, use) => latest === null || use.at > latest ? use.at : latest,
    null
  )
  return new ApiKeyInfo({
    keyId: row.keyId as KeyId,
    brandId: row.brandId as BrandId,
    name: row.name,
    scopes: row.scopes as ReadonlyArray<Scope>,
    createdAt: DateTime.unsafeMake(row.createdAt),
    expiresAt: dateOrNull(row.expiresAt),
    revokedAt: dateOrNull(row.revokedAt),
    previousSecretEndsAt: previousWorks ? dateOrNull(row.previousSecretEndsAt) : null,
    rateLimit: row.rateLimit,
    lastUsedAt: dateOrNull(lastUse),
    previousSecretLastUsedAt: dateOrNull(previousUse?.at ?? null)
  })
}
