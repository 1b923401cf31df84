import { type FiberId, HashMap, List, type LogSpan } from "effect"
import type { RefusalReason } from "../Domain/Errors.ts"

/**
 * The access line encoded straight into the bytes it is written as: the line of `jsonLine`'s
 * shape (`Logging.ts`; services.test holds the two equal), with no string of it made, no record of
 * its fields stringified and no `Date` unless the millisecond changed. Its constant parts are bytes
 * made once; the request's values are copied in as they are, a string as its JSON when it has a
 * character to escape or beyond ASCII, a number by its digits. At the default log level this was
 * the whole of what the line cost (bench/BENCHMARKS.md, As fast at the default log level).
 */

/** Where a line is encoded: the stderr writer's buffer (`Logging/Stderr.ts`), or a scratch one. */
export interface LineSink {
  readonly reserve: (bytes: number) => number
  readonly buffer: () => Uint8Array
  readonly commit: (end: number) => void
  /** A line as a string: the access line when it takes the record's way. */
  readonly write: (line: string) => void
}

/**
 * One access-log line's fields: who sent it (docs/operators.md, Operating it: Logs); the key's id and brand, never the key. A refused key (a 401) keeps
 * its id when it parses and its brand when it is known, and `reason` (null on every other line) says
 * why: support can tell from the log what the answer must not (docs/operators.md, Operating it).
 * In the order the line writes them.
 */
export type AccessLogFields = {
  readonly clientAddress: string
  readonly clientRequestId: string | null
  readonly method: string
  readonly route: string
  readonly status: number
  readonly durationMs: number
  readonly keyId: string | null
  readonly brandId: string | null
  readonly reason: RefusalReason | null
}

const ascii = (text: string): Uint8Array => Uint8Array.from(text, (char) => char.charCodeAt(0))

const opening = ascii(`{"message":"request","logLevel":"INFO","timestamp":"`)
const openAnnotations = ascii(`","annotations":{`)
const clientAddressKey = ascii(`"clientAddress":`)
const clientRequestIdKey = ascii(`,"clientRequestId":`)
const methodKey = ascii(`,"method":`)
const routeKey = ascii(`,"route":`)
const statusKey = ascii(`,"status":`)
const durationKey = ascii(`,"durationMs":`)
const keyIdKey = ascii(`,"keyId":`)
const brandIdKey = ascii(`,"brandId":`)
const reasonKey = ascii(`,"reason":`)
const openSpans = ascii(`},"spans":`)
const openFiberId = ascii(`,"fiberId":`)
const closing = ascii(`}\n`)
const nullBytes = ascii("null")
const emptySpans = ascii("{}")

const constantBytes = [
  opening,
  openAnnotations,
  clientAddressKey,
  clientRequestIdKey,
  methodKey,
  routeKey,
  statusKey,
  durationKey,
  keyIdKey,
  brandIdKey,
  reasonKey,
  openSpans,
  openFiberId,
  closing
].reduce((sum, bytes) => sum + bytes.length, 0)

/** At most what a string takes as JSON: six bytes for each UTF-16 unit (`\u001f`), and its quotes. */
const stringBound = (text: string | null): number => (text === null ? 4 : text.length * 6 + 2)

/** A number's bound: JSON never spells one longer. */
const numberBound = 24

/** The fields named like an annotation: an annotation of a field's name gives way to the field. */
const fieldNames: ReadonlySet<string> = new Set<keyof AccessLogFields>([
  "clientAddress",
  "clientRequestId",
  "method",
  "route",
  "status",
  "durationMs",
  "keyId",
  "brandId",
  "reason"
])

/**
 * The request's annotations, gathered without an iterator or a closure made per line: each key,
 * and its value as is when a string or else as its JSON. `gathered` is false when the line must
 * take the record's way: an annotation named like a field or spelt elsewhere by a record, or a
 * value JSON cannot write.
 */
const keys: Array<string> = []
const values: Array<string> = []
const raw: Array<boolean> = []
let count = 0
let gathered = true
let annotationBytes = 0

const gather = (value: unknown, key: string) => {
  if (!gathered) return
  // A key named like a field, or one that JSON's objects would put first (an index) or not keep.
  if (fieldNames.has(key) || key === "__proto__" || (key.charCodeAt(0) >= 48 && key.charCodeAt(0) <= 57)) {
    gathered = false
    return
  }
  let text: string
  let isRaw = false
  if (typeof value === "string") {
    text = value
    isRaw = true
  } else {
    let json: string | undefined
    try {
      json = JSON.stringify(value)
    } catch {
      gathered = false
      return
    }
    // What JSON leaves out of an object (undefined, a function) is left out of the line.
    if (json === undefined) return
    text = json
  }
  keys[count] = key
  values[count] = text
  raw[count] = isRaw
  count++
  annotationBytes += stringBound(key) + 2 + (isRaw ? stringBound(text) : text.length * 3)
}

const clearGathered = () => {
  for (let i = 0; i < count; i++) values[i] = keys[i] = ""
  count = 0
}

/** What the access line spells as every JSON line does (`Logging.ts`): made there, given once. */
export interface SharedParts {
  /** The ISO time of a millisecond (kept for the next line of the same millisecond). */
  readonly timestamp: (now: number) => string
  /** A list of log spans as JSON, each label with the milliseconds since it began. */
  readonly spans: (spans: List.List<LogSpan.LogSpan>, now: number) => string
  /** A fiber id other than one fiber's (`#id`), as a label. */
  readonly fiberLabel: (fiberId: FiberId.FiberId) => string
}

/**
 * The encoder of `jsonLine`'s access line into a sink: false when the line must take the record's
 * way (`gathered` false), with nothing written.
 */
export const makeAccessLineEncoder = (shared: SharedParts) =>
(
  sink: LineSink,
  annotations: HashMap.HashMap<string, unknown>,
  fields: AccessLogFields,
  spans: List.List<LogSpan.LogSpan>,
  fiberId: FiberId.FiberId,
  now: number
): boolean => {
  gathered = true
  annotationBytes = 0
  HashMap.forEach(annotations, gather)
  if (!gathered) {
    clearGathered()
    return false
  }
  const timestamp = shared.timestamp(now)
  const spansText = List.isNil(spans) ? undefined : shared.spans(spans, now)
  const runtimeId = fiberId._tag === "Runtime" ? fiberId.id : -1
  const label = runtimeId < 0 ? shared.fiberLabel(fiberId) : undefined
  const bound = constantBytes + timestamp.length + annotationBytes + stringBound(fields.clientAddress) +
    stringBound(fields.clientRequestId) + stringBound(fields.method) + stringBound(fields.route) +
    stringBound(fields.keyId) + stringBound(fields.brandId) + stringBound(fields.reason) + 3 * numberBound +
    (spansText === undefined ? 2 : spansText.length * 3) + (label === undefined ? 0 : stringBound(label))
  let at = sink.reserve(bound)
  if (at < 0) {
    clearGathered()
    return true
  }
  const buffer = sink.buffer()
  at = bytesAt(buffer, at, opening)
  at = asciiAt(buffer, at, timestamp)
  at = bytesAt(buffer, at, openAnnotations)
  for (let i = 0; i < count; i++) {
    at = stringAt(buffer, at, keys[i]!)
    buffer[at++] = 58 // :
    at = raw[i] ? stringAt(buffer, at, values[i]!) : utf8At(buffer, at, values[i]!)
    buffer[at++] = 44 // ,
  }
  clearGathered()
  at = bytesAt(buffer, at, clientAddressKey)
  at = stringAt(buffer, at, fields.clientAddress)
  at = bytesAt(buffer, at, clientRequestIdKey)
  at = nullableAt(buffer, at, fields.clientRequestId)
  at = bytesAt(buffer, at, methodKey)
  at = stringAt(buffer, at, fields.method)
  at = bytesAt(buffer, at, routeKey)
  at = stringAt(buffer, at, fields.route)
  at = bytesAt(buffer, at, statusKey)
  at = numberAt(buffer, at, fields.status)
  at = bytesAt(buffer, at, durationKey)
  at = numberAt(buffer, at, fields.durationMs)
  at = bytesAt(buffer, at, keyIdKey)
  at = nullableAt(buffer, at, fields.keyId)
  at = bytesAt(buffer, at, brandIdKey)
  at = nullableAt(buffer, at, fields.brandId)
  at = bytesAt(buffer, at, reasonKey)
  at = nullableAt(buffer, at, fields.reason)
  at = bytesAt(buffer, at, openSpans)
  at = spansText === undefined ? bytesAt(buffer, at, emptySpans) : utf8At(buffer, at, spansText)
  at = bytesAt(buffer, at, openFiberId)
  if (label === undefined) {
    buffer[at++] = 34 // "
    buffer[at++] = 35 // #
    at = numberAt(buffer, at, runtimeId)
    buffer[at++] = 34
  } else {
    at = stringAt(buffer, at, label)
  }
  at = bytesAt(buffer, at, closing)
  sink.commit(at)
  return true
}

const bytesAt = (buffer: Uint8Array, at: number, bytes: Uint8Array): number => {
  const length = bytes.length
  for (let i = 0; i < length; i++) buffer[at + i] = bytes[i]!
  return at + length
}

/** A string known to be ASCII with nothing to escape (a timestamp), as is. */
const asciiAt = (buffer: Uint8Array, at: number, text: string): number => {
  const length = text.length
  for (let i = 0; i < length; i++) buffer[at + i] = text.charCodeAt(i)
  return at + length
}

const encoder = new TextEncoder()

/** A string of any characters, as is, in UTF-8. */
const utf8At = (buffer: Uint8Array, at: number, text: string): number =>
  at + encoder.encodeInto(text, buffer.subarray(at)).written

/** A string as JSON: copied between its quotes while it is printable ASCII with nothing to escape, else JSON's own. */
const stringAt = (buffer: Uint8Array, at: number, text: string): number => {
  buffer[at] = 34
  const length = text.length
  for (let i = 0; i < length; i++) {
    const char = text.charCodeAt(i)
    if (char < 0x20 || char === 0x22 || char === 0x5c || char > 0x7e) return utf8At(buffer, at, JSON.stringify(text))
    buffer[at + 1 + i] = char
  }
  buffer[at + 1 + length] = 34
  return at + length + 2
}

const nullableAt = (buffer: Uint8Array, at: number, text: string | null): number =>
  text === null ? bytesAt(buffer, at, nullBytes) : stringAt(buffer, at, text)

/** A whole number's digits. */
const digitsAt = (buffer: Uint8Array, at: number, whole: number): number => {
  let digits = 1
  for (let rest = whole; rest >= 10; rest = Math.floor(rest / 10)) digits++
  for (let i = digits - 1, rest = whole; i >= 0; i--, rest = Math.floor(rest / 10)) buffer[at + i] = 48 + (rest % 10)
  return at + digits
}

/**
 * A number as JSON spells it: by its digits when it is a thousandth below a billion (a duration in
 * milliseconds to the microsecond, a status), which JSON spells as that decimal and no shorter;
 * anything else by JSON itself.
 */
const numberAt = (buffer: Uint8Array, at: number, value: number): number => {
  if (value >= 0 && value < 1e9) {
    const thousandths = Math.round(value * 1000)
    if (thousandths / 1000 === value) {
      const whole = Math.floor(thousandths / 1000)
      let fraction = thousandths - whole * 1000
      at = digitsAt(buffer, at, whole)
      if (fraction === 0) return at
      buffer[at++] = 46 // .
      for (let unit = 100; fraction > 0; unit /= 10) {
        const digit = Math.floor(fraction / unit)
        buffer[at++] = 48 + digit
        fraction -= digit * unit
      }
      return at
    }
  }
  return asciiAt(buffer, at, JSON.stringify(value) ?? "null")
}

/** A sink of one line at a time, for a line wanted as a string (the tests') or made and dropped (the warm-up's). */
export const makeScratchSink = () => {
  let buffer = new Uint8Array(4096)
  let end = 0
  let text: string | undefined
  const decoder = new TextDecoder()
  const sink: LineSink = {
    reserve: (bytes) => {
      if (bytes > buffer.length) buffer = new Uint8Array(bytes * 2)
      text = undefined
      return 0
    },
    buffer: () => buffer,
    commit: (written) => end = written,
    write: (line) => text = line
  }
  return {
    sink,
    /** The last line, without its newline. */
    line: (): string => text ?? decoder.decode(buffer.subarray(0, end - 1))
  }
}
