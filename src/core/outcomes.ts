/**
 * What `execute()` answers: one discriminated union, one member per situation the caller must
 * treat differently (docs/design.md §4, §5). Faults of the store are folded into values here, so an
 * adapter maps every outcome with one switch.
 */
import { FailureKind, type RecoveryReason } from './record.js'

/**
 * How an action's settled result is to be recorded: COMPLETE, a result stored and replayed (2xx-4xx
 * over HTTP); else a failure of its `FailureKind`: RETRYABLE, not processed and no effect
 * (FAILED_RETRYABLE, so a retry may run again), or UNKNOWN, the effect unknown (ABANDONED, so
 * retries answer recovery-required).
 */
export const Classification = { COMPLETE: 'complete', ...FailureKind } as const
export type Classification = (typeof Classification)[keyof typeof Classification]

/** An action's settled result. */
export type Settled<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: unknown }

/** Why an action's result could not be recorded as its scope's answer. */
export const UnrecordedReason = {
  /** The store could not be reached or did not answer in time. */
  STORE_UNAVAILABLE: 'STORE_UNAVAILABLE',
  /** Another invocation took the scope over (the lease ran out): this result is not the answer. */
  LOST_OWNERSHIP: 'LOST_OWNERSHIP',
  /** The store holds a different completed answer for this invocation's attempt. */
  CONFLICT: 'CONFLICT',
  /**
   * With `transaction`: the action's transaction rolled back (the commit failed, or its result
   * could not be stored), so nothing of it happened; the record is FAILED_RETRYABLE.
   */
  ROLLED_BACK: 'ROLLED_BACK',
} as const
export type UnrecordedReason = (typeof UnrecordedReason)[keyof typeof UnrecordedReason]

export type ExecuteOutcome<T> =
  /** The action ran once and its result is stored: this is the scope's answer. */
  | { readonly kind: 'EXECUTED'; readonly value: T; readonly attempt: number }
  /** The scope was completed before: the stored answer, decoded. The action did not run. */
  | { readonly kind: 'REPLAYED'; readonly value: T }
  /** Another invocation holds the scope; retry after `retryAfterMs`. The action did not run. */
  | { readonly kind: 'IN_PROGRESS'; readonly retryAfterMs: number }
  /** The same scope was used with a different request. The action did not run. */
  | { readonly kind: 'FINGERPRINT_MISMATCH' }
  /** A person or a recovery job must decide. The action did not run. */
  | { readonly kind: 'RECOVERY_REQUIRED'; readonly reason: RecoveryReason }
  /** The store could not decide the claim. The action did not run. */
  | { readonly kind: 'STORE_UNAVAILABLE'; readonly retryAfterMs: number; readonly cause: unknown }
  /**
   * The action ran and failed. `recorded` says whether the record now shows it
   * (FAILED_RETRYABLE for `retryable`, ABANDONED for `unknown`).
   */
  | {
      readonly kind: 'FAILED'
      readonly classification: typeof Classification.RETRYABLE | typeof Classification.UNKNOWN
      readonly settled: Settled<T>
      readonly attempt: number
      readonly recorded: boolean
    }
  /** The action ran and succeeded, but its result is not the stored answer. */
  | {
      readonly kind: 'UNRECORDED'
      readonly reason: UnrecordedReason
      readonly value: T
      readonly attempt: number
      readonly cause?: unknown
    }

/** Everything that happens inside `execute()` worth a log line or a metric. */
export type ExecutorEvent =
  | {
      readonly type: 'claim'
      readonly result: string
      readonly attempt?: number
      /** True when the answer came from the replay cache (`replayCache`), without a store call. */
      readonly cached?: true
    }
  | { readonly type: 'store-error'; readonly call: StoreCall; readonly error: unknown }
  | { readonly type: 'reconcile'; readonly call: StoreCall; readonly found: string }
  | { readonly type: 'renewed'; readonly leaseUntil: number }
  | { readonly type: 'renew-refused'; readonly result: string; readonly attempt: number }
  | { readonly type: 'renew-failed'; readonly error: unknown }
  | { readonly type: 'recorded'; readonly state: string; readonly attempt: number }
  | {
      /**
       * A request that found the scope in progress waited for it (`inFlight: { waitMs }`):
       * `changed` when the execution ended (it then took the answer from the record read, or
       * claimed again), `deadline` when it was still running after `waitMs`, `full` when the
       * process had `maxWaiters` requests waiting already (both answer IN_PROGRESS).
       */
      readonly type: 'waited'
      readonly result: 'changed' | 'deadline' | 'full'
      readonly waitedMs: number
    }
  | {
      /** One per invocation, once its answer is known (built only when someone listens). */
      readonly type: 'outcome'
      readonly outcome: ExecuteOutcome<unknown>['kind']
      readonly attempt?: number
      /** UNRECORDED's or RECOVERY_REQUIRED's reason. */
      readonly reason?: string
      /** FAILED's classification. */
      readonly classification?: string
      /** From `begin` until the answer was known, in milliseconds. */
      readonly durationMs: number
      /** Time spent waiting for the store's claim, start, inspect, complete and markFailed calls, ms. */
      readonly storeMs: number
      /** A run's action: from its start until `finish` was called, ms. */
      readonly executionMs?: number
      /** Over HTTP: the response status the outcome is answered with, when known. */
      readonly status?: number
    }

export type StoreCall = 'claim' | 'start' | 'complete' | 'markFailed' | 'release' | 'renew' | 'inspect' | 'begin'

/** What names an event's operation and scope, never the key or the principal. */
export interface EventScope {
  /** The operation's name, e.g. `POST /orders`. */
  readonly operation: string
  /** The first 12 hex characters of the scope digest. */
  readonly digest: string
  /** Over HTTP: the request method and the route pattern. */
  readonly method?: string
  readonly route?: string
  /**
   * On the channels: the invocation's number, as in its `idemkit:start` message (only while
   * someone listens there).
   */
  readonly invocation?: number
}

/** An executor event as the plugin's `onEvent` and the `idemkit:event` channel deliver it. */
export type IdempotencyEvent = ExecutorEvent & EventScope

/** The `idemkit:outcome` channel's message. */
export type OutcomeEvent = Extract<ExecutorEvent, { type: 'outcome' }> & EventScope
