/**
 * Fault 1's workload, shared with fault 12 (Redis Cluster): trials of REQUESTS concurrent
 * requests with one fresh key each, spread over the app processes, and their check against the
 * execution log.
 */
import { randomUUID } from 'node:crypto'
import { expect } from 'vitest'
import type { AppProcess } from './app-process.js'
import type { ExecutionLog } from './execution-log.js'
import { type Answer, post } from './fault-app.js'
import { tally } from './figures.js'
import { sleep } from './sleep.js'

export const TRIALS = 100
export const REQUESTS = 100
/** Requests leave in four waves, so a trial sees 409s (handler still running) and replays. */
export const WAVE_DELAYS_MS = [0, 20, 40, 150]

export interface TrialResult {
  readonly key: string
  readonly answers: Answer[]
}

/** Sends one trial's requests: REQUESTS with one key, alternating between the apps, in waves. */
export async function runTrial(apps: readonly AppProcess[], user: string, trial: number): Promise<TrialResult> {
  const key = `trial-${trial}-${randomUUID()}`
  const body = { item: `book-${trial}`, qty: 1, delayMs: 60 }
  const answers = await Promise.all(
    Array.from({ length: REQUESTS }, async (_, i) => {
      await sleep(WAVE_DELAYS_MS[i % WAVE_DELAYS_MS.length] as number)
      return post((apps[i % apps.length] as AppProcess).url, { user, key, body, deadlineMs: 20_000 })
    }),
  )
  return { key, answers }
}

export interface TrialSummary {
  readonly executionsPerTrial: number[]
  readonly fresh: number[]
  readonly distinctBodies: number[]
  readonly statuses: string
  readonly replays: number
  readonly conflicts: number
  readonly serverErrors: number
  readonly unexpected: number
}

/** Checks every trial against its executions in the log. */
export function summarise(trials: readonly TrialResult[], log: ExecutionLog, user: string): TrialSummary {
  const counts = new Map<string, number>()
  for (const entry of log.executions((entry) => entry.user === user)) {
    counts.set(entry.key as string, (counts.get(entry.key as string) ?? 0) + 1)
  }
  const all = trials.flatMap((trial) => trial.answers)
  return {
    executionsPerTrial: trials.map((trial) => counts.get(trial.key) ?? 0),
    fresh: trials.map((trial) => trial.answers.filter((a) => a.status === 201 && !a.replayed).length),
    distinctBodies: trials.map(
      (trial) => new Set(trial.answers.filter((a) => a.status === 201).map((a) => a.body)).size,
    ),
    statuses: tally(all.map((a) => (a.timedOut ? 'timeout' : a.status))),
    replays: all.filter((a) => a.status === 201 && a.replayed).length,
    conflicts: all.filter((a) => a.status === 409).length,
    serverErrors: all.filter((a) => a.status >= 500 || a.timedOut === true).length,
    unexpected: all.filter((a) => a.status !== 201 && a.status !== 409).length,
  }
}

/**
 * Fault 1's claim: in every trial the handler ran exactly once, exactly one answer was a fresh
 * 201, every 2xx body was the same, and no request got a 5xx, no answer, or an unexpected status.
 */
export function expectOncePerTrial(summary: TrialSummary): void {
  expect(summary.executionsPerTrial.every((n) => n === 1)).toBe(true)
  expect(summary.fresh.every((n) => n === 1)).toBe(true)
  expect(summary.distinctBodies.every((n) => n === 1)).toBe(true)
  expect(summary.serverErrors).toBe(0)
  expect(summary.unexpected).toBe(0)
}
