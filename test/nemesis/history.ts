/**
 * What one nemesis run records: every request and its answer (history.jsonl, one operation a
 * line), the faults as they were applied (faults.json), the app processes that ran
 * (instances.json), and the handler executions the apps logged (executions.jsonl). Times are
 * milliseconds from the start of the load.
 */
import type { Route } from './routes.js'
import type { FaultKind } from './schedule.js'

export type { Route } from './routes.js'

export interface Operation {
  /** Unique per request sent, in send order. */
  readonly op: number
  readonly client: number
  /** The principal (`Bearer <user>`). */
  readonly user: string
  readonly key: string
  readonly route: Route
  /** The instance (0-2) it was sent to. */
  readonly instance: number
  /** sha256 of the request body, first 16 hex digits. */
  readonly bodyHash: string
  /** A changed body under a key already answered: 422 is expected. */
  readonly changed: boolean
  /** The final probe after the quiet phase (the inspection of the key's final state). */
  readonly probe: boolean
  /** A hedged retry: sent while the first request of the key still ran (the takeover route). */
  readonly hedge?: boolean
  readonly start: number
  readonly end: number
  /** The HTTP status; 0 when no answer came (`outcome` says why). */
  readonly status: number
  readonly outcome: 'answer' | 'timeout' | 'error'
  /** The problem `code` of the layer's own answers. */
  readonly code?: string
  /** `Idempotent-Replayed: true`. */
  readonly replayed: boolean
  readonly retryAfter?: string
  /** sha256 of the answer's body, first 16 hex digits. */
  readonly responseHash?: string
  /** For deposits: the account and amount sent. */
  readonly account?: string
  readonly amount?: number
  /** The client's error, for `outcome: 'error'`. */
  readonly error?: string
  /** On `/resumes`, a 2xx answer's charge: the payment service's charge id it names. */
  readonly charge?: string
}

/** A fault as applied: when it started and when it healed. */
export interface AppliedFault {
  readonly kind: FaultKind
  readonly start: number
  readonly end: number
  readonly instance?: number
  /** The injected latency of a `*-latency` fault, in ms. */
  readonly delayMs?: number
  readonly detail?: string
}

/** One app process: which instance it served, when, and whether it was killed or paused. */
export interface InstanceLife {
  readonly instance: number
  readonly pid: number
  readonly started: number
  /** When it was SIGKILLed (undefined: it lived to the end of the run). */
  readonly killed?: number
  /** SIGSTOP windows. */
  readonly paused: readonly { readonly start: number; readonly end: number }[]
}

/** One line of the execution log the apps write (test/nemesis/app.ts). */
export interface Execution {
  readonly type: 'execution'
  readonly route: Route
  readonly key: string
  readonly user: string
  readonly token: number
  readonly pid: number
  /** Epoch ms; the checker turns it into an offset. */
  readonly time: number
}

/**
 * On PostgreSQL, what `/resumes`'s charge step did in one run (a `step` line of the execution
 * log, written once the step returned): `ran` when this run called the payment service and
 * committed the charge with its recovery point, not when it found the point committed and got
 * the stored charge back.
 */
export interface StepLine {
  readonly type: 'step'
  readonly route: Route
  readonly key: string
  readonly user: string
  readonly token: number
  readonly pid: number
  readonly step: string
  readonly ran: boolean
  /** The charge id the step returned. */
  readonly charge: string
  /** Epoch ms. */
  readonly time: number
}

/** On PostgreSQL, the row `/resumes` writes after its charge step, with the answer. */
export interface ResumeOrderRow {
  readonly key: string
  readonly principal: string
  readonly charge: string
}

/**
 * One charge the run's payment service made (its `GET /charges` after the run): the downstream
 * effect of `/resumes`, whose customer is the upstream key's identity, `<principal>/<key>`.
 */
export interface Charge {
  readonly id: string
  readonly customer: string
  readonly amount: number
  readonly createdAt?: string
}

/** On PostgreSQL: the deposit rows and balances after the run. */
export interface DepositRow {
  readonly key: string
  readonly principal: string
  readonly account: string
  readonly amount: number
}
export interface BalanceRow {
  readonly account: string
  readonly balance: number
}
