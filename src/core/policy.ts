/**
 * Per-operation policy: lease, windows and what to do with an expired execution, plus the
 * revision stored with every record and compared on replay (docs/design.md §4; §7 defect 6).
 */

import { integerOption, invalidOption } from './errors.js'
import { ExpiredExecution } from './record.js'
import type { RecordTimes } from './store.js'

export interface Policy extends RecordTimes {
  /**
   * Stored with every record and compared on replay: bump it when records written under the
   * old policy must no longer be replayed as they are (they answer recovery-required).
   */
  readonly revision: string
  /**
   * docs/design.md §3 steps 4 and 7. `recover` (default) never re-runs an execution whose effect
   * may have happened; `takeover` re-runs one whose lease ran out; `resume` re-runs that and an
   * ABANDONED one (a thrown error, a lost lease): for an action whose external effects go through
   * derived keys (`keyFor`) and whose local writes go through its transaction.
   */
  readonly expiredExecution: ExpiredExecution
}

/**
 * The policy's options as the plugin's routes and `idempotent()` name them (`resume` and
 * `policyRevision` for `expiredExecution: 'resume'` and `revision`).
 */
export const POLICY_KEYS = [
  'leaseMs',
  'replayWindowMs',
  'failureRetentionMs',
  'expiredExecution',
  'resume',
  'policyRevision',
] as const

/** Defaults (docs/design.md §5): lease 30 s, replay window 24 h, failure retention 24 h. */
export const DEFAULT_POLICY: Policy = Object.freeze({
  revision: '1',
  leaseMs: 30_000,
  replayWindowMs: 24 * 60 * 60 * 1000,
  failureRetentionMs: 24 * 60 * 60 * 1000,
  expiredExecution: ExpiredExecution.RECOVER,
})

/** Longest replay window or failure retention: one year. */
export const MAX_WINDOW_MS = 365 * 24 * 60 * 60 * 1000

/** Shortest lease: the renew heartbeat runs every lease/3, so shorter leases only add load. */
export const MIN_LEASE_MS = 30

/**
 * Merges `input` over `base` and validates every field.
 * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` naming the field and its accepted range.
 */
export function resolvePolicy(input: Partial<Policy> | undefined, base: Policy = DEFAULT_POLICY): Policy {
  const policy = { ...base, ...omitUndefined(input ?? {}) }
  // The lease drives timers: 2^31 - 1 ms (~24.8 days) is the longest delay Node.js accepts.
  integerOption('leaseMs', policy.leaseMs, MIN_LEASE_MS, 2_147_483_647, 'milliseconds')
  integerOption('replayWindowMs', policy.replayWindowMs, 1, MAX_WINDOW_MS, 'milliseconds')
  integerOption('failureRetentionMs', policy.failureRetentionMs, 1, MAX_WINDOW_MS, 'milliseconds')
  if (typeof policy.revision !== 'string' || policy.revision.length === 0 || policy.revision.length > 64) {
    invalidOption('revision', 'a non-empty string of at most 64 characters', policy.revision)
  }
  if (!Object.values(ExpiredExecution).includes(policy.expiredExecution)) {
    invalidOption('expiredExecution', '"recover", "takeover" or "resume"', policy.expiredExecution)
  }
  return Object.freeze(policy)
}

/**
 * The `expiredExecution` an options object asks for with its `resume` flag (`resume: true` is
 * `expiredExecution: 'resume'`): undefined keeps the default or the base's. `resume: false` turns
 * off a `resume` the base has (the plugin-wide options), back to `recover`.
 * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` for a `resume` that is not a boolean, or
 *   `resume: true` beside another `expiredExecution`.
 */
export function expiredExecutionOption(
  resume: unknown,
  expiredExecution: ExpiredExecution | undefined,
  base: ExpiredExecution | undefined,
  where = '',
): ExpiredExecution | undefined {
  if (resume === undefined) return expiredExecution
  if (typeof resume !== 'boolean') invalidOption(`${where}resume`, 'a boolean', resume)
  if (resume) {
    if (expiredExecution !== undefined && expiredExecution !== ExpiredExecution.RESUME) {
      invalidOption(
        `${where}expiredExecution`,
        "left out beside resume: true (which is expiredExecution: 'resume')",
        expiredExecution,
      )
    }
    return ExpiredExecution.RESUME
  }
  if (expiredExecution !== undefined) return expiredExecution
  return base === ExpiredExecution.RESUME ? ExpiredExecution.RECOVER : undefined
}

/** Drops keys whose value is `undefined`, so they mean "use the default". */
export function omitUndefined<T extends object>(input: T): Partial<T> {
  const out: Partial<T> = {}
  for (const [name, value] of Object.entries(input)) {
    if (value !== undefined) (out as Record<string, unknown>)[name] = value
  }
  return out
}
