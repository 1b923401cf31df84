/**
 * The garbage-collected heap's sizing, set before anything else loads.
 *
 * JavaScriptCore sizes its heap from the machine's memory: on a machine of 24 GiB it let the heap
 * grow to about three times what was live before collecting, and the server peaked at ~200 MB of
 * RSS under fresh activations. Told the machine has 1 GiB (`BUN_JSC_forceRAMSize`), it collects
 * sooner: 133 MB, with no change in throughput that the benchmark could tell from noise
 * (bench/BENCHMARKS.md). It is a sizing hint, not a limit. JavaScriptCore reads it only from the
 * environment, when the runtime starts, so `serve` sets it by replacing itself (`execve`: the same
 * process id, arguments and environment, plus this one variable) before its modules run. A value
 * the operator set, `0` (JavaScriptCore's own sizing) included, is kept as it is.
 */
const variable = "BUN_JSC_forceRAMSize"
export const defaultRamSize = String(1024 ** 3)

const isServe = (args: ReadonlyArray<string>) => args.find((arg) => !arg.startsWith("-")) === "serve"

if (process.env[variable] === undefined && isServe(process.argv.slice(2))) {
  // A single executable runs its entry point from Bun's embedded file system (`/$bunfs/` on Linux);
  // `bun src/main.ts` needs its runtime flags and the script again.
  const compiled = Bun.main.startsWith("/$bunfs/")
  const args = compiled ? process.argv.slice(2) : [...process.execArgv, process.argv[1]!, ...process.argv.slice(2)]
  try {
    process.execve?.(process.execPath, [process.execPath, ...args], { ...process.env, [variable]: defaultRamSize })
  } catch {
    // Not replaced (the executable cannot be started again): the server runs with the default sizing.
  }
}
