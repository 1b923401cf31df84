/**
 * How long a test waits for a state (a server listening, an answer, a log line, a poll's effect)
 * before it fails. What takes a second on an idle machine takes many on a loaded one (docs/contributing.md,
 * Tests), so a wait is for the state, and its deadline only decides when a test that will fail
 * says so: minutes, never a figure a slow run could reach.
 */
export const stateDeadlineMs = 2 * 60_000

/**
 * A test's or hook's own bound (test/vitest.config.ts), past a few waits of `stateDeadlineMs`, so
 * that a wait that fails names its state rather than the test timing out around it.
 */
export const testDeadlineMs = 5 * 60_000
