import { expect } from "@effect/vitest"
import type { Answer, RawResponse } from "./client.ts"

/** The error codes of docs/integrators.md (Errors) and their statuses. */
export const errorStatus: Readonly<Record<string, number>> = {
  VALIDATION_ERROR: 400,
  MALFORMED_JSON: 400,
  IDEMPOTENCY_KEY_REQUIRED: 400,
  UNAUTHORIZED: 401,
  FORBIDDEN: 403,
  NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405,
  IDEMPOTENCY_CONFLICT: 409,
  IDEMPOTENCY_IN_PROGRESS: 409,
  PAYLOAD_TOO_LARGE: 413,
  UNSUPPORTED_MEDIA_TYPE: 415,
  RATE_LIMITED: 429,
  INTERNAL_ERROR: 500,
  SERVICE_UNAVAILABLE: 503
}

/**
 * What an error message must never carry: a stack frame, a source location, SQLite's
 * own words or a SQL statement. Case-sensitive and whole statements only, so input that a
 * message echoes back ("No route for DELETE /x", "x is not a known field") does not trip it.
 */
export const leak =
  /SQLITE|SQLiteError|\bSELECT\b.*\bFROM\b|INSERT INTO|DELETE FROM|\bUPDATE \S+ SET\b|Error:|\n\s+at |\bat .*:\d+:\d+|\.(ts|js):\d+/

const contentTypeOf = (answer: Answer | RawResponse) =>
  (answer.headers instanceof Headers ? answer.headers.get("content-type") : answer.headers["content-type"]) ?? ""

/** The response as a line for assertion messages. */
const seen = (answer: Answer | RawResponse) =>
  `${answer.status} ${contentTypeOf(answer) || "(no content-type)"} ${
    JSON.stringify("text" in answer ? answer.text : answer.body)
  }`

/** Exactly `{ ok: false, code, message }` as JSON, the code's status, and a message that leaks nothing. */
export const expectEnvelope = (answer: Answer | RawResponse, status: number, code?: string) => {
  const response = seen(answer)
  expect(answer.status, response).toBe(status)
  expect(contentTypeOf(answer), response).toMatch(/^application\/json/)
  expect(Object.keys(answer.json ?? {}).sort(), response).toEqual(["code", "message", "ok"])
  expect(answer.json.ok, response).toBe(false)
  expect(errorStatus[answer.json.code], response).toBe(status)
  if (code !== undefined) expect(answer.json.code, response).toBe(code)
  expect(typeof answer.json.message, response).toBe("string")
  expect(answer.json.message.length, response).toBeGreaterThan(0)
  expect(answer.json.message, response).not.toMatch(leak)
}

/** Any answer the contract allows for a request that is not server-side trouble: never a 5xx, an error is the envelope. */
export const expectClientAnswer = (answer: Answer | RawResponse) => {
  expect(answer.status, seen(answer)).toBeLessThan(500)
  if (answer.status >= 400) expectEnvelope(answer, answer.status)
}
