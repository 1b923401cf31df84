import { Config, DateTime, Effect } from "effect"
import { type ApiKeyInfo, Scope } from "../Domain/ApiKey.ts"
import { isoOrNever, limitOf, minuteOf, shownName } from "./KeyText.ts"

/** `text` cut to `width` terminal columns (wide characters count two), with `…` when cut. */
const fit = (text: string, width: number) => {
  if (Bun.stringWidth(text) <= width) return text
  let cut = ""
  for (const character of text) {
    if (Bun.stringWidth(cut + character) > width - 1) break
    cut += character
  }
  return `${cut}…`
}

const padTo = (text: string, width: number) => text + " ".repeat(Math.max(0, width - Bun.stringWidth(text)))

/** Scopes as `campaigns:rw,analytics:r`: each resource once, with the first letter of each of its actions. */
const scopesInShort = (scopes: ReadonlyArray<Scope>) => {
  const actions = new Map<string, string>()
  for (const scope of Scope.literals) {
    if (!scopes.includes(scope)) continue
    const [resource, action] = scope.split(":") as [string, string]
    actions.set(resource, (actions.get(resource) ?? "") + action[0])
  }
  return [...actions].map(([resource, letters]) => `${resource}:${letters}`).join(",")
}

const dateOrNever = (date: DateTime.Utc | null) => date === null ? "never" : DateTime.formatIsoDateUtc(date)

interface ListedKey {
  readonly key: ApiKeyInfo
  readonly status: string
}

/**
 * A column of `keys list`. A table wider than the output gives way column by column, from the
 * lowest `priority` up: first each takes its `short` form, then, if that is still too wide, each
 * is dropped (docs/operators.md, The key command line). A column without a priority is always shown whole,
 * except the one that `fills`: it is cut with `…` to the width the others leave, down to
 * `fills` columns before anything else gives way.
 */
interface Column {
  readonly header: string
  readonly full: (listed: ListedKey) => string
  readonly short?: (listed: ListedKey) => string
  readonly priority?: number
  readonly fills?: number
}

const columns: ReadonlyArray<Column> = [
  { header: "KEY ID", full: ({ key }) => key.keyId },
  { header: "BRAND", full: ({ key }) => key.brandId, short: ({ key }) => `${key.brandId.slice(0, 8)}…`, priority: 4 },
  { header: "NAME", full: ({ key }) => shownName(key.name), fills: 12 },
  {
    header: "SCOPES",
    full: ({ key }) => key.scopes.join(","),
    short: ({ key }) => scopesInShort(key.scopes),
    priority: 3
  },
  { header: "STATUS", full: ({ status }) => status },
  {
    header: "CREATED",
    full: ({ key }) => DateTime.formatIso(key.createdAt),
    short: ({ key }) => DateTime.formatIsoDateUtc(key.createdAt),
    priority: 1
  },
  {
    header: "EXPIRES",
    full: ({ key }) => isoOrNever(key.expiresAt),
    short: ({ key }) => dateOrNever(key.expiresAt),
    priority: 2
  },
  {
    header: "LAST USED",
    full: ({ key }) => key.lastUsedAt === null ? "never" : minuteOf(key.lastUsedAt),
    short: ({ key }) => dateOrNever(key.lastUsedAt),
    priority: 6
  },
  { header: "LIMIT", full: ({ key }) => limitOf(key), priority: 5 }
]

type Shown = ReadonlyArray<{ readonly column: Column; readonly form: "full" | "short" }>

/** Every way the table can be shown, widest first: each one column's next step narrower than the one before. */
const narrowings: ReadonlyArray<Shown> = (() => {
  const givingWay = columns.filter((column) => column.priority !== undefined).sort((a, b) => a.priority! - b.priority!)
  const steps = [
    ...givingWay.filter((column) => column.short !== undefined).map((column) => (shown: Shown): Shown =>
      shown.map((entry) => entry.column === column ? { column, form: "short" } : entry)
    ),
    ...givingWay.map((column) => (shown: Shown): Shown => shown.filter((entry) => entry.column !== column))
  ]
  return steps.reduce<Array<Shown>>(
    (layouts, step) => [...layouts, step(layouts.at(-1)!)],
    [columns.map((column) => ({ column, form: "full" }))]
  )
})()

const widest = (cells: ReadonlyArray<string>) => Math.max(...cells.map((cell) => Bun.stringWidth(cell)))

/** The keys as the widest of `narrowings` that fits in `width` terminal columns (the narrowest when none does). */
export const table = (listed: ReadonlyArray<ListedKey>, width: number) => {
  const laidOut = narrowings.map((shown) =>
    shown.map(({ column, form }) => {
      const cells = [column.header, ...listed.map(form === "short" ? column.short! : column.full)]
      return {
        column,
        cells,
        width: column.fills === undefined ? widest(cells) : Math.min(column.fills, widest(cells))
      }
    })
  )
  const tableWidth = (shown: ReadonlyArray<{ readonly width: number }>) =>
    shown.reduce((sum, { width }) => sum + width, 2 * (shown.length - 1))
  const chosen = laidOut.find((shown) => tableWidth(shown) <= width) ?? laidOut.at(-1)!
  const left = width - tableWidth(chosen)
  const fitted = chosen.map(({ cells, column, width }) =>
    column.fills === undefined ? cells : cells.map((cell) => fit(cell, width + Math.max(0, left)))
  )
  const widths = fitted.map(widest)
  return fitted[0]!.map((_, row) =>
    fitted.map((cells, column) => padTo(cells[row]!, widths[column]!)).join("  ").trimEnd()
  )
    .join("\n")
}

/**
 * The width the table fits in: the terminal's; when the output is not a terminal, `COLUMNS` if
 * it is a whole number above 0, else 80 (docs/operators.md, The key command line).
 */
export const outputWidth = process.stdout.isTTY && process.stdout.columns > 0
  ? Effect.succeed(process.stdout.columns)
  : Config.integer("COLUMNS").pipe(
    Config.validate({ message: "not above 0", validation: (columns) => columns > 0 }),
    Config.orElse(() => Config.succeed(80))
  )
