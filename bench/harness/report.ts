/** How the benchmarks print: aligned tables, numbers as en-US, medians, and the lines that flag a figure. */

export const table = (rows: ReadonlyArray<ReadonlyArray<string>>): string => {
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => row[column]!.length)))
  return rows
    .map((row) =>
      row.map((cell, column) => column === 0 ? cell.padEnd(widths[column]!) : cell.padStart(widths[column]!)).join("  ")
    )
    .join("\n")
}

export const number = (value: number, digits = 0) =>
  value.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits })

/** The true median (the mean of the middle two of an even count). */
export const median = (values: ReadonlyArray<number>): number => {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2
}

export const printErrors = (problems: ReadonlyArray<string>) => {
  for (const problem of problems) console.log(`!!! ERRORS: ${problem}; these figures are not valid`)
}

/** Exit code 1 when there is one: a figure beside an error is not valid. */
export const printProblems = (problems: ReadonlyArray<string>) => {
  if (problems.length === 0) return
  console.log(
    `\n!!! ${problems.length} PROBLEM(S): some figures above are not valid:\n${
      problems.map((p) => `  - ${p}`).join("\n")
    }`
  )
  process.exitCode = 1
}
