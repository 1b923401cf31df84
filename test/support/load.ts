/** A copy of `items` in random order (Fisher-Yates). */
export const shuffle = <A>(items: ReadonlyArray<A>): Array<A> => {
  const copy = [...items]
  for (let i = copy.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1))
    ;[copy[i], copy[j]] = [copy[j]!, copy[i]!]
  }
  return copy
}

export const randomInt = (min: number, max: number) => min + Math.floor(Math.random() * (max - min + 1))

/** Polls `check` until it holds; a bounded wait for something to happen, never a measurement. */
export const eventually = async (
  what: string,
  check: () => boolean | Promise<boolean>,
  { intervalMs = 20, timeoutMs = 10_000 } = {}
): Promise<void> => {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await Bun.sleep(intervalMs)
  }
}

/**
 * Runs `loops` copies of `step` back to back until `stop()` is called; a step that throws ends its
 * loop, and what it threw is kept in `errors`. `done` resolves once every loop has ended.
 */
export const runLoops = (loops: number, step: (loop: number) => Promise<void>) => {
  let running = true
  const errors: Array<unknown> = []
  const done = Promise.all(
    Array.from({ length: loops }, async (_, loop) => {
      while (running) {
        try {
          await step(loop)
        } catch (error) {
          errors.push(error)
          return
        }
      }
    })
  )
  return {
    stop: () => {
      running = false
    },
    done,
    errors
  }
}
