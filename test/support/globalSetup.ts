import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"

/**
 * One temporary directory for everything a run of the suite makes (databases, browser profiles,
 * screenshots), removed when the run ends: the test files read it from the environment, which
 * the test fork inherits from here.
 */
export default function setup() {
  const root = mkdtempSync(join(tmpdir(), "campaign-api-tests-"))
  process.env["CAMPAIGN_API_TEST_TMP"] = root
  return () => rmSync(root, { recursive: true, force: true })
}
