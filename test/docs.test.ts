import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs"
import { dirname, join } from "node:path"
import { type BrowserContext, chromium, type Page } from "playwright-core"
import { root, type RunningServer, startServer, tempDatabase, testTmp } from "./support/server.ts"

const chromiumPath = "/usr/bin/chromium"
// The README's picture is refreshed on request only (UPDATE_SCREENSHOTS=1): it shows a random port.
const screenshotPath = process.env.UPDATE_SCREENSHOTS
  ? join(root, "test/__screenshots__/docs.png")
  : join(testTmp(), `campaign-api-docs-${process.pid}.png`)
const missing = `Chromium is not installed at ${chromiumPath} (Debian: apt-get install -y chromium)`
const chromiumMissing = !existsSync(chromiumPath)

const isLoopback = (url: string) => {
  const { hostname, protocol } = new URL(url)
  return protocol === "data:" || protocol === "blob:" || ["127.0.0.1", "localhost", "[::1]"].includes(hostname)
}

let server: RunningServer
let profile: string
let browser: BrowserContext
let page: Page
const requested: Array<string> = []

beforeAll(async () => {
  if (chromiumMissing) {
    if (process.env.CI) throw new Error(`${missing}: CI must run the docs test`)
    return
  }
  server = await startServer(tempDatabase())
  profile = mkdtempSync(join(testTmp(), "campaign-api-chromium-"))
  browser = await chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath,
    headless: true,
    viewport: { width: 1280, height: 800 },
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync"
    ]
  })
  page = await browser.newPage()
  page.setDefaultTimeout(10_000)
  page.on("request", (request) => void requested.push(request.url()))
  await page.goto(`${server.url}/docs`, { waitUntil: "networkidle" })
}, 60_000)

afterAll(async () => {
  await browser?.close()
  await server?.stop()
  if (profile !== undefined) rmSync(profile, { recursive: true, force: true })
})

const visible = (text: string, exact = false) => page.getByText(text, { exact }).filter({ visible: true }).first()

describe("GET /docs in headless Chromium", () => {
  it("lists both operations", async (ctx) => {
    ctx.skip(chromiumMissing, `${missing}: skipped outside CI`)
    expect(await page.title()).toBe("Campaign Activation and Identity API")
    await visible("Activate a campaign for a creator").waitFor()
    await visible("Identity", true).click()
    await visible("Resolve the API key").waitFor()
    mkdirSync(dirname(screenshotPath), { recursive: true })
    await page.screenshot({ path: screenshotPath })
    expect(existsSync(screenshotPath)).toBe(true)
  })

  it("offers nothing that points outside: no toolbar to share the document or generate SDKs", async (ctx) => {
    ctx.skip(chromiumMissing, `${missing}: skipped outside CI`)
    await visible("Activate a campaign for a creator").waitFor()
    for (const text of ["Generate SDKs", "Developer Tools", "Share"]) {
      expect(await page.getByText(text, { exact: true }).filter({ visible: true }).count(), text).toBe(0)
    }
  })

  it("loads nothing from outside loopback", async (ctx) => {
    ctx.skip(chromiumMissing, `${missing}: skipped outside CI`)
    expect(requested).toContain(`${server.url}/docs`)
    expect(requested.filter((url) => !isLoopback(url))).toEqual([])
  })
})
