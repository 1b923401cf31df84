/**
 * `bun run build`: the single binary (docs/operators.md, The single binary), `bun build src/main.ts --compile
 * --bytecode` with nothing of the machine it was built on in it. `bun deploy/build.ts [outfile]`;
 * dist/campaign-api by default.
 *
 * Bun compiles a CommonJS module's `__dirname` and `__filename` in as the build machine's absolute
 * paths (oven-sh/bun#12509; oven-sh/bun#29066 would make them the binary's own `/$bunfs/root/…`).
 * A binary so built reads the checkout's files while the checkout exists, and so behaves otherwise
 * where it is deployed: ioredis read the checkout's package.json for the version it names to Redis
 * (and msgpackr-extract loaded its native add-on from the checkout, while `@effect/platform`'s index,
 * which reaches its MsgPack module, was imported). Here every module's paths lie in the binary's
 * own file system, where nothing of theirs is: on every machine ioredis names its version as it
 * always did on a deployed host, `error-fetching-version`.
 */
import type { BunPlugin } from "bun"
import { readFileSync, statSync } from "node:fs"
import { dirname, join, relative, resolve } from "node:path"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("..", import.meta.url))
const outfile = resolve(process.argv[2] ?? join(root, "dist/campaign-api"))

/** The root of the binary's own file system, as its modules see it. */
const embedded = "/$bunfs/root"

const ownPaths: BunPlugin = {
  name: "the binary's own paths",
  setup(build) {
    build.onLoad({ filter: /\/node_modules\/.*\.[cm]?js$/ }, ({ path }) => {
      const contents = readFileSync(path, "utf8")
      if (!/\b__(dirname|filename)\b/.test(contents)) return undefined
      const inside = join(embedded, relative(root, path))
      // Declared by the module itself, the names are no longer free for the bundler to fill in.
      const declared = [`var __dirname = ${JSON.stringify(dirname(inside))}`, `__filename = ${JSON.stringify(inside)}`]
      return { contents: `${declared.join(", ")};\n${contents}`, loader: "js" }
    })
  }
}

/**
 * Scalar's script, the string of 3.4 MB that `@effect/platform`'s docs page inlines, made when the
 * page is first asked for (`Edge/Documents.ts` imports its module then) instead of at start. The
 * bundler hoists a module that only declares a constant to the top level, where it is evaluated
 * with everything else, but evaluates a CommonJS module when it is first required: so the module's
 * one export is given as CommonJS. Held from the start, the string was 6.5 MB of a heap that
 * idles at some 20 MB, and the heap is let grow in proportion to what it holds before it is
 * collected (bench/BENCHMARKS.md, Memory).
 */
const scalarScript = "/@effect/platform/dist/esm/internal/httpApiScalar.js"
const scalarExport = "/* eslint-disable *//** @internal */export const javascript="
const lateScalar: BunPlugin = {
  name: "Scalar's script when the docs are asked for",
  setup(build) {
    build.onLoad({ filter: /\/@effect\/platform\/dist\/esm\/internal\/httpApiScalar\.js$/ }, ({ path }) => {
      const contents = readFileSync(path, "utf8")
      if (!path.endsWith(scalarScript) || !contents.startsWith(scalarExport)) {
        throw new Error(`${path} no longer begins with the export deploy/build.ts makes CommonJS`)
      }
      return { contents: `exports.javascript=${contents.slice(scalarExport.length)}`, loader: "js" }
    })
  }
}

const built = await Bun.build({
  entrypoints: [join(root, "src/main.ts")],
  compile: { outfile },
  bytecode: true,
  plugins: [lateScalar, ownPaths]
})
if (!built.success) {
  console.error(built.logs.join("\n"))
  process.exit(1)
}
console.log(`${outfile}: ${statSync(outfile).size} bytes`)
