import { fileURLToPath } from "node:url"
import { defineConfig } from "vitest/config"
import { testDeadlineMs } from "./support/deadlines.ts"

export default defineConfig({
  test: {
    root: fileURLToPath(new URL("..", import.meta.url)),
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/support/globalSetup.ts"],
    // One fork: other pools have exited 0 after running only some files, printing no summary.
    pool: "forks",
    poolOptions: { forks: { singleFork: true } },
    // A bound for a test that hangs, not a measure: a loaded machine may take minutes (docs/contributing.md, Tests).
    testTimeout: testDeadlineMs,
    hookTimeout: testDeadlineMs
  }
})
