/**
 * The 409 windows of the store's clock steps (`clock-step`, deployments/clock.ts), for the
 * report: a step of the store's wall clock breaks no guarantee, but it moves the lease ends the
 * store reads off that clock, so a key may be answered 409 for longer than its lease (a step
 * back), or from the Redis store's bound of a clock sample taken before the step for a lease
 * that has run out (a step ahead: docs/design.md §6, until the next sample). Per step, the 409
 * answers that came from the step until `AFTER_MS` after its heal, on how many keys, and the
 * longest a key was answered 409 in them (from the start of its first such request to the end
 * of its last); and, to hold them against, the longest a key was answered 409 outside every
 * step's window.
 */
import type { AppliedFault, Operation } from './history.js'

/**
 * How long after a step's heal its 409s are counted as its own, ms: past the longest a Redis
 * clock sample is used (`SAMPLE_MAX_AGE_MS`, 10 s), and past a lease (3 s) a step of at most
 * 6 s back lengthened.
 */
export const AFTER_MS = 10_000

export interface ClockStepWindow {
  readonly start: number
  readonly end: number
  readonly detail?: string
  /** 409 answers that ended from the step until `AFTER_MS` after its heal. */
  readonly answers409: number
  /** The keys (principal/key) they answered. */
  readonly keys: number
  /** The longest a key was answered 409 in the window, ms, and that key. */
  readonly longestMs: number
  readonly longestKey?: string
  /** 503 recovery-required answers in the same window (a lease run out by the stepped clock). */
  readonly recoveryRequired: number
}

export interface ClockReport {
  readonly steps: readonly ClockStepWindow[]
  /** The longest a key was answered 409 outside every step's window, ms, and that key. */
  readonly elsewhereLongestMs: number
  readonly elsewhereLongestKey?: string
}

/** The longest a key was answered 409 among `answers`: its first one's start to its last one's end. */
function longest(answers: readonly Operation[]): { ms: number; key?: string } {
  const spans = new Map<string, { start: number; end: number }>()
  for (const operation of answers) {
    const id = `${operation.user}/${operation.key}`
    const span = spans.get(id)
    spans.set(
      id,
      span === undefined
        ? { start: operation.start, end: operation.end }
        : { start: Math.min(span.start, operation.start), end: Math.max(span.end, operation.end) },
    )
  }
  let best: { ms: number; key?: string } = { ms: 0 }
  for (const [key, span] of spans) if (span.end - span.start > best.ms) best = { ms: span.end - span.start, key }
  return best
}

/** The clock steps' 409 windows of a run; undefined when no clock step was applied. */
export function clockWindows(
  operations: readonly Operation[],
  faults: readonly AppliedFault[],
): ClockReport | undefined {
  const steps = faults.filter((fault) => fault.kind === 'clock-step')
  if (steps.length === 0) return undefined
  const answered409 = operations.filter((operation) => operation.outcome === 'answer' && operation.status === 409)
  const inWindow = (operation: Operation, step: AppliedFault) =>
    operation.end >= step.start && operation.end <= step.end + AFTER_MS
  const windows = steps.map((step): ClockStepWindow => {
    const answers = answered409.filter((operation) => inWindow(operation, step))
    const best = longest(answers)
    return {
      start: step.start,
      end: step.end,
      ...(step.detail === undefined ? {} : { detail: step.detail }),
      answers409: answers.length,
      keys: new Set(answers.map((operation) => `${operation.user}/${operation.key}`)).size,
      longestMs: best.ms,
      ...(best.key === undefined ? {} : { longestKey: best.key }),
      recoveryRequired: operations.filter(
        (operation) =>
          operation.outcome === 'answer' &&
          operation.code === 'IDEMPOTENCY_RECOVERY_REQUIRED' &&
          !operation.probe &&
          inWindow(operation, step),
      ).length,
    }
  })
  const elsewhere = longest(answered409.filter((operation) => !steps.some((step) => inWindow(operation, step))))
  return {
    steps: windows,
    elsewhereLongestMs: elsewhere.ms,
    ...(elsewhere.key === undefined ? {} : { elsewhereLongestKey: elsewhere.key }),
  }
}

/** The report's line: each step's window, then the longest elsewhere. */
export function clockWindowsText(report: ClockReport | undefined): string | undefined {
  if (report === undefined) return undefined
  const seconds = (ms: number) => `${(ms / 1_000).toFixed(1)} s`
  const steps = report.steps.map(
    (step) =>
      `${seconds(step.start)}–${seconds(step.end)}: ${step.answers409} on ${step.keys} keys, longest ${seconds(step.longestMs)}${step.longestKey ? ` (${step.longestKey})` : ''}${step.recoveryRequired > 0 ? `, ${step.recoveryRequired} recovery-required` : ''}`,
  )
  return `clock steps, 409s from the step to ${AFTER_MS / 1_000} s after its heal: ${steps.join('; ')}; elsewhere the longest ${seconds(report.elsewhereLongestMs)}${report.elsewhereLongestKey ? ` (${report.elsewhereLongestKey})` : ''}`
}
