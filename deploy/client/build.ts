/**
 * `bun run build:client`: the typed Effect client as a package of its own in dist/client
 * (docs/integrators.md, Typed client for TypeScript). It holds the HttpApi definition and nothing else: its
 * JavaScript bundled into one module with effect and @effect/platform left to the integrator as
 * peer dependencies at the exact versions this checkout is built and tested with, and its .d.ts.
 */
import { mkdirSync, rmSync, writeFileSync } from "node:fs"
import { join, relative } from "node:path"
import { fileURLToPath } from "node:url"
import { version } from "../../src/Version.ts"

const root = fileURLToPath(new URL("../..", import.meta.url))
const out = join(root, "dist/client")
/** The packages a client brings itself: the definition is made of their classes. */
const peers: ReadonlyArray<string> = ["effect", "@effect/platform"]

const fail = (message: string): never => {
  console.error(`build:client: ${message}`)
  process.exit(1)
}

rmSync(out, { recursive: true, force: true })
mkdirSync(out, { recursive: true })

const bundle = await Bun.build({
  entrypoints: [join(root, "src/Api.ts")],
  outdir: out,
  naming: "index.js",
  target: "node",
  format: "esm",
  external: [...peers],
  metafile: true
})
if (!bundle.success) fail(bundle.logs.join("\n"))

// The definition holds no server code (docs/integrators.md, Typed client for TypeScript): anything it reaches
// besides src/ and the peers would be bundled into, or required by, every integrator's program.
for (const [input, { imports }] of Object.entries(bundle.metafile!.inputs)) {
  const path = relative(root, join(process.cwd(), input))
  if (!path.startsWith("src/") && path !== "package.json") fail(`${path} would be bundled into the client`)
  for (const { external, path: imported } of imports) {
    if (external && !peers.some((peer) => imported === peer || imported.startsWith(`${peer}/`))) {
      fail(`${path} imports ${imported}`)
    }
  }
}

const tsc = Bun.spawnSync(
  [process.execPath, Bun.resolveSync("typescript/bin/tsc", root), "-p", join(root, "deploy/client/tsconfig.json")],
  { stdout: "inherit", stderr: "inherit" }
)
if (tsc.exitCode !== 0) fail("tsc could not emit the declarations")

const installed = async (name: string): Promise<string> =>
  (await import(`${name}/package.json`, { with: { type: "json" } })).default.version

const entryTypes = "./types/src/Api.d.ts"
writeFileSync(
  join(out, "package.json"),
  JSON.stringify(
    {
      name: "campaign-api-client",
      version,
      description:
        "The Campaign Activation and Identity API's HttpApi definition: HttpApiClient.make(CampaignApi, { baseUrl })",
      type: "module",
      exports: { ".": { types: entryTypes, default: "./index.js" } },
      types: entryTypes,
      sideEffects: false,
      peerDependencies: Object.fromEntries(await Promise.all(peers.map(async (name) => [name, await installed(name)])))
    },
    null,
    2
  ) + "\n"
)
console.log(`build:client: ${relative(root, out)} (campaign-api-client ${version})`)
