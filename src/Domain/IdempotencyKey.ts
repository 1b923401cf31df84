import { Either, ParseResult, Schema } from "effect"

const rule = "Idempotency-Key must be 1 to 255 visible ASCII characters"

/** 1 to 255 visible ASCII characters. */
const IdempotencyKey = Schema.String.pipe(
  Schema.pattern(/^[\x21-\x7e]{1,255}$/, { message: () => rule })
)

const sfString = /^"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"$/

/**
 * The header as sent: a key, or the same in double quotes (an RFC 9651 sf-string), unquoted.
 * Only HTTP's own whitespace (RFC 9110 OWS: space, tab) around it is trimmed; any other
 * character is part of the key.
 */
export const IdempotencyKeyHeader = Schema.transformOrFail(Schema.String, IdempotencyKey, {
  strict: true,
  decode: (header, _, ast) => {
    const raw = header.replace(/^[ \t]+|[ \t]+$/g, "")
    if (!raw.startsWith("\"")) return ParseResult.succeed(raw)
    const match = sfString.exec(raw)
    return match
      ? ParseResult.succeed(match[1]!.replace(/\\(["\\])/g, "$1"))
      : ParseResult.fail(new ParseResult.Type(ast, header, "Idempotency-Key is not a valid quoted string"))
  },
  encode: ParseResult.succeed
}).annotations({ message: () => ({ message: rule, override: false }) })

const decodeHeader = ParseResult.decodeUnknown(IdempotencyKeyHeader)
const decodeWithSchema = Schema.decodeUnknownEither(IdempotencyKeyHeader)

/**
 * A key as almost every client sends it: 1 to 255 visible ASCII characters, the first not a double
 * quote. The header's schema gives such a header back as it is (nothing to trim, nothing to
 * unquote, within the rule).
 */
const plainKey = /^[\x21\x23-\x7e][\x21-\x7e]{0,254}$/

/**
 * The header decoded with `IdempotencyKeyHeader`: a plain key is answered without running the
 * schema's decoding, which was 4.5 % of a replay's time in process (bench/BENCHMARKS.md); a test
 * holds both to the same answer for any header.
 */
export const decodeIdempotencyKeyHeader = (header: string): Either.Either<string, ParseResult.ParseError> =>
  plainKey.test(header) ? Either.right(header) : decodeWithSchema(header)

/**
 * The header as the activation declares it, for its document and its typed clients, which check a
 * key before they send it (their encoding). The server decodes the header once, in the endpoint's
 * `RequireIdempotencyKey`, which gives the handler the key (`Idempotency/Api.ts`): this schema's
 * own decoding passes the header on as sent.
 */
export const DeclaredIdempotencyKeyHeader = Schema.transformOrFail(Schema.String, Schema.String, {
  strict: true,
  decode: ParseResult.succeed,
  encode: (header) => ParseResult.map(decodeHeader(header), () => header)
}).annotations({
  // One alternative per form, each with what it may hold: a single schema's length would have to
  // count the quotes and escapes of the quoted form, and say 512 beside a rule of 255.
  jsonSchema: {
    description:
      "Any unique string of 1 to 255 visible ASCII characters, kept 24 hours per brand; it may be sent as an RFC 9651 quoted string (`\"order-1\"`), which is unquoted first",
    anyOf: [
      {
        title: "Key",
        description: "1 to 255 visible ASCII characters, the first not a double quote",
        type: "string",
        pattern: "^[\\x21\\x23-\\x7e][\\x21-\\x7e]*$",
        minLength: 1,
        maxLength: 255
      },
      {
        title: "Quoted key",
        description:
          "The key in double quotes, with `\\\"` and `\\\\` for a double quote and a backslash in it: 1 to 255 visible ASCII characters once unquoted",
        type: "string",
        pattern: "^\"(?:[\\x21\\x23-\\x5b\\x5d-\\x7e]|\\\\[\"\\\\]){1,255}\"$"
      }
    ]
  }
})

/** No key at all: absent, empty, or an empty quoted string. */
export const isMissingIdempotencyKey = (header: string | null): boolean => {
  const raw = header?.replace(/^[ \t]+|[ \t]+$/g, "") ?? ""
  return raw === "" || raw === "\"\""
}
