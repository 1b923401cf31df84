import { constants, fstatSync, openSync, writeSync } from "node:fs"

/**
 * Lines for stderr, written together once per turn of the event loop: a write per line (what
 * `console.error` does) cost much of a whoami's throughput at the default level.
 *
 * A pipe whose reader stops (a stuck log shipper) must not stop the server: a write to a full pipe
 * waits until it is read, and every request with it. So when stderr is a pipe, lines go through a
 * descriptor of the server's own on the same pipe, opened without blocking (its flag is its own:
 * the parent's end of the pipe keeps its own), and what the pipe does not take yet waits in memory,
 * tried again every millisecond, in order. Only past `maxBuffered` bytes waiting are new lines
 * dropped, and counted (`dropped`: the metrics and the minute's summary say how many). A file, a
 * terminal or a socket (journald's) is written as before, each write at once.
 *
 * Nothing is lost at exit: what waits is written before the process ends, for up to `exitWait`
 * while the pipe is still full. Bun's own writer of stderr (`Bun.stderr.writer()`) does not block
 * either, but drops what it holds when the process exits, and does not say how much it holds.
 */
export interface LineWriter {
  /** Adds a line (without its newline); written with the turn's others, or dropped and counted. */
  readonly write: (line: string) => void
  /** How many lines were dropped since the process started. */
  readonly dropped: () => number
}

/** How many bytes may wait for a full pipe before new lines are dropped: some 25,000 access lines. */
export const maxBuffered = 8 * 1024 * 1024

/** How long the process waits at exit for a full pipe to take what is left. */
const exitWait = 5_000

/** A descriptor of its own, without blocking, on the pipe that `fd` is; `fd` itself for anything else. */
const writableFd = (fd: number): number => {
  try {
    if (!fstatSync(fd).isFIFO()) return fd
    return openSync(`/proc/self/fd/${fd}`, constants.O_WRONLY | constants.O_NONBLOCK)
  } catch {
    return fd
  }
}

export const makeLineWriter = (
  fd: number,
  onDropped: (lines: number) => void = () => {},
  bound: number = maxBuffered
): LineWriter => {
  const target = writableFd(fd)
  let pending: Array<string> = []
  /** The pending lines' length in characters, with their newlines: their bytes, for ASCII. */
  let pendingLength = 0
  /** Bytes the pipe has not taken yet, in order, before any pending line. */
  let unwritten: Buffer | undefined
  let retry: ReturnType<typeof setTimeout> | undefined
  let dropped = 0

  /** Writes what is pending; false when the pipe is full (EAGAIN) and the rest must wait. */
  const writeOut = (): boolean => {
    if (pending.length > 0) {
      const text = `${pending.join("\n")}\n`
      pending = []
      pendingLength = 0
      if (unwritten === undefined) {
        let written: number
        try {
          written = writeSync(target, text)
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code !== "EAGAIN") return true
          written = 0
        }
        if (written === text.length && written === Buffer.byteLength(text)) return true
        unwritten = Buffer.from(text).subarray(written)
      } else {
        unwritten = Buffer.concat([unwritten, Buffer.from(text)])
      }
    }
    while (unwritten !== undefined && unwritten.length > 0) {
      try {
        unwritten = unwritten.subarray(writeSync(target, unwritten))
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === "EAGAIN") return false
        // Nobody reads stderr any more (EPIPE, say): the lines are dropped, the service goes on.
        unwritten = undefined
      }
    }
    unwritten = undefined
    return true
  }
  const flush = () => {
    retry = undefined
    if (!writeOut()) retry = setTimeout(flush, 1)
  }
  process.on("exit", () => {
    if (retry !== undefined) clearTimeout(retry)
    const until = Date.now() + exitWait
    while (!writeOut() && Date.now() < until) Bun.sleepSync(1)
  })

  return {
    write: (line) => {
      if (unwritten !== undefined && unwritten.length + pendingLength > bound) {
        dropped++
        onDropped(1)
        return
      }
      pendingLength += line.length + 1
      if (pending.push(line) === 1 && retry === undefined) setImmediate(flush)
    },
    dropped: () => dropped
  }
}
