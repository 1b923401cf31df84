import { Effect, Layer, Logger } from "effect"
import { writeSync } from "node:fs"
import { LogLevelConfig } from "./Config.ts"
import { withAccessLogFields } from "./Edge/AccessLog.ts"

/**
 * Lines for stderr, written together once per turn of the event loop: a write per line (what
 * `console.error` does) cost a third of a whoami's throughput at the default level. Whatever is
 * still buffered is written when the process exits, so no line is lost to a failed start.
 */
const bufferedStderr = (() => {
  let pending: Array<string> = []
  const flush = () => {
    if (pending.length === 0) return
    let bytes = Buffer.from(`${pending.join("\n")}\n`)
    pending = []
    while (bytes.length > 0) {
      try {
        bytes = bytes.subarray(writeSync(2, bytes))
      } catch (error) {
        // A non-blocking stderr that is full: keep the rest for the next turn.
        if ((error as NodeJS.ErrnoException).code !== "EAGAIN") throw error
        pending.unshift(bytes.toString().slice(0, -1))
        setTimeout(flush, 1)
        return
      }
    }
  }
  process.on("exit", flush)
  return (line: string) => {
    if (pending.push(line) === 1) setImmediate(flush)
  }
})()

const jsonLines = Logger.make((options) => bufferedStderr(Logger.jsonLogger.log(options)))

/**
 * Logs go to stderr, so stdout carries only what a command prints (`keys create --json`
 * is one line of JSON): JSON lines for machines, pretty lines on a terminal.
 */
export const LoggingLive = Layer.unwrapEffect(
  Effect.map(LogLevelConfig, (level) =>
    Layer.mergeAll(
      Logger.replace(
        Logger.defaultLogger,
        withAccessLogFields(process.stderr.isTTY ? Logger.prettyLogger({ stderr: true }) : jsonLines)
      ),
      Logger.minimumLogLevel(level)
    ))
)
