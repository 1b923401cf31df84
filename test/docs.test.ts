import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { createHash } from "node:crypto"
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs"
import { dirname, join } from "node:path"
import { brotliDecompressSync, gunzipSync } from "node:zlib"
import { type BrowserContext, chromium, type Page } from "playwright-core"
import { call } from "./support/client.ts"
import { expectEnvelope } from "./support/contract.ts"
import { stateDeadlineMs } from "./support/deadlines.ts"
import { createKey, root, type RunningServer, session, startServer, tempDatabase, testTmp } from "./support/server.ts"

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

let database: string
let server: RunningServer
/**
 * Where the page is read: the server the document names (PUBLIC_URL's default, localhost), so
 * that "Test Request" calls the page's own origin; from another one the browser would refuse the
 * answer (the API sends no CORS headers).
 */
let origin: string
let profile: string
let browser: BrowserContext
let page: Page
const requested: Array<string> = []

beforeAll(async () => {
  database = tempDatabase()
  server = await startServer(database)
  origin = `http://localhost:${new URL(server.url).port}`
  if (chromiumMissing) {
    if (process.env.CI) throw new Error(`${missing}: CI must run the docs test`)
    return
  }
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
  page.setDefaultTimeout(stateDeadlineMs)
  page.on("request", (request) => void requested.push(request.url()))
  await page.goto(`${origin}/docs`, { waitUntil: "networkidle" })
})

afterAll(async () => {
  await browser?.close()
  await server?.stop()
  if (profile !== undefined) rmSync(profile, { recursive: true, force: true })
})

const visible = (text: string, exact = false) => page.getByText(text, { exact }).filter({ visible: true }).first()

describe("GET /docs in headless Chromium", () => {
  it("lists every operation: activate, the reads, the analytics and whoami", async (ctx) => {
    ctx.skip(chromiumMissing, `${missing}: skipped outside CI`)
    expect(await page.title()).toBe("Campaign Activation and Identity API")
    await visible("Activate a campaign for a creator").waitFor()
    await visible("Retrieve an activation").waitFor()
    await visible("List activations").waitFor()
    await visible("Analytics", true).click()
    await visible("A campaign's numbers").waitFor()
    await visible("Identity", true).click()
    // The operation as the page shows it (its heading), not only the sidebar's entry for it.
    await page.getByRole("heading", { name: "Resolve the API key" }).filter({ visible: true }).first().waitFor()
    await page.getByText("Test Request").filter({ visible: true }).first().waitFor()
    mkdirSync(dirname(screenshotPath), { recursive: true })
    await page.screenshot({ path: screenshotPath })
    expect(existsSync(screenshotPath)).toBe(true)
  })

  it("opens with authentication and the first call: the description's first sections, the call in the first screen", async (ctx) => {
    ctx.skip(chromiumMissing, `${missing}: skipped outside CI`)
    await page.goto(`${origin}/docs`, { waitUntil: "networkidle" })
    await page.getByRole("heading", { level: 1, name: "Campaign Activation and Identity API" }).waitFor()
    const headings = await page.locator("h1, h2").allInnerTexts()
    expect(headings.slice(0, 3).map((heading) => heading.trim())).toEqual([
      "Campaign Activation and Identity API",
      "Authentication",
      "The first call"
    ])
    const firstCall = visible("curl -i \"$API_URL/v1/whoami\"")
    const box = await firstCall.boundingBox()
    expect(box).not.toBeNull()
    expect(box!.y + box!.height).toBeLessThanOrEqual(page.viewportSize()!.height)
  })

  it("lists each operation once in its sidebar, HEAD nowhere, though the document declares it", async (ctx) => {
    ctx.skip(chromiumMissing, `${missing}: skipped outside CI`)
    const document = (await call(server.url, { path: "/openapi.json" })).json
    const operations = Object.values<Record<string, { summary: string }>>(document.paths).flatMap((methods) =>
      Object.entries(methods).map(([method, operation]) => ({ method, summary: operation.summary }))
    )
    expect(operations.filter(({ method }) => method === "head").length).toBeGreaterThan(0)
    await page.goto(`${origin}/docs`, { waitUntil: "networkidle" })
    const sidebar = page.getByRole("navigation", { name: /^Sidebar/ })
    await sidebar.getByText("Activate a campaign for a creator").waitFor()
    // Every group open, so that every entry is there to count.
    for (let closed = sidebar.getByRole("button", { name: /Open Group/ }); (await closed.count()) > 0;) {
      await closed.first().click()
    }
    const entries = await sidebar.locator("li").filter({ hasText: /HTTP Method:/i }).evaluateAll((items) =>
      items.filter((item) => item.querySelector("li") === null).map((item) =>
        (item as HTMLElement).innerText.split("\n")[0]!.trim()
      )
    )
    expect(entries.sort()).toEqual(
      operations.filter(({ method }) => method !== "head").map(({ summary }) => summary).sort()
    )
    expect((await sidebar.innerText()).toLowerCase()).not.toContain("headers only")
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
    expect(requested).toContain(`${origin}/docs`)
    expect(requested.filter((url) => !isLoopback(url))).toEqual([])
  })

  it("Test Request sends the key pasted into the bearer scheme, which is chosen from the start", async (ctx) => {
    ctx.skip(chromiumMissing, `${missing}: skipped outside CI`)
    const { apiKey, keyId } = await createKey(database)
    await page.goto(`${origin}/docs`)
    await visible("Identity", true).click()
    await page.getByRole("button", { name: /Test Request.*get \/v1\/whoami/ }).click()
    const client = page.getByRole("dialog")
    // Only the token is typed: the scheme is not picked from "Auth Type".
    await client.getByPlaceholder("Token").fill(apiKey)
    const sent = page.waitForRequest((request) => request.url() === `${origin}/v1/whoami`)
    await client.getByRole("button", { name: /^Send\b.*\/v1\/whoami/ }).click()
    const request = await sent
    expect(request.headers()["authorization"]).toBe(`Bearer ${apiKey}`)
    const answer = await request.response()
    expect(answer?.status()).toBe(200)
    expect(await answer?.json()).toMatchObject({ ok: true, keyId })
    await page.keyboard.press("Escape")
    await client.waitFor({ state: "hidden" })
  })

  it("shows the Idempotency-Key's two forms, each with what it may hold: 1 to 255 characters, never 512", async (ctx) => {
    ctx.skip(chromiumMissing, `${missing}: skipped outside CI`)
    await page.goto(`${origin}/docs`)
    // The parameter, its two forms behind "Any of": not a line of the description naming it.
    const field = page.getByRole("listitem").filter({ hasText: /Idempotency\W*Key/ })
      .filter({ has: page.getByRole("button", { name: /Any of/ }) }).first()
    await field.scrollIntoViewIfNeeded()
    const bare = await field.innerText()
    expect(bare).toMatch(/max length:\s*255\b/)
    expect(bare).not.toContain("512")
    await field.getByRole("button", { name: /Any of/ }).click()
    await page.getByRole("option", { name: "Quoted key" }).click()
    await field.getByText("once unquoted").waitFor()
    expect(await field.innerText()).not.toContain("512")
  })
})

/** The bytes as sent, not decompressed by fetch. */
const raw = async (path: string, headers: Record<string, string> = {}) => {
  const response = await fetch(`${server.url}${path}`, { headers, decompress: false } as RequestInit)
  return { status: response.status, headers: response.headers, bytes: new Uint8Array(await response.arrayBuffer()) }
}

const scriptPath = async () => {
  const html = new TextDecoder().decode((await raw("/docs")).bytes)
  const path = /<script src="(\/docs\/scalar\.[\w-]+\.js)"><\/script>/.exec(html)?.[1]
  if (path === undefined) throw new Error(`the page names no script:\n${html.slice(0, 2000)}`)
  return path
}

describe("GET /docs and its script", () => {
  it("is a page of a few kilobytes naming Scalar's script by its digest, which is cached for good, and the document by its route", async () => {
    const html = await raw("/docs")
    // The document is not inlined (it grows with every endpoint): Scalar fetches /openapi.json.
    expect(html.bytes.length).toBeLessThan(4 * 1024)
    const text = new TextDecoder().decode(html.bytes)
    expect(text).toContain("<script id=\"api-reference\" data-url=\"/openapi.json\"></script>")
    expect(text).not.toContain("\"openapi\":\"3.1.0\"")
    const path = await scriptPath()
    const script = await raw(path)
    expect(script.status).toBe(200)
    expect(script.headers.get("content-type")).toBe("text/javascript; charset=utf-8")
    expect(script.headers.get("cache-control")).toBe("public, max-age=31536000, immutable")
    expect(script.bytes.length).toBeGreaterThan(1024 * 1024)
    const digest = createHash("sha256").update(script.bytes).digest("base64url").slice(0, 27)
    expect(path).toBe(`/docs/scalar.${digest}.js`)
    expect(script.headers.get("etag")).toBe(`"${digest}"`)
    expect((await raw(path, { "if-none-match": `"${digest}"` })).status).toBe(304)
  })

  it("sends the script in brotli or gzip, whichever the client takes, brotli first", async () => {
    const path = await scriptPath()
    const plain = (await raw(path)).bytes
    const brotli = await raw(path, { "accept-encoding": "gzip, deflate, br, zstd" })
    expect(brotli.headers.get("content-encoding")).toBe("br")
    expect(brotli.headers.get("vary")).toBe("accept-encoding")
    expect(brotliDecompressSync(brotli.bytes).equals(plain)).toBe(true)
    const gzip = await raw(path, { "accept-encoding": "gzip" })
    expect(gzip.headers.get("content-encoding")).toBe("gzip")
    expect(gunzipSync(gzip.bytes).equals(plain)).toBe(true)
    expect(brotli.bytes.length).toBeLessThan(gzip.bytes.length)
  })

  it("answers any other name under /docs with 404, and another method with 405, as envelopes", async () => {
    const path = await scriptPath()
    expectEnvelope(await call(server.url, { path: "/docs/scalar.0.js" }), 404, "NOT_FOUND")
    const post = await call(server.url, { method: "POST", path })
    expectEnvelope(post, 405, "METHOD_NOT_ALLOWED")
    expect(post.headers.get("allow")).toBe("GET, HEAD")
  })

  it("DOCS_ENABLED=false turns the script off with the page", async () => {
    const path = await scriptPath()
    const { result } = await session(tempDatabase(), { DOCS_ENABLED: "false" }, (url) => call(url, { path }))
    expectEnvelope(result, 404, "NOT_FOUND")
  })
})
