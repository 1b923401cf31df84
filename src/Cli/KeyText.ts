/** A key as the key commands print it, in text and in JSON (docs/operators.md, The key command line). */
import { DateTime } from "effect"
import type { ApiKeyInfo } from "../Domain/ApiKey.ts"

export const isoOrNever = (date: DateTime.Utc | null) => date === null ? "never" : DateTime.formatIso(date)

/** A key's rate limit as the command line takes it: `600/60`, or `default` for the server's. */
export const limitOf = (key: ApiKeyInfo) =>
  key.rateLimit === null ? "default" : `${key.rateLimit.max}/${key.rateLimit.windowSeconds}`

/** Last use to the minute, as it is kept: `2026-11-25T16:29Z`. */
export const minuteOf = (date: DateTime.Utc) => `${DateTime.formatIso(date).slice(0, 16)}Z`

export const status = (key: ApiKeyInfo, now: DateTime.Utc) =>
  key.revokedAt !== null
    ? "revoked"
    : key.expiresAt !== null && DateTime.lessThanOrEqualTo(key.expiresAt, now)
    ? "expired"
    : "active"

/** A name as a table shows it: control characters escaped as in JSON, no name (or an empty one) as `-`. */
export const shownName = (name: string | null) =>
  name === null || name === "" ? "-" : name.replace(/[\p{Cc}\p{Zl}\p{Zp}]/gu, (c) => JSON.stringify(c).slice(1, -1))

/** A key as `keys list --json` and `keys show --json` print it (docs/operators.md, The key command line). */
export const jsonRow = (key: ApiKeyInfo, now: DateTime.Utc) => ({
  keyId: key.keyId,
  brandId: key.brandId,
  name: key.name,
  scopes: key.scopes,
  status: status(key, now),
  createdAt: DateTime.formatIso(key.createdAt),
  expiresAt: key.expiresAt === null ? null : DateTime.formatIso(key.expiresAt),
  revokedAt: key.revokedAt === null ? null : DateTime.formatIso(key.revokedAt),
  lastUsedAt: key.lastUsedAt === null ? null : DateTime.formatIso(key.lastUsedAt),
  rateLimit: key.rateLimit === null ? null : limitOf(key)
})
