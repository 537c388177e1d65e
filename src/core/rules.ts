/**
 * The record rules of docs/design.md §3 as pure functions, and the one map of every copy of the
 * claim rule: where a claim is decided, per store, each copy naming the others in its header.
 *
 * | copy | decides | for |
 * | --- | --- | --- |
 * | here: `claimStep`, `claimAnswer` (with `liveRecord`, `leaseLeftMs`) | steps 1-8, on the caller's one clock reading | the memory store; the executor, for a record read under an older secret or after a wait |
 * | here: `foundAnswer`, `runningAnswer` | steps 2, 3 and 8 from the record `SET ... NX GET` handed back, with no clock but a bound of Redis's | the Redis store's claim without a script (`src/stores/redis/fast-claim.ts` reads the record and the bound, docs/design.md §6) |
 * | `src/stores/redis/scripts/claim.lua`, with `lib/live.lua` and `lib/record.lua` | steps 1-8, on Redis's clock | the Redis store, every claim the fast path leaves |
 * | the PL/pgSQL claim, `<table>_claim_v4` in `src/stores/postgres/sql/functions/2-operations.sql` | steps 1-8, on `clock_timestamp()` | the PostgreSQL store, and through `_claim_v2` and `_claim_v3`, which call it, instances of earlier schema versions |
 *
 * The transitions' rule likewise: `ownerCheck` and `transitionCheck` here, `lib/transition.lua`,
 * and the PL/pgSQL check, `<table>_check_v2` in `sql/functions/1-rules.sql`. Names match across languages (`liveRecord` and
 * `live_record`, `claimStep` and the steps of claim.lua). test/unit/rules-table.test.ts holds
 * these rules as tables, the claim without a script's answers beside `claimStep`'s on the same
 * records; the store contract (src/testing/store-contract.ts) runs every store. No clock is read
 * here: the caller passes the one reading (`now`) that decides the whole call.
 */
import { ClaimReply, ExpiredExecution, RecordState, RecoveryReason, TransitionReply } from './record.js'
import type { ClaimResult, OwnerRef } from './store.js'

/** The fields the rules read of a stored record (times are the store clock's epoch ms). */
export interface RuleRecord {
  readonly state: RecordState
  readonly owner: string
  readonly attempt: number
  readonly rev: number
  readonly fp: string
  readonly leaseUntil: number
  /** COMPLETED only: the end of the replay window; 0 otherwise. */
  readonly replayUntil: number
  /** From this instant the record reads as absent, whatever its state. */
  readonly expiresAt: number
}

/**
 * The record if it is live at `now`, else `undefined` (absent): a record is absent once
 * `expiresAt <= now` (any state: past the replay window, the failure retention, or lease plus
 * retention), and a COMPLETED one once `replayUntil <= now` (claim step 3 replays only while
 * `now < replayUntil`). Claim, inspect, every transition and renew share it, with one clock
 * reading (docs/design.md §7 defect 5: inspect must not ignore the replay window that claim respects).
 */
export function liveRecord<R extends RuleRecord>(record: R | undefined, now: number): R | undefined {
  if (record === undefined || record.expiresAt <= now) return undefined
  if (record.state === RecordState.COMPLETED && record.replayUntil <= now) return undefined
  return record
}

/** Milliseconds left on a live record's lease at `now`: at least 1 while it runs, 0 once it ran out (`leaseUntil <= now`). */
export function leaseLeftMs(record: RuleRecord, now: number): number {
  return record.leaseUntil > now ? record.leaseUntil - now : 0
}

/** What claim steps 1-8 decide (docs/design.md §3), one name per step. */
export const ClaimStep = {
  /** Step 1: absent or expired: a new record, attempt 1. */
  ACQUIRE: 'ACQUIRE',
  /** Step 2: another request under the same scope; nothing is changed. */
  FINGERPRINT_MISMATCH: 'FINGERPRINT_MISMATCH',
  /** Step 3: the stored answer. */
  COMPLETED_REPLAY: 'COMPLETED_REPLAY',
  /** Step 4: ABANDONED (taken over instead, step 6, when the claim resumes). */
  ABANDONED: 'ABANDONED',
  /** Step 5: the caller's own earlier claim landed (its reply was lost); nothing is changed. */
  REPLAYED_ACQUIRE: 'REPLAYED_ACQUIRE',
  /** Steps 6-7: a new owner, attempt + 1. */
  TAKE_OVER: 'TAKE_OVER',
  /** Step 7 with `recover`: the effect may have happened. */
  EXPIRED_EXECUTION: 'EXPIRED_EXECUTION',
  /** Step 8: a live lease. */
  IN_PROGRESS: 'IN_PROGRESS',
} as const
export type ClaimStep = (typeof ClaimStep)[keyof typeof ClaimStep]

/** What a claim brings that the steps compare. */
export interface ClaimCompare {
  readonly fingerprint: string
  /** Fingerprints of the same request under older fingerprint versions: they match too. */
  readonly legacyFingerprints?: readonly string[]
  readonly expiredExecution: ExpiredExecution
}

/** Claim step 2's comparison: the claim's fingerprint, or one of its legacy ones, is the record's. */
function fingerprintMatches(fp: string, claim: ClaimCompare): boolean {
  return fp === claim.fingerprint || (claim.legacyFingerprints?.includes(fp) ?? false)
}

/**
 * Claim steps 1-8 in order, for a record that is live (`liveRecord`) or absent.
 * @param record the live record's state and fingerprint, or undefined when absent.
 * @param leaseLive true while its lease has time left (`leaseLeftMs > 0`).
 * @param mine true when its owner is the claiming invocation's token.
 */
export function claimStep(
  record: { readonly state: RecordState; readonly fp: string } | undefined,
  leaseLive: boolean,
  mine: boolean,
  claim: ClaimCompare,
): ClaimStep {
  if (record === undefined) return ClaimStep.ACQUIRE
  // Step 2: before any mutation, in every state, even for the record's own owner.
  if (!fingerprintMatches(record.fp, claim)) return ClaimStep.FINGERPRINT_MISMATCH
  const state = record.state
  if (state === RecordState.COMPLETED) return ClaimStep.COMPLETED_REPLAY
  const resume = claim.expiredExecution === ExpiredExecution.RESUME
  if (state === RecordState.ABANDONED) return resume ? ClaimStep.TAKE_OVER : ClaimStep.ABANDONED
  // Step 5 only for a record the caller can still hold: its own FAILED_RETRYABLE record goes
  // on to step 6 like anyone else's.
  if (mine && (state === RecordState.CLAIMED || state === RecordState.EXECUTING)) return ClaimStep.REPLAYED_ACQUIRE
  if (
    state === RecordState.FAILED_RETRYABLE ||
    (state === RecordState.CLAIMED && !leaseLive) ||
    (state === RecordState.EXECUTING && !leaseLive && (resume || claim.expiredExecution === ExpiredExecution.TAKEOVER))
  ) {
    return ClaimStep.TAKE_OVER
  }
  if (state === RecordState.EXECUTING && !leaseLive) return ClaimStep.EXPIRED_EXECUTION
  return ClaimStep.IN_PROGRESS
}

/** What a claim's answer shows of the live record it read (`claimAnswer`). */
export interface AnsweredRecord {
  readonly state: RecordState
  readonly attempt: number
  readonly rev: number
  readonly leaseUntil: number
  /** COMPLETED only: the stored answer, its codec, policy and the end of its replay window. */
  readonly response: Buffer | undefined
  readonly codec: string
  readonly policy: string
  readonly replayUntil: number
}

/** A claim's answer that writes nothing: every one but ACQUIRED and TAKEN_OVER. */
export type ClaimAnswer = Exclude<ClaimResult, { kind: typeof ClaimReply.ACQUIRED | typeof ClaimReply.TAKEN_OVER }>

const EMPTY = Buffer.alloc(0)

/**
 * The answer of a claim step that writes nothing (steps 2-5, 7 and 8), from the live record it
 * read; `undefined` for ACQUIRE and TAKE_OVER, which write a new hold (the caller writes it and
 * answers ACQUIRED or TAKEN_OVER). The memory store answers its claims with it, the executor a
 * record it read without claiming (under an older secret, or after a wait).
 * @param leaseLeftMs the lease left on the record (`leaseLeftMs`), the IN_PROGRESS answer.
 */
export function claimAnswer(
  step: ClaimStep,
  record: AnsweredRecord | undefined,
  leaseLeftMs: number,
): ClaimAnswer | undefined {
  // ACQUIRE is the step of an absent record.
  if (record === undefined) return undefined
  switch (step) {
    case ClaimStep.ACQUIRE:
    case ClaimStep.TAKE_OVER:
      return undefined
    case ClaimStep.FINGERPRINT_MISMATCH:
      return { kind: ClaimReply.FINGERPRINT_MISMATCH }
    case ClaimStep.COMPLETED_REPLAY: {
      const { response, codec, policy, replayUntil } = record
      // A copy: what a caller does with its answer never changes the record.
      return { kind: ClaimReply.COMPLETED_REPLAY, response: Buffer.from(response ?? EMPTY), codec, policy, replayUntil }
    }
    case ClaimStep.ABANDONED:
      return { kind: ClaimReply.RECOVERY_REQUIRED, reason: RecoveryReason.ABANDONED }
    case ClaimStep.REPLAYED_ACQUIRE: {
      const { state, attempt, rev, leaseUntil } = record
      const held = state === RecordState.CLAIMED ? RecordState.CLAIMED : RecordState.EXECUTING
      return { kind: ClaimReply.REPLAYED_ACQUIRE, state: held, attempt, rev, leaseUntil }
    }
    case ClaimStep.EXPIRED_EXECUTION:
      // The effect may have happened: never run it again automatically.
      return { kind: ClaimReply.RECOVERY_REQUIRED, reason: RecoveryReason.EXPIRED_EXECUTION }
    case ClaimStep.IN_PROGRESS:
      return { kind: ClaimReply.IN_PROGRESS, retryAfterMs: leaseLeftMs }
  }
}

/** A record that a write-if-absent met instead of writing (`foundAnswer`), as read without the store's clock. */
export interface FoundRecord {
  readonly state: RecordState
  readonly fp: string
  /**
   * The whole record where its bytes alone give its times; undefined where they count from
   * something the caller has not read yet (the key's expiry, for a record the claim without a
   * script wrote), or the record does not decode.
   */
  readonly record: (AnsweredRecord & { readonly expiresAt: number }) | undefined
}

/** What a claim without a script brings: the fingerprints step 2 compares, and whether it will wait. */
export interface FoundClaim extends ClaimCompare {
  /** A claim that will wait marks a running record for its waiters, which only the claim script does. */
  readonly wait?: boolean
}

/** `foundAnswer`: another holder's running record with this fingerprint, maybe step 8 (`runningAnswer`). */
export const RUNNING = 'RUNNING'

/**
 * The claim without a script, first look (docs/design.md §6, "A claim without a script"): what a
 * claim answers from the record a write-if-absent (Redis `SET ... NX GET`) handed back instead
 * of writing, by the steps no clock decides. Such a record is live as found (its key expires
 * with it), so step 1 does not apply and step 2 does: another fingerprint is refused, in every
 * state but COMPLETED. A COMPLETED record's replay window may close before its key: it counts,
 * for step 2 or 3, only when the window ends with the key (`replayUntil === expiresAt`, as a
 * completion writes it), so the key's existence proves it open. `RUNNING`: another holder's may
 * be a live lease (step 8), for a claim that will not wait; `runningAnswer` decides once the
 * lease is bounded. Undefined: only the claim script can tell (a step that writes, one that
 * reads the clock, or a waiting claim's mark).
 */
export function foundAnswer(found: FoundRecord, claim: FoundClaim): ClaimAnswer | typeof RUNNING | undefined {
  const matches = fingerprintMatches(found.fp, claim)
  const state = found.state
  if (state === RecordState.COMPLETED) {
    const record = found.record
    if (record === undefined || record.replayUntil !== record.expiresAt) return undefined
    return claimAnswer(matches ? ClaimStep.COMPLETED_REPLAY : ClaimStep.FINGERPRINT_MISMATCH, record, 0)
  }
  if (!matches) return { kind: ClaimReply.FINGERPRINT_MISMATCH }
  if (claim.wait !== true && (state === RecordState.CLAIMED || state === RecordState.EXECUTING)) return RUNNING
  return undefined
}

/**
 * The claim without a script, second look: step 8 for a record `foundAnswer` called `RUNNING`,
 * read whole, when its lease was certainly live as found: IN_PROGRESS with `leaseLeftMs`, the
 * lease left by an upper bound of the store's clock (undefined when no bound shows it live by
 * the margin the caller keeps). Undefined where `claimStep` with a live lease says anything else
 * (the caller's own record: step 5, the script's).
 */
export function runningAnswer(
  record: AnsweredRecord & { readonly fp: string },
  leaseLeftMs: number | undefined,
  mine: boolean,
  claim: ClaimCompare,
): ClaimAnswer | undefined {
  if (leaseLeftMs === undefined) return undefined
  const step = claimStep(record, true, mine, claim)
  return step === ClaimStep.IN_PROGRESS ? claimAnswer(step, record, leaseLeftMs) : undefined
}

/** A refusal that does not depend on the target state. */
export type OwnerRefusal =
  | { readonly kind: typeof TransitionReply.NOT_FOUND }
  | { readonly kind: typeof TransitionReply.NOT_OWNER }

/** A transition's refusal or short-circuit. */
export type TransitionRefusal =
  | OwnerRefusal
  | { readonly kind: typeof TransitionReply.ALREADY; readonly rev: number }
  | { readonly kind: typeof TransitionReply.WRONG_STATE; readonly state: RecordState }

const NOT_FOUND: OwnerRefusal = Object.freeze({ kind: TransitionReply.NOT_FOUND })
const NOT_OWNER: OwnerRefusal = Object.freeze({ kind: TransitionReply.NOT_OWNER })

/**
 * The holder check shared by the transitions and renew: no live record → NOT_FOUND; another
 * owner token or another attempt (the record was taken over) → NOT_OWNER; else undefined.
 */
export function ownerCheck(
  record: RuleRecord | undefined,
  ref: Pick<OwnerRef, 'owner' | 'attempt'>,
): OwnerRefusal | undefined {
  if (record === undefined) return NOT_FOUND
  if (record.owner !== ref.owner || record.attempt !== ref.attempt) return NOT_OWNER
  return undefined
}

/**
 * Compare-and-set on owner, attempt, state and rev with the ALREADY rule (docs/design.md §3
 * "Transitions"), shared by start, complete, markFailed and release: the owner check; then
 * state `to` at exactly `ref.rev + 1` → ALREADY (a re-sent transition whose reply was lost:
 * that is how a lost reply heals); then state other than `from` or rev other than `ref.rev` →
 * WRONG_STATE. Undefined means: apply it.
 * @param to the state the transition leads to; undefined (release) never answers ALREADY.
 */
export function transitionCheck(
  record: RuleRecord | undefined,
  ref: OwnerRef,
  from: RecordState,
  to: RecordState | undefined,
): TransitionRefusal | undefined {
  const refused = ownerCheck(record, ref)
  if (refused !== undefined || record === undefined) return refused
  if (to !== undefined && record.state === to && record.rev === ref.rev + 1) {
    return { kind: TransitionReply.ALREADY, rev: record.rev }
  }
  if (record.state !== from || record.rev !== ref.rev) return { kind: TransitionReply.WRONG_STATE, state: record.state }
  return undefined
}
