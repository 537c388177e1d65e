/**
 * The store calls of a run as values: `claim`, `start`, `complete`, `markFailed` and a
 * transaction's `commit`. Each says how it is sent, how a failed send reads (certainly not
 * applied, maybe applied, or refused), what an answer means, what an inspected record means
 * when the reply may have been lost, and what is left when its budget is spent; each answers its
 * own verdict type. `settle(scope, call, args)` (settle.ts) runs them all. What each call does
 * with each kind of answer is the table of test/executor/store-calls.test.ts.
 */
import { StoreIndeterminateError, StoreUnavailableError } from '../errors.js'
import type { FailureCause } from '../failure-cause.js'
import { type StoreCall, UnrecordedReason } from '../outcomes.js'
import type { Policy } from '../policy.js'
import { ClaimReply, FailureKind, InspectReply, RecordState, TransitionReply } from '../record.js'
import type { ClaimAnswer } from '../rules.js'
import type { ClaimRequest, ClaimResult, IdempotencyStore, InspectResult, TransitionResult } from '../store.js'
import type { StoreTransaction } from '../store-transaction.js'
import {
  Again,
  type CallScope,
  type Failure,
  GIVE_UP,
  type Hold,
  isFault,
  type Refusal,
  type StoreCallSpec,
  sent,
  settleUndecided,
  unavailable,
} from './settle.js'

/** The scope is held. */
export interface Held {
  readonly kind: 'HELD'
  readonly hold: Hold
}
/** A completed record's answer, to be checked and decoded against the run's codec and policy. */
export interface Stored {
  readonly kind: 'STORED'
  readonly response: Buffer
  readonly codec: string
  readonly policy: string
}
export type ClaimVerdict = Held | Stored | Refusal
/** LOST: the claimed record was taken over before it could start; claim again. */
export type StartVerdict = Held | { readonly kind: 'LOST' } | Refusal
export type RecordVerdict =
  | { readonly kind: 'RECORDED' }
  | { readonly kind: 'UNRECORDED'; readonly reason: UnrecordedReason; readonly cause?: unknown }
/**
 * ROLLED_BACK: nothing was committed (mark the hold FAILED_RETRYABLE); ENDED: the transaction
 * was ended by something else, its writes may have committed (mark it ABANDONED).
 */
export type CommitVerdict =
  | RecordVerdict
  | { readonly kind: 'ROLLED_BACK'; readonly cause: unknown }
  | { readonly kind: 'ENDED'; readonly cause: unknown }

export interface CompleteArgs {
  readonly hold: Hold
  readonly encoded: Buffer
}
export interface MarkFailedArgs {
  readonly hold: Hold
  readonly failure: FailureKind
  /** Why, kept with the failed record for operators. */
  readonly cause?: FailureCause
}
export interface CommitArgs extends CompleteArgs {
  readonly transaction: StoreTransaction
}

/** What a claim answer means for the run: held, a stored answer, or a decision. */
export function claimVerdict(result: ClaimResult, key: string, owner: string): ClaimVerdict {
  switch (result.kind) {
    case ClaimReply.ACQUIRED:
    case ClaimReply.TAKEN_OVER:
    case ClaimReply.REPLAYED_ACQUIRE:
      return held(key, owner, result.state, result.attempt, result.rev)
    default:
      return decisionOf(result)
  }
}

/** What a claim answer that holds nothing means (also of a record read without claiming, through `claimAnswer`). */
export function decisionOf(
  result: Exclude<ClaimAnswer, { kind: typeof ClaimReply.REPLAYED_ACQUIRE }>,
): Stored | Refusal {
  switch (result.kind) {
    case ClaimReply.COMPLETED_REPLAY:
      return { kind: 'STORED', response: result.response, codec: result.codec, policy: result.policy }
    case ClaimReply.FINGERPRINT_MISMATCH:
      return { kind: 'FINGERPRINT_MISMATCH' }
    case ClaimReply.RECOVERY_REQUIRED:
      return { kind: 'RECOVERY_REQUIRED', reason: result.reason }
    case ClaimReply.IN_PROGRESS:
      return { kind: 'IN_PROGRESS', retryAfterMs: result.retryAfterMs }
  }
}

function held(key: string, owner: string, state: Hold['state'], attempt: number, rev: number): Held {
  return { kind: 'HELD', hold: { key, owner, state, attempt, rev } }
}

function failedState(kind: FailureKind): RecordState {
  return kind === FailureKind.RETRYABLE ? RecordState.FAILED_RETRYABLE : RecordState.ABANDONED
}

function accepted(
  result: TransitionResult,
): result is Extract<TransitionResult, { kind: typeof TransitionReply.OK | typeof TransitionReply.ALREADY }> {
  return result.kind === TransitionReply.OK || result.kind === TransitionReply.ALREADY
}

const RECORDED: RecordVerdict = Object.freeze({ kind: 'RECORDED' })
const LOST: RecordVerdict = Object.freeze({ kind: 'UNRECORDED', reason: UnrecordedReason.LOST_OWNERSHIP })
const CONFLICT: RecordVerdict = Object.freeze({ kind: 'UNRECORDED', reason: UnrecordedReason.CONFLICT })
const START_LOST = Object.freeze({ kind: 'LOST' as const })

function throwIt(error: unknown): never {
  throw error
}

/** A malformed argument is thrown to the caller; the rest are store faults. */
function faultOf(error: unknown): Failure {
  if (!isFault(error)) return 'refused'
  return error instanceof StoreUnavailableError ? 'unsent' : 'maybe'
}

// The sends, made once: a call sends without a closure of its own.
const sendClaim = (store: IdempotencyStore, request: ClaimRequest) => store.claim(request)
const sendStart = (store: IdempotencyStore, hold: Hold, policy: Policy) => store.start(hold, policy)
const sendComplete = (store: IdempotencyStore, { hold, encoded }: CompleteArgs, policy: Policy) =>
  store.complete(hold, encoded, policy)
const sendMarkFailed = (store: IdempotencyStore, { hold, failure, cause }: MarkFailedArgs, policy: Policy) =>
  store.markFailed(hold, failure, policy, cause)

/**
 * What every call but a commit shares: sent to the store, bounded and traced (`sent`), sent
 * again after a lost reply when the record says so (`once: false`), its failed sends read by
 * `faultOf`.
 */
function storeCall<A, R>(
  name: StoreCall,
  budget: 'decision' | 'record',
  send: (store: IdempotencyStore, args: A, policy: Policy) => Promise<R>,
) {
  return {
    name,
    budget,
    once: false,
    send: (scope: CallScope, args: A) => sent(scope, name, send, args),
    failure: faultOf,
  } as const
}

/** claim: held, a replay or a decision; certainly not sent the first time: 503 at once. */
const claim: StoreCallSpec<ClaimRequest, ClaimResult, ClaimVerdict> = {
  ...storeCall('claim', 'decision', sendClaim),
  answered(scope, request, result) {
    if (scope.events.wants('claim')) {
      scope.events.emit({
        type: 'claim',
        result: result.kind,
        attempt: 'attempt' in result ? result.attempt : undefined,
      })
    }
    scope.replayCache?.note(scope.store, request, result)
    return claimVerdict(result, request.key, request.owner)
  },
  unsent: (scope, request, error, sentBefore) => (sentBefore ? new Again(request) : unavailable(scope, error)),
  refused: (_scope, _request, error) => throwIt(error),
  found(_scope, request, found) {
    // Our own unfinished record: our claim landed, and this invocation has not run its action
    // yet (docs/design.md §3 step 5, §4). Anything else: re-send; the store decides the rest.
    if (found.kind === InspectReply.CLAIMED || found.kind === InspectReply.EXECUTING) {
      if (found.mine) return held(request.key, request.owner, found.kind, found.attempt, found.rev)
    }
    return new Again(request)
  },
  spent(scope, _request, cause, sent) {
    // Undecided: the claim may still land, as an EXECUTING record whose action never runs.
    if (sent) settleUndecided(scope)
    return unavailable(scope, cause)
  },
}

/** start (CLAIMED → EXECUTING): held, or LOST (claim again). */
const start: StoreCallSpec<Hold, TransitionResult, StartVerdict> = {
  ...storeCall('start', 'decision', sendStart),
  answered: (_scope, hold, result) =>
    accepted(result) ? held(hold.key, hold.owner, RecordState.EXECUTING, hold.attempt, result.rev) : START_LOST,
  unsent: (_scope, hold) => new Again(hold),
  refused: (_scope, _hold, error) => throwIt(error),
  found(_scope, hold, found) {
    if (found.kind === InspectReply.ABSENT || !found.mine) return START_LOST
    if (found.kind === InspectReply.EXECUTING) {
      return held(hold.key, hold.owner, RecordState.EXECUTING, found.attempt, found.rev)
    }
    if (found.kind !== InspectReply.CLAIMED) return START_LOST
    return new Again({ ...hold, attempt: found.attempt, rev: found.rev })
  },
  spent(scope, _hold, cause) {
    // The start may still land and leave an EXECUTING record whose action never ran.
    settleUndecided(scope)
    return unavailable(scope, cause)
  },
}

/** What a completion's record says: ours COMPLETED with our bytes, done; other bytes, conflict. */
function completedVerdict(found: InspectResult, encoded: Buffer): RecordVerdict | undefined {
  if (found.kind !== InspectReply.COMPLETED || !found.mine) return undefined
  return found.response.equals(encoded) ? RECORDED : CONFLICT
}

/** complete (EXECUTING → COMPLETED with the response). */
const complete: StoreCallSpec<CompleteArgs, TransitionResult, RecordVerdict> = {
  ...storeCall('complete', 'record', sendComplete),
  answered: (_scope, _args, result) => (accepted(result) ? RECORDED : LOST),
  unsent: (_scope, args) => new Again(args),
  refused: (_scope, _args, cause) => ({ kind: 'UNRECORDED', reason: UnrecordedReason.STORE_UNAVAILABLE, cause }),
  found(_scope, args, found) {
    const verdict = completedVerdict(found, args.encoded)
    if (verdict !== undefined) return verdict
    if (found.kind === InspectReply.EXECUTING && found.mine && found.rev === args.hold.rev) return new Again(args)
    return LOST
  },
  spent: (_scope, _args, cause) => ({ kind: 'UNRECORDED', reason: UnrecordedReason.STORE_UNAVAILABLE, cause }),
}

/** markFailed (EXECUTING → FAILED_RETRYABLE or ABANDONED): whether the record now shows it. */
const markFailed: StoreCallSpec<MarkFailedArgs, TransitionResult, boolean> = {
  ...storeCall('markFailed', 'record', sendMarkFailed),
  answered(scope, { hold, failure }, result) {
    const ok = accepted(result)
    if (ok && scope.events.wants('recorded')) {
      scope.events.emit({ type: 'recorded', state: failedState(failure), attempt: hold.attempt })
    }
    return ok
  },
  unsent: (_scope, args) => new Again(args),
  refused: () => false,
  found(_scope, args, found) {
    if (found.kind === InspectReply.ABSENT || !found.mine) return false
    if (found.kind === failedState(args.failure)) return true
    return found.kind === InspectReply.EXECUTING && found.rev === args.hold.rev ? new Again(args) : false
  },
  spent: () => false,
}

/**
 * commit: the completion written in the run's transaction, then committed. Never re-sent: a
 * commit whose reply was lost is judged by the record alone (ours COMPLETED: the answer; ours
 * still EXECUTING: undecided, the commit may still land and the lease decides).
 */
const commit: StoreCallSpec<CommitArgs, TransitionResult, CommitVerdict> = {
  name: 'complete',
  budget: 'record',
  once: true,
  // Bounded by the transaction's own timeouts (set from the lease when it was opened), as the
  // action's writes are.
  send: (scope, { transaction, hold, encoded }) => transaction.commit(hold, encoded, scope.policy),
  failure(error) {
    if (error instanceof StoreIndeterminateError) return 'maybe'
    return error instanceof StoreUnavailableError ? 'unsent' : 'refused'
  },
  answered: (_scope, _args, result) => (result.kind === TransitionReply.OK ? RECORDED : LOST),
  // Nothing was committed: the transaction rolled back.
  unsent: (_scope, _args, cause) => ({ kind: 'ROLLED_BACK', cause }),
  // The action ended the transaction itself: its writes may have committed.
  refused: (_scope, _args, cause) => ({ kind: 'ENDED', cause }),
  found(_scope, args, found) {
    const verdict = completedVerdict(found, args.encoded)
    if (verdict !== undefined) return verdict
    if (found.kind === InspectReply.EXECUTING && found.mine && found.attempt === args.hold.attempt) return GIVE_UP
    return LOST
  },
  spent: (_scope, _args, cause) => ({ kind: 'UNRECORDED', reason: UnrecordedReason.STORE_UNAVAILABLE, cause }),
}

/** The calls a run makes of its store, by name. */
export const calls = { claim, start, complete, markFailed, commit } as const
