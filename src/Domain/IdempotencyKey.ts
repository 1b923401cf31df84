import { Either, Option, Schema } from "effect"

/** 1 to 255 visible ASCII characters. */
export const IdempotencyKey = Schema.String.pipe(
  Schema.pattern(/^[\x21-\x7e]{1,255}$/, {
    message: () => "Idempotency-Key must be 1 to 255 visible ASCII characters"
  }),
  Schema.brand("IdempotencyKey")
)
export type IdempotencyKey = typeof IdempotencyKey.Type

const sfString = /^"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"$/

/** An RFC 9651 sf-string is unquoted; any other value is taken as it stands. */
const unquote = (raw: string): Option.Option<string> => {
  if (!raw.startsWith("\"")) return Option.some(raw)
  const match = sfString.exec(raw)
  return match ? Option.some(match[1]!.replace(/\\(["\\])/g, "$1")) : Option.none()
}

export type ParsedIdempotencyKey =
  | { readonly _tag: "Missing" }
  | { readonly _tag: "Invalid"; readonly message: string }
  | { readonly _tag: "Valid"; readonly key: IdempotencyKey }

const decodeKey = Schema.decodeUnknownEither(IdempotencyKey)

export const parseIdempotencyKey = (header: string | undefined): ParsedIdempotencyKey => {
  // Only HTTP's own whitespace (RFC 9110 OWS: space, tab) is trimmed; any other character is part of the key.
  const raw = header?.replace(/^[ \t]+|[ \t]+$/g, "") ?? ""
  if (raw === "" || raw === "\"\"") return { _tag: "Missing" }
  const unquoted = unquote(raw)
  if (Option.isNone(unquoted)) {
    return { _tag: "Invalid", message: "Idempotency-Key is not a valid quoted string" }
  }
  return Either.match(decodeKey(unquoted.value), {
    onLeft: () => ({ _tag: "Invalid", message: "Idempotency-Key must be 1 to 255 visible ASCII characters" }),
    onRight: (key) => ({ _tag: "Valid", key })
  })
}
