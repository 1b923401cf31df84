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
  /**
   * Room for one line of at most `bytes` bytes, its newline included, for a line encoded straight
   * into the writer's buffer (the access line, `Logging/AccessLine.ts`): the offset in `buffer()`
   * to write it at, or -1 when it is dropped (and counted). `commit` is given the line's end before
   * anything else is written.
   */
  readonly reserve: (bytes: number) => number
  /** The buffer that `reserve`'s offset is in, until the next `reserve` or `write`. */
  readonly buffer: () => Uint8Array
  /** The line reserved for is written up to `end` (its newline included). */
  readonly commit: (end: number) => void
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
const initialSize = 128 * 1024

/**
 * Past this many bytes waiting, they are written at once rather than at the turn's end: a turn
 * of many requests needs no larger buffer, and no copy into one.
 */
const flushAt = 64 * 1024

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

  const reserve = (bytes: number): number => {
    if (retry !== undefined && end - start + bytes > bound) {
      dropped++
      onDropped(1)
      return -1
    }
    if (end + bytes > buffer.length) makeRoom(bytes)
    return end
  }
  const commit = (written: number) => {
    end = written
    if (retry !== undefined) return
    if (end - start >= flushAt) {
      if (!writeOut()) retry = setTimeout(flush, 1)
    } else if (!scheduled) {
      scheduled = true
      setImmediate(flush)
    }
  }

  return {
    write: (line) => {
      // UTF-8 takes at most three bytes for each of a string's UTF-16 units: no count of them first.
      const at = reserve(line.length * 3 + 1)
      if (at < 0) return
      const written = at + buffer.write(line, at)
      buffer[written] = 10
      commit(written + 1)
    },
    reserve,
    buffer: () => buffer,
    commit,
    dropped: () => dropped
  }
}
