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

/** The buffer's first size, and the size it goes back to once empty after a burst. */
const initialSize = 64 * 1024

export const makeLineWriter = (
  fd: number,
  onDropped: (lines: number) => void = () => {},
  bound: number = maxBuffered
): LineWriter => {
  const target = writableFd(fd)
  /**
   * The bytes not yet written, lines and their newlines, from `start` to `end`: each line is
   * copied in as it comes, and written from here, with no string of the turn's lines made and no
   * buffer of them made again per turn.
   */
  let buffer = Buffer.allocUnsafe(initialSize)
  let start = 0
  let end = 0
  let scheduled = false
  let retry: ReturnType<typeof setTimeout> | undefined
  let dropped = 0

  /** Room for `bytes` more at the end: what is written dropped from the front, or a larger buffer. */
  const makeRoom = (bytes: number) => {
    const waiting = end - start
    if (waiting + bytes <= buffer.length) {
      buffer.copyWithin(0, start, end)
    } else {
      let size = buffer.length * 2
      while (size < waiting + bytes) size *= 2
      const larger = Buffer.allocUnsafe(size)
      buffer.copy(larger, 0, start, end)
      buffer = larger
    }
    start = 0
    end = waiting
  }

  /** Writes what waits; false when the pipe is full (EAGAIN) and the rest must wait. */
  const writeOut = (): boolean => {
    while (start < end) {
      try {
        start += writeSync(target, buffer, start, end - start)
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === "EAGAIN") return false
        // Nobody reads stderr any more (EPIPE, say): the lines are dropped, the service goes on.
        start = end
      }
    }
    start = 0
    end = 0
    // Back to its first size once empty after a burst that grew it.
    if (buffer.length > initialSize * 16) buffer = Buffer.allocUnsafe(initialSize)
    return true
  }
  const flush = () => {
    scheduled = false
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
      const bytes = Buffer.byteLength(line) + 1
      if (retry !== undefined && end - start + bytes > bound) {
        dropped++
        onDropped(1)
        return
      }
      if (end + bytes > buffer.length) makeRoom(bytes)
      end += buffer.write(line, end)
      buffer[end++] = 10
      if (!scheduled && retry === undefined) {
        scheduled = true
        setImmediate(flush)
      }
    },
    dropped: () => dropped
  }
}
