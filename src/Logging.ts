import {
  Cause,
  Config,
  Context,
  Effect,
  type Fiber,
  FiberId,
  FiberRef,
  HashMap,
  Inspectable,
  Layer,
  List,
  Logger,
  LogLevel,
  type LogSpan
} from "effect"
import { LogLevelConfig } from "./Config.ts"
import type { RefusalReason } from "./Domain/Errors.ts"
import { type AccessLogFields, type LineSink, makeAccessLineEncoder, makeScratchSink } from "./Logging/AccessLine.ts"
import { makeLineWriter } from "./Logging/Stderr.ts"
import { series } from "./Metrics/Series.ts"

export type { AccessLogFields }

/**
 * What a request's key was, as its access line says it: its id and brand when known, and why it
 * was refused (401s only; docs/operators.md, Operating it). Never the key.
 */
export interface KeyNote {
  readonly keyId: string | null
  readonly brandId: string | null
  readonly reason: RefusalReason | null
}

const noKey: KeyNote = { keyId: null, brandId: null, reason: null }

/**
 * Where a request's fiber keeps its key's note: a slot a server may make for each request alone,
 * taken into in place. A `FiberRef.set` of the note instead (with the library's pre-response
 * handlers) allocated 26.3 KB per whoami against 21.3 (bench/BENCHMARKS.md, One reading of each thing).
 */
export interface KeyNoteSlot {
  note: KeyNote
}

const noSlot: KeyNoteSlot = { note: noKey }

/** The key of the request a fiber serves, as its middleware noted it. */
export const currentKeyNote = FiberRef.unsafeMake<KeyNoteSlot>(noSlot)

/** A slot for one request's key, to start the fiber that serves it with (the edge's). */
export const keyNoteSlot = (): KeyNoteSlot => ({ note: noKey })

/**
 * `noteKey` on the fiber that serves the request: into the slot the server made for this request,
 * with no write of the fiber's state, or else what to run to give the fiber a slot of its own.
 */
export const noteKeyOn = (
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  note: KeyNote
): Effect.Effect<void> | undefined => {
  const slot = fiber.getFiberRef(currentKeyNote)
  if (slot === noSlot) return FiberRef.set(currentKeyNote, { note })
  slot.note = note
  return undefined
}

/** Notes the request's key for its access line, on the fiber that serves it. */
export const noteKey = (note: KeyNote): Effect.Effect<void> =>
  Effect.withFiberRuntime((fiber) => noteKeyOn(fiber, note) ?? Effect.void)

/**
 * An access-log line as the message of a log call: the terminal's pretty logger gets it so and
 * lifts its fields into annotations (`withAccessLogFields`).
 */
export class AccessLogEntry {
  constructor(readonly fields: AccessLogFields) {}
}

/** Writes an access-log entry as the message "request" with its fields as annotations. */
export const withAccessLogFields = <Output>(logger: Logger.Logger<unknown, Output>) =>
  Logger.mapInputOptions(logger, (options) => {
    const [entry] = options.message as ReadonlyArray<unknown>
    if (!(entry instanceof AccessLogEntry)) return options
    let annotations = options.annotations
    for (const [key, value] of Object.entries(entry.fields)) annotations = HashMap.set(annotations, key, value)
    return { ...options, message: ["request"], annotations }
  })

/**
 * The JSON logging's writer of an access line: at once, with the request's fiber for its
 * annotations, log spans and id, in the shape of every other line. It needs no Effect step of its
 * own, nor Effect's logger (a copy of the fiber's locals and a walk of its loggers per line).
 */
export class AccessLogOutput extends Context.Tag("AccessLogOutput")<
  AccessLogOutput,
  (fiber: Fiber.RuntimeFiber<unknown, unknown>, fields: AccessLogFields) => void
>() {}

/** Every JSON line, the access lines with the rest (`Logging/Stderr.ts`); a line dropped counts in the metrics. */
const stderrLines = makeLineWriter(2, (lines) => series.logLinesDropped.unsafeUpdate(lines, []))

/** How many log lines were dropped since the process started: their pipe stayed full (`Logging/Stderr.ts`). */
export const droppedLogLines = (): number => stderrLines.dropped()

const stringify = (value: unknown): string => {
  try {
    return JSON.stringify(value)
  } catch {
    // A cycle or a BigInt somewhere in a logged value: Effect's own careful (and slower) way.
    return Inspectable.stringifyCircular(value)
  }
}

/** The ISO time of a millisecond, kept for the next line of the same millisecond. */
const isoTimestamp = (() => {
  let millis = Number.NaN
  let iso = ""
  return (at: number): string => {
    if (at !== millis) {
      millis = at
      iso = new Date(at).toISOString()
    }
    return iso
  }
})()

/** A line's log spans: each label with the milliseconds since it began. */
const spansObject = (spans: List.List<LogSpan.LogSpan>, now: number): Record<string, number> => {
  const object: Record<string, number> = {}
  if (List.isCons(spans)) { for (const span of spans) object[span.label] = now - span.startTime }
  return object
}

// FiberId.threadName gathers the ids into a set first: a request's fiber has one id.
const fiberLabel = (fiberId: FiberId.FiberId): string =>
  fiberId._tag === "Runtime" ? `#${fiberId.id}` : FiberId.threadName(fiberId)

/**
 * One JSON object per line, always of one shape: `message` is a string (the text parts of the
 * log call), `logLevel`, `timestamp`, `annotations` (the fiber's annotations and the fields of
 * any object logged with the text), `spans`, `fiberId`, and `cause` when there is one.
 */
export const jsonLine = (
  { annotations, cause, date, fiberId, logLevel, message, spans }: Omit<Logger.Logger.Options<unknown>, "context">
): string => {
  const fields: Record<string, unknown> = {}
  // Without an iterator (a request's annotations are usually one entry, its id). Keys whose hashes
  // share a node come in another order than an iterator gives: the same for every line, and JSON's
  // keys have no order to keep.
  HashMap.forEach(annotations, (value, key) => fields[key] = value)
  const texts: Array<string> = []
  for (const part of Array.isArray(message) ? message : [message]) {
    if (typeof part === "string") texts.push(part)
    else if (typeof part === "object" && part !== null && !Array.isArray(part)) Object.assign(fields, part)
    else texts.push(String(part))
  }
  return stringify({
    message: texts.join(" "),
    logLevel: logLevel.label,
    timestamp: isoTimestamp(date.getTime()),
    ...(Cause.isEmpty(cause) ? {} : { cause: Cause.pretty(cause, { renderErrorCause: true }) }),
    annotations: fields,
    spans: spansObject(spans, date.getTime()),
    fiberId: fiberLabel(fiberId)
  })
}

const jsonLines = Logger.make((options) => stderrLines.write(jsonLine(options)))

/** The access line's encoder, with the parts it shares with every JSON line. */
const encodeAccessLine = makeAccessLineEncoder({
  timestamp: isoTimestamp,
  spans: (spans, now) => JSON.stringify(spansObject(spans, now)),
  fiberLabel
})

/**
 * The access line exactly as `jsonLine` writes it (services.test holds the two equal), as a
 * string: encoded as the server writes it (`Logging/AccessLine.ts`), or by the record's way.
 */
export const accessLine = (
  annotations: HashMap.HashMap<string, unknown>,
  fields: AccessLogFields,
  spans: List.List<LogSpan.LogSpan>,
  fiberId: FiberId.FiberId,
  now: number
): string => {
  if (!encodeAccessLine(scratch.sink, annotations, fields, spans, fiberId, now)) {
    return recordAccessLine(annotations, fields, spans, fiberId, now)
  }
  return scratch.line()
}

const scratch = makeScratchSink()

/** The access line as one record of its fields, stringified: what `jsonLine` makes of it. */
const recordAccessLine = (
  annotations: HashMap.HashMap<string, unknown>,
  fields: AccessLogFields,
  spans: List.List<LogSpan.LogSpan>,
  fiberId: FiberId.FiberId,
  now: number
): string => {
  const all: Record<string, unknown> = {}
  HashMap.forEach(annotations, (value, key) => all[key] = value)
  for (const key in fields) all[key] = fields[key as keyof AccessLogFields]
  return stringify({
    message: "request",
    logLevel: "INFO",
    timestamp: isoTimestamp(now),
    annotations: all,
    spans: spansObject(spans, now),
    fiberId: fiberLabel(fiberId)
  })
}

/** Writes the access line into `sink` from the request's fiber: its own annotations, log spans and id. */
const writeLine = (sink: LineSink, fiber: Fiber.RuntimeFiber<unknown, unknown>, fields: AccessLogFields) => {
  const annotations = fiber.getFiberRef(FiberRef.currentLogAnnotations)
  const spans = fiber.getFiberRef(FiberRef.currentLogSpan)
  const fiberId = fiber.id()
  const now = Date.now()
  if (!encodeAccessLine(sink, annotations, fields, spans, fiberId, now)) {
    sink.write(recordAccessLine(annotations, fields, spans, fiberId, now))
  }
}

const accessLines = AccessLogOutput.of((fiber, fields) => writeLine(stderrLines, fiber, fields))

/** Access lines encoded as the JSON logging encodes them, and dropped: the warm-up's (`WarmUp.ts`). */
export const UnwrittenAccessLines = Layer.sync(AccessLogOutput, () => {
  const { sink } = makeScratchSink()
  return AccessLogOutput.of((fiber, fields) => writeLine(sink, fiber, fields))
})

/**
 * Logs go to stderr, so stdout carries only what a command prints (`keys create --json`
 * is one line of JSON): JSON lines for machines, pretty lines on a terminal.
 */
export const LoggingLive = Layer.unwrapEffect(
  // A bad LOG_LEVEL is named with every other bad value by the command's own check (Config.ts):
  // until then, lines are logged at info.
  Effect.map(Config.orElse(LogLevelConfig, () => Config.succeed(LogLevel.Info)), (level) =>
    Layer.merge(
      Logger.minimumLogLevel(level),
      process.stderr.isTTY
        ? Logger.replace(Logger.defaultLogger, withAccessLogFields(Logger.prettyLogger({ stderr: true })))
        : Layer.merge(Logger.replace(Logger.defaultLogger, jsonLines), Layer.succeed(AccessLogOutput, accessLines))
    ))
)

/**
 * A start-up line an operator needs whatever LOG_LEVEL says short of `none` (the address listened
 * on, the database in use): logged at info even when the level is above it.
 */
export const logAtStart = (message: string, annotations: Record<string, unknown>) =>
  Effect.flatMap(FiberRef.get(FiberRef.currentMinimumLogLevel), (level) =>
    Effect.logInfo(message).pipe(
      Effect.annotateLogs(annotations),
      Logger.withMinimumLogLevel(level._tag === "None" ? level : LogLevel.Info)
    ))
