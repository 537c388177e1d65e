/**
 * Figures a fault test measures, attached to the test's metadata so the fault suite's summary
 * reporter (test/faults/summary-reporter.ts) can print them when the run ends, even when the
 * test's assertions then fail. Record the figures first, then assert.
 */
import type { TestContext } from 'vitest'

export type FigureValue = string | number | boolean

export interface Figures {
  /** The fault's number in issue 6 ("1" ... "12"), or a name. */
  readonly fault: string
  readonly title: string
  readonly values: Readonly<Record<string, FigureValue>>
}

declare module '@vitest/runner' {
  interface TaskMeta {
    figures?: Figures[]
  }
}

/** Attaches `values` to the running test under `fault`. */
export function recordFigures(
  context: TestContext,
  fault: string,
  title: string,
  values: Record<string, FigureValue>,
): void {
  const meta = context.task.meta
  meta.figures = [...(meta.figures ?? []), { fault, title, values }]
}

/** min..max of a list of numbers, or the single value. */
export function range(values: readonly number[]): string {
  if (values.length === 0) return 'none'
  const min = Math.min(...values)
  const max = Math.max(...values)
  return min === max ? String(min) : `${min}..${max}`
}

/** Counts of each distinct value, e.g. `201:40 409:60`. */
export function tally(values: readonly (string | number)[]): string {
  const counts = new Map<string | number, number>()
  for (const value of values) counts.set(value, (counts.get(value) ?? 0) + 1)
  return [...counts.entries()]
    .sort(([a], [b]) => String(a).localeCompare(String(b)))
    .map(([value, count]) => `${value}:${count}`)
    .join(' ')
}
