/**
 * The floor for start-up: a bare `Bun.serve` answering 200 to anything, compiled as the service
 * is (`--compile --bytecode`). The bench starts it and the service in turns and compares their
 * times to a first 200 (bench/README.md, what it does).
 */
Bun.serve({
  hostname: process.env["HOST"] ?? "127.0.0.1",
  port: Number(process.env["PORT"] ?? 3000),
  fetch: () => Response.json({ ok: true })
})
