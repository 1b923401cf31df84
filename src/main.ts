/**
 * The entry point. `serve` may first replace its own process to size the garbage-collected heap
 * (Memory.ts), so the program is loaded only after that: loaded before, it was loaded twice.
 * A bare `serve` loads the server alone (Serve.ts).
 */
import "./Memory.ts"
import { commandLine } from "./Cli/CommandLine.ts"
;(commandLine.bareServe ? import("./Serve.ts") : import("./Program.ts")).catch((error: unknown) => {
  console.error(error)
  process.exit(1)
})
