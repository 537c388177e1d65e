/**
 * The one reconcile step every store call of a run goes through (docs/design.md §4, "Lost
 * replies"), with the same owner token throughout: send; re-send what was certainly not applied;
 * after a reply that may have been lost, inspect with the invocation's token and let the call
 * judge the record; stop when the call's budget is spent. Re-sends pause (50 ms, growing); a
 * claim's and a start's budget is `reconcileRounds` re-sends and the claim deadline, a
 * recording's `recordRetryMs` (its answer is worth waiting for). The calls themselves, each with
 * its reading of every kind of answer, are values (calls.ts).
 */
import { bounded } from '../deadline.js'
import { ErrorCode, IdempotencyError, StoreUnavailableError } from '../errors.js'
import type { StoreCall } from '../outcomes.js'
import type { Policy } from '../policy.js'
import type { RecordState } from '../record.js'
import type { ReplayCache } from '../replay-cache.js'
import type { ClaimRequest, IdempotencyStore, InspectResult, OwnerRef } from '../store.js'
import { settleUndecidedClaim } from '../undecided-claims.js'
import type { Observer } from './events.js'
import type { Decided } from './types.js'

/** What a claim or a start holds: the owner reference of the later calls, and the record's state. */
export interface Hold extends OwnerRef {
  readonly state: typeof RecordState.CLAIMED | typeof RecordState.EXECUTING
}

/** The executor's bounds on the calls of its runs. */
export interface CallLimits {
  /** `reconcileRounds`. */
  readonly rounds: number
  readonly recordRetryMs: number
  readonly storeCallTimeoutMs: number
  readonly unavailableRetryAfterMs: number
}

/** What the calls of one invocation share. */
export interface CallScope {
  readonly store: IdempotencyStore
  readonly policy: Policy
  readonly request: ClaimRequest
  readonly limits: CallLimits
  readonly events: Observer
  /** The claim deadline, when the executor has one: past it a decision's calls stop. */
  readonly deadline: { readonly expired: boolean } | undefined
  /** With `replayCache`: where the claim's answers are noted (a COMPLETED_REPLAY kept, the rest dropped). */
  readonly replayCache?: ReplayCache
}

/** A decision that is not a replay (those are decoded by the run, with its codec). */
export type Refusal = Exclude<Decided<unknown>, { kind: 'REPLAYED' }>

/** Send the call again, with these arguments. */
export class Again<A> {
  readonly args: A
  constructor(args: A) {
    this.args = args
  }
}
/** A judgement of an inspected record: stop, with what the spent budget says. */
export const GIVE_UP = Symbol('give up')

/** How a failed send reads: certainly not applied, maybe applied (inspect), or refused outright. */
export type Failure = 'unsent' | 'maybe' | 'refused'

export interface StoreCallSpec<A, R, V> {
  /** The call's name in events. */
  readonly name: StoreCall
  /** A decision's budget (rounds and the claim deadline) or a recording's (`recordRetryMs`). */
  readonly budget: 'decision' | 'record'
  /** Sent once: after a lost reply only the record is read again (a commit cannot be re-sent). */
  readonly once: boolean
  /** Sends it: bounded by `storeCallTimeoutMs` and traced, except a commit (see `commit`). */
  send(scope: CallScope, args: A): Promise<R>
  failure(error: unknown): Failure
  answered(scope: CallScope, args: A, reply: R): V
  /** Certainly not applied; `sentBefore` when an earlier send may have been. */
  unsent(scope: CallScope, args: A, error: unknown, sentBefore: boolean): V | Again<A>
  /** The store refused the arguments (a programmer error) or the send failed otherwise for good. */
  refused(scope: CallScope, args: A, error: unknown): V
  /** Inspected with the invocation's token after a reply that may have been lost. */
  found(scope: CallScope, args: A, record: InspectResult): V | Again<A> | typeof GIVE_UP
  /** No decision within the budget. */
  spent(scope: CallScope, args: A, cause: unknown, sent: boolean): V
}

/**
 * The one reconcile step every store call goes through: send; re-send what was certainly not
 * applied; inspect after a reply that may have been lost; stop when the call's budget is spent.
 */
export function settle<A, R, V>(scope: CallScope, call: StoreCallSpec<A, R, V>, args: A): Promise<V> {
  const started = performance.now()
  if (!mayRound(scope, call, 0, started)) return settleRounds(scope, call, args, started, undefined)
  // The first send, with no step around it when it is answered (most calls): only a failed one
  // goes on to the rounds below.
  let first: Promise<R>
  try {
    first = call.send(scope, args)
  } catch (error) {
    first = Promise.reject(error)
  }
  return first.then(
    // The answer is read outside the rounds: what it means is the call's, not a store fault.
    (reply) => call.answered(scope, args, reply),
    (error: unknown) => settleRounds(scope, call, args, started, { error }),
  )
}

/** Whether `round` may send: the call's budget, checked before every round. */
function mayRound(
  scope: CallScope,
  call: StoreCallSpec<unknown, unknown, unknown>,
  round: number,
  started: number,
): boolean {
  return call.budget === 'record'
    ? mayRecord(scope.limits, round, started)
    : !(round > scope.limits.rounds || scope.deadline?.expired === true)
}

/**
 * The rounds of `settle`, from round 0; `first` is the failure of round 0's send when it was
 * already made.
 */
async function settleRounds<A, R, V>(
  scope: CallScope,
  call: StoreCallSpec<A, R, V>,
  args: A,
  started: number,
  first: { readonly error: unknown } | undefined,
): Promise<V> {
  const recording = call.budget === 'record'
  let sent = false
  let lastError: unknown
  for (let round = 0; ; round++) {
    const sentAlready = round === 0 && first !== undefined
    if (!sentAlready && !mayRound(scope, call, round, started)) break
    if (round > 0) {
      await (recording ? recordBackoff(round) : backoff(round))
      if (!recording && scope.deadline?.expired === true) break
    }
    let verdict: V | Again<A> | typeof GIVE_UP
    if (sent && call.once) {
      verdict = await judge(scope, call, args)
    } else {
      let reply!: R
      let failed = false
      if (sentAlready) {
        failed = true
        lastError = first.error
      } else {
        try {
          reply = await call.send(scope, args)
        } catch (error) {
          failed = true
          lastError = error
        }
      }
      // The answer is read outside the try: what it means is the call's, not a store fault.
      if (!failed) return call.answered(scope, args, reply)
      scope.events.emit({ type: 'store-error', call: call.name, error: lastError })
      const failure = call.failure(lastError)
      if (failure === 'refused') return call.refused(scope, args, lastError)
      if (failure === 'unsent') {
        verdict = call.unsent(scope, args, lastError, sent)
      } else {
        sent = true
        verdict = await judge(scope, call, args)
      }
    }
    if (verdict === GIVE_UP) break
    if (verdict instanceof Again) {
      args = verdict.args
      continue
    }
    return verdict
  }
  return call.spent(scope, args, lastError, sent)
}

/** The record, inspected with the invocation's token, judged by the call; re-send when the store did not answer. */
async function judge<A, R, V>(
  scope: CallScope,
  call: StoreCallSpec<A, R, V>,
  args: A,
): Promise<V | Again<A> | typeof GIVE_UP> {
  let found: InspectResult
  try {
    found = await inspect(scope, scope.request.key)
  } catch (error) {
    scope.events.emit({ type: 'store-error', call: 'inspect', error })
    if (!isFault(error)) throw error
    return new Again(args)
  }
  scope.events.emit({ type: 'reconcile', call: call.name, found: found.kind })
  return call.found(scope, args, found)
}

/**
 * A store call, `send(store, args, policy)`, bounded by `storeCallTimeoutMs` whatever the client
 * is set to, and traced when anyone listens (no closure is made otherwise).
 */
export function sent<A, R>(
  scope: CallScope,
  call: StoreCall,
  send: (store: IdempotencyStore, args: A, policy: Policy) => Promise<R>,
  args: A,
): Promise<R> {
  const { store, policy, limits, events } = scope
  if (!events.tracing) return bounded(call, limits.storeCallTimeoutMs, send(store, args, policy))
  return events.traced(call, () => bounded(call, limits.storeCallTimeoutMs, send(store, args, policy)))
}

/** An inspect with the invocation's token, bounded and traced like every call. */
export function inspect(scope: CallScope, key: string): Promise<InspectResult> {
  return sent(scope, 'inspect', inspectOf, { key, owner: scope.request.owner })
}

const inspectOf = (store: IdempotencyStore, { key, owner }: { key: string; owner: string }) => store.inspect(key, owner)

/** STORE_UNAVAILABLE before the action: nothing ran. */
export function unavailable(scope: CallScope, cause: unknown, retryAfterMs?: number): Refusal {
  return {
    kind: 'STORE_UNAVAILABLE',
    retryAfterMs: retryAfterMs ?? scope.limits.unavailableRetryAfterMs,
    cause: cause ?? new StoreUnavailableError('The store did not decide the claim.'),
  }
}

/** Hands a claim that may still land to the store's queue of undecided claims (undecided-claims.ts). */
export function settleUndecided(scope: CallScope): void {
  const { store, request, policy, limits, events } = scope
  settleUndecidedClaim(store, {
    key: request.key,
    owner: request.owner,
    times: policy,
    callTimeoutMs: limits.storeCallTimeoutMs,
    emit: (event) => events.emit(event),
  })
}
/**
 * A store fault (unavailable, indeterminate, or an answer of the wrong shape) as opposed to a
 * programmer error (a malformed argument), which is thrown to the caller.
 */
export function isFault(error: unknown): boolean {
  return !(error instanceof IdempotencyError && error.code === ErrorCode.INVALID_ARGUMENT)
}

/** Recording goes on for `reconcileRounds + 1` attempts, and then while `recordRetryMs` lasts. */
function mayRecord(limits: CallLimits, round: number, started: number): boolean {
  return round <= limits.rounds || performance.now() - started < limits.recordRetryMs
}

/** A short pause before re-sending a call the store did not confirm: 50 ms, 100 ms, ... */
function backoff(round: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 50 * round))
}

/** The pause before re-sending a completion: 50 ms, doubling, at most 1 s. */
function recordBackoff(round: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.min(1_000, 50 * 2 ** (round - 1))))
}
