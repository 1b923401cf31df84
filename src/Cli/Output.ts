import { Effect, Layer } from "effect"
import { existsSync, writeSync } from "node:fs"
import { databaseName, type DatabaseTarget } from "../Config.ts"

/**
 * A sentence of the command line's own on stderr. Not through `Console`, which while a command line
 * is read is @effect/cli's, whose sentences are said again in ours (Usage.ts).
 */
export const say = (sentence: string) => Effect.sync(() => console.error(sentence))

/** One sentence on stderr and the exit code: 2 for a usage error, 1 for a key that is not there (docs/operators.md, Exit codes). */
export const failWith = (code: 1 | 2, sentence: string) =>
  Effect.zipRight(say(sentence), Effect.sync(() => void (process.exitCode = code)))

/**
 * What a command that opens the database says first, on stderr so that `--json` output stays one
 * line: which database (docs/operators.md, The key command line). A SQLite file that `keys create` is about
 * to make is said to be new, as it may be the wrong directory or DATABASE_URL.
 */
const databaseNotice = (target: DatabaseTarget) =>
  Effect.sync(() => {
    const isNew = target._tag === "sqlite" && target.filename !== ":memory:" && !existsSync(target.filename)
    return `Database: ${databaseName(target)}${isNew ? " (new: no database was there)" : ""}`
  })

/**
 * A line on stderr that is not an error: written as it is, where Bun's `console.error` prints in
 * red on a terminal.
 */
const notice = (line: string) => Effect.sync(() => void writeSync(2, `${line}\n`))

/** `layer`, which opens the database `target` names, saying which one once it is open. */
export const announced = <A, E, R>(target: DatabaseTarget, layer: Layer.Layer<A, E, R>) =>
  Layer.unwrapEffect(Effect.map(databaseNotice(target), (said) => Layer.tap(layer, () => notice(said))))
