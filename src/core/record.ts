/**
 * Record states and store replies. The literal strings are shared with the Lua scripts in
 * `src/stores/redis/scripts`, and a test checks that every literal a script can return is a
 * member of one of these objects (docs/design.md §3).
 */

/** The state of one scope's record. */
export const RecordState = {
  CLAIMED: 'CLAIMED',
  EXECUTING: 'EXECUTING',
  COMPLETED: 'COMPLETED',
  FAILED_RETRYABLE: 'FAILED_RETRYABLE',
  ABANDONED: 'ABANDONED',
} as const
export type RecordState = (typeof RecordState)[keyof typeof RecordState]

/** What a claim answered (docs/design.md §3, claim steps 1-8). */
export const ClaimReply = {
  ACQUIRED: 'ACQUIRED',
  FINGERPRINT_MISMATCH: 'FINGERPRINT_MISMATCH',
  COMPLETED_REPLAY: 'COMPLETED_REPLAY',
  RECOVERY_REQUIRED: 'RECOVERY_REQUIRED',
  REPLAYED_ACQUIRE: 'REPLAYED_ACQUIRE',
  TAKEN_OVER: 'TAKEN_OVER',
  IN_PROGRESS: 'IN_PROGRESS',
} as const
export type ClaimReply = (typeof ClaimReply)[keyof typeof ClaimReply]

/**
 * Why recovery is required: the first two are what a store's claim or inspection finds (docs/design.md §3
 * steps 4 and 7), the other two are the executor's own checks on a stored answer (docs/design.md §4).
 */
export const RecoveryReason = {
  /** The record is ABANDONED: an earlier attempt's effect is unknown. */
  ABANDONED: 'ABANDONED',
  /** An EXECUTING record's lease ran out: the effect may have happened. */
  EXPIRED_EXECUTION: 'EXPIRED_EXECUTION',
  /** The stored record was written by a codec this deployment cannot read. */
  CODEC_MISMATCH: 'CODEC_MISMATCH',
  /** The stored record was written under another policy revision. */
  POLICY_MISMATCH: 'POLICY_MISMATCH',
} as const
export type RecoveryReason = (typeof RecoveryReason)[keyof typeof RecoveryReason]
/** The reasons a store answers with (claim steps 4 and 7). */
export type StoreRecoveryReason = typeof RecoveryReason.ABANDONED | typeof RecoveryReason.EXPIRED_EXECUTION

/** What a compare-and-set transition (start, complete, markFailed, release) or renew answered. */
export const TransitionReply = {
  /** The transition was applied now. */
  OK: 'OK',
  /** A re-sent transition whose effect was already there: same owner, target state, rev one past the sender's. */
  ALREADY: 'ALREADY',
  /** No record under the key. */
  NOT_FOUND: 'NOT_FOUND',
  /** The record belongs to another owner or another attempt (taken over). */
  NOT_OWNER: 'NOT_OWNER',
  /** The owner matches but the state or the revision is not the expected one. */
  WRONG_STATE: 'WRONG_STATE',
} as const
export type TransitionReply = (typeof TransitionReply)[keyof typeof TransitionReply]

/** What a read-only inspection found: absent, or the record's state, classified like a claim would. */
export const InspectReply = { ABSENT: 'ABSENT', ...RecordState } as const
export type InspectReply = (typeof InspectReply)[keyof typeof InspectReply]

/** Failure classification passed to markFailed. */
export const FailureKind = {
  /** The action did not take effect: a later claim may take over (FAILED_RETRYABLE). */
  RETRYABLE: 'retryable',
  /** The effect is unknown: automatic retries stop (ABANDONED). */
  UNKNOWN: 'unknown',
} as const
export type FailureKind = (typeof FailureKind)[keyof typeof FailureKind]

/**
 * What a claim does with an EXECUTING record whose lease ran out (docs/design.md §3 step 7), and,
 * for `resume`, with an ABANDONED one (step 4): `recover` answers recovery-required, `takeover`
 * takes the expired execution over, `resume` takes over both (a route whose external effects go
 * through derived keys and whose local writes go through its transaction: a re-run is safe).
 */
export const ExpiredExecution = {
  RECOVER: 'recover',
  TAKEOVER: 'takeover',
  RESUME: 'resume',
} as const
export type ExpiredExecution = (typeof ExpiredExecution)[keyof typeof ExpiredExecution]
