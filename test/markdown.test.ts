import { describe, expect, it } from "@effect/vitest"
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { dirname, join, relative } from "node:path"
import { root } from "./support/server.ts"

/**
 * The README and docs/ as a reader follows them: every relative link reaches a file, and every
 * anchor a heading of it; every shell command can be pasted into bash or zsh (README.md, Walkthrough).
 */

const pages = [
  "README.md",
  ...readdirSync(join(root, "docs")).filter((name) => name.endsWith(".md")).map((name) => `docs/${name}`)
]
const text = (page: string) => readFileSync(join(root, page), "utf8")

/** The page without its fenced blocks, whose `#` lines are comments, not headings. */
const prose = (markdown: string) => markdown.replace(/^```[\s\S]*?^```/gm, "")

/** The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens, repeats numbered. */
const anchors = (markdown: string) => {
  const seen = new Map<string, number>()
  return new Set(
    [...prose(markdown).matchAll(/^#{1,6} (.+)$/gm)].map(([, heading]) => {
      const slug = heading!.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, "").replace(/\s/g, "-")
      const count = seen.get(slug) ?? 0
      seen.set(slug, count + 1)
      return count === 0 ? slug : `${slug}-${count}`
    })
  )
}

const shellBlocks = (markdown: string) => [...markdown.matchAll(/^```sh\n([\s\S]*?)^```/gm)].map(([, block]) => block!)

/**
 * The characters of a shell line that a shell would take as a glob or a background outside quotes:
 * `?`, `*`, `[`, `]` (zsh refuses a glob that matches nothing), and an `&` inside a word (a URL's query).
 */
const unquoted = (line: string) => {
  const found: Array<string> = []
  let quote: "'" | "\"" | undefined
  for (let i = 0; i < line.length; i++) {
    const char = line[i]!
    if (quote === "'") {
      if (char === "'") quote = undefined
    } else if (char === "\\") {
      i++
    } else if (quote === "\"") {
      if (char === "\"") quote = undefined
    } else if (char === "'" || char === "\"") {
      quote = char
    } else if (char === "#" && (i === 0 || /\s/.test(line[i - 1]!))) {
      break
    } else if ("?*[]".includes(char)) {
      found.push(char)
    } else if (char === "&" && /[^\s&;]/.test(line[i - 1] ?? " ") && /[^\s&]/.test(line[i + 1] ?? " ")) {
      found.push(char)
    }
  }
  return found
}

describe("the README and docs/", () => {
  it.each(pages)("%s: every relative link reaches a file, and every anchor a heading there", (page) => {
    const broken = [...prose(text(page)).matchAll(/!?\[[^\]]*\]\(([^)\s]+)\)/g)].map(([, target]) => target!).filter(
      (target) => {
        if (/^[a-z]+:/.test(target)) return false
        const [path, anchor] = target.split("#") as [string, string | undefined]
        const file = path === "" ? page : relative(root, join(root, dirname(page), path))
        if (!existsSync(join(root, file))) return true
        return anchor !== undefined && !(file.endsWith(".md") && anchors(text(file)).has(anchor))
      }
    )
    expect(broken).toEqual([])
  })

  it.each(pages)("%s: every shell command quotes what bash and zsh would expand, and parses", (page) => {
    for (const block of shellBlocks(text(page))) {
      const lines = block.replace(/\\\n/g, " ").split("\n")
      expect(lines.filter((line) => unquoted(line).length > 0), block).toEqual([])
      const parsed = Bun.spawnSync(["bash", "-n", "-c", block])
      expect(`${parsed.stderr}`, block).toBe("")
    }
  })

  it("would have caught the walkthrough's unquoted query of before", () => {
    expect(unquoted(`curl -i http://localhost:3000/v1/activations?limit=5 -H "Authorization: Bearer $KEY"`)).toEqual([
      "?"
    ])
    expect(unquoted(`curl -i 'http://localhost:3000/v1/activations?limit=5&campaignId=x' # a comment? [yes]`)).toEqual(
      []
    )
    expect(unquoted(`curl http://localhost:3000/v1/activations?a=1&b=2`)).toEqual(["?", "&"])
    expect(unquoted(`npm init -y && PORT=3001 bun run start &`)).toEqual([])
  })

  it("README stays the short way in: at most 400 lines", () => {
    expect(text("README.md").split("\n").length).toBeLessThanOrEqual(401)
  })
})
