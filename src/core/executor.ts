/**
 * The executor (SPEC §4): claim-with-start in one round trip, run the action at most once per
 * invocation, renew the lease while it runs, record the outcome, and reconcile every
 * indeterminate store call by inspecting with the same owner token.
 */

import { newOwnerToken } from './attempt.js'
import { type Codec, canRead } from './codec.js'
import { StoreUnavailableError } from './errors.js'
import { LeaseRenewer, LeaseSignal } from './lease-renewer.js'
import {
  Classification,
  type ExecuteOutcome,
  type ExecutorEvent,
  type Settled,
  type StoreCall,
  UnrecordedReason,
} from './outcomes.js'
import type { Policy } from './policy.js'
import { ClaimReply, FailureKind, InspectReply, RecordState, RecoveryReason, TransitionReply } from './record.js'
import type { ClaimRequest, ClaimResult, IdempotencyStore, OwnerRef, TransitionResult } from './store.js'
import { settleUndecidedClaim } from './undecided-claims.js'

/** What the action sees of its invocation. */
export interface ActionContext {
  /**
   * The record's attempt number: grows by one on every takeover of the scope, so a side-effect
   * sink that rejects a token lower than the last it accepted fences off a stale owner.
   */
  readonly fencingToken: number
  /** Fires when a lease renewal is refused: another invocation has taken the scope over. */
  readonly signal: AbortSignal
}

export interface ExecuteRequest<T> {
  readonly store: IdempotencyStore
  /** The scope's store key (see `storeKey()`). */
  readonly key: string
  /** The operation's name, stored in the record. */
  readonly operation: string
  readonly fingerprint: string
  /** The request's fingerprints under older algorithm versions, also accepted as a match. */
  readonly legacyFingerprints?: readonly string[]
  /**
   * Keys of the same scope under older secret versions, newest first. While a secret rotation
   * is in progress they are inspected (read-only) before the claim, so a retry across the
   * rotation replays, or waits, instead of running again (SPEC §5).
   */
  readonly legacyKeys?: readonly string[]
  readonly codec: Codec<T>
  readonly policy: Policy
  /** Runs at most once per `execute()` call. */
  readonly action: (context: ActionContext) => T | Promise<T>
  /**
   * Decides how a settled action is recorded.
   * @default success → complete; an error with `retryable === true` → retryable; else unknown.
   */
  readonly classify?: (settled: Settled<T>) => Classification
  /** Called for every executor event (logs, metrics). Must not throw. */
  readonly onEvent?: (event: ExecutorEvent) => void
  /**
   * Claim first, then start in a second call, instead of claim-with-start in one round trip.
   * @default false
   */
  readonly startSeparately?: boolean
  /**
   * How many times one store call is re-sent or reconciled after an indeterminate reply before
   * the executor gives up.
   * @default 2
   */
  readonly reconcileRounds?: number
  /**
   * Retry-After for STORE_UNAVAILABLE, in milliseconds.
   * @default 1000
   */
  readonly unavailableRetryAfterMs?: number
  /**
   * The longest the decision before the action may take (the inspections under older secrets,
   * the claim with its re-sends and inspections, and a separate start), in milliseconds. Past
   * it the answer is STORE_UNAVAILABLE (Retry-After at least this long) and the action does not
   * run; a claim still under way is settled in the background (a hold it wins is released).
   * `undefined`: no deadline beyond the store calls' own timeouts.
   */
  readonly claimTimeoutMs?: number
  /**
   * After the action ran, how long a completion (or failure mark) the store did not confirm
   * keeps being re-sent, in milliseconds, with growing pauses (50 ms doubling to 1 s). The
   * action's answer is worth waiting for: a store that comes back within this time still
   * records it. At least `reconcileRounds + 1` attempts are made whatever this says.
   * @default 5000
   */
  readonly recordRetryMs?: number
}

/** The default classification: SPEC §4. */
export function defaultClassify(settled: Settled<unknown>): Classification {
  if (settled.ok) return Classification.COMPLETE
  const error = settled.error as { retryable?: unknown } | null
  return typeof error === 'object' && error !== null && error.retryable === true
    ? Classification.RETRYABLE
    : Classification.UNKNOWN
}

const CLASSIFICATIONS: ReadonlySet<string> = new Set(Object.values(Classification))

/** What the claim deadline resolves to when it passes first. */
const TIMED_OUT = Symbol('timed out')

type Held = OwnerRef & { readonly state: RecordState }

/** Executes `request.action` under the idempotency of `request.key`. */
export async function execute<T>(request: ExecuteRequest<T>): Promise<ExecuteOutcome<T>> {
  return new Execution(request).run()
}

class Execution<T> {
  private readonly owner = newOwnerToken()
  private readonly rounds: number
  private readonly recordRetryMs: number
  private actionStarted = false

  constructor(private readonly request: ExecuteRequest<T>) {
    this.rounds = request.reconcileRounds ?? 2
    this.recordRetryMs = request.recordRetryMs ?? 5_000
  }

  async run(): Promise<ExecuteOutcome<T>> {
    const timeoutMs = this.request.claimTimeoutMs
    if (timeoutMs === undefined) {
      const decided = await this.decide()
      return 'outcome' in decided ? decided.outcome : this.runAction(decided.held)
    }
    const decision = this.decide()
    let timer: NodeJS.Timeout | undefined
    const deadline = new Promise<typeof TIMED_OUT>((resolve) => {
      timer = setTimeout(resolve, timeoutMs, TIMED_OUT)
    })
    const decided = await Promise.race([decision, deadline])
    clearTimeout(timer)
    if (decided !== TIMED_OUT) return 'outcome' in decided ? decided.outcome : this.runAction(decided.held)
    // Too late to run: a hold won after this answer is given back, so the scope is not held
    // for a run that never comes.
    this.timedOut = true
    decision.then(
      (late) => {
        if ('held' in late) this.giveBack(late.held)
      },
      () => {},
    )
    return this.unavailable(
      new StoreUnavailableError(
        `The store did not decide the claim within claimTimeoutMs (${timeoutMs} ms); nothing ran.`,
      ),
      Math.max(this.request.unavailableRetryAfterMs ?? 1000, timeoutMs),
    )
  }

  /** Set once the claim deadline passed: no more re-sends, and no action. */
  private timedOut = false

  /** Gives back a hold won after the deadline: nothing ran, so FAILED_RETRYABLE, or released if CLAIMED. */
  private giveBack(held: Held): void {
    const { store, policy } = this.request
    const call =
      held.state === RecordState.EXECUTING ? store.markFailed(held, FailureKind.RETRYABLE, policy) : store.release(held)
    call.then(
      () => this.emit({ type: 'reconcile', call: 'claim', found: `given back ${held.state} after the deadline` }),
      (error: unknown) => {
        this.emit({ type: 'store-error', call: held.state === RecordState.EXECUTING ? 'markFailed' : 'release', error })
        this.settleUndecided()
      },
    )
  }

  /** The legacy inspections, then the claim (and a separate start): a hold to run, or an answer. */
  private async decide(): Promise<{ held: Held } | { outcome: ExecuteOutcome<T> }> {
    for (const key of this.request.legacyKeys ?? []) {
      const found = await this.inspectLegacy(key)
      if (found !== undefined) return { outcome: found }
    }
    // A second pass only when a CLAIMED record was taken over before it could start.
    for (let pass = 0; pass < 2; pass++) {
      const claimed = await this.claim()
      if ('outcome' in claimed || claimed.held.state === RecordState.EXECUTING) return claimed
      const started = await this.start(claimed.held)
      if (started === 'lost') continue
      return started
    }
    return {
      outcome: this.unavailable(new StoreUnavailableError('The claim was taken over twice before it could start.')),
    }
  }

  /**
   * Classifies a record under an older secret version like claim would, without writing:
   * an answer when it decides the request, `undefined` when the claim may go ahead.
   */
  private async inspectLegacy(key: string): Promise<ExecuteOutcome<T> | undefined> {
    let found: Awaited<ReturnType<IdempotencyStore['inspect']>>
    try {
      found = await this.request.store.inspect(key, this.owner)
    } catch (error) {
      this.emit({ type: 'store-error', call: 'inspect', error })
      return this.unavailable(error)
    }
    this.emit({ type: 'reconcile', call: 'inspect', found: `legacy ${found.kind}` })
    if (found.kind === InspectReply.ABSENT) return undefined
    const { fingerprint, legacyFingerprints = [], policy } = this.request
    if (found.fingerprint !== fingerprint && !legacyFingerprints.includes(found.fingerprint)) {
      return { kind: 'FINGERPRINT_MISMATCH' }
    }
    switch (found.kind) {
      case InspectReply.COMPLETED:
        return this.replay(found.response, found.codec, found.policy)
      case InspectReply.ABANDONED:
        return { kind: 'RECOVERY_REQUIRED', reason: RecoveryReason.ABANDONED }
      case InspectReply.FAILED_RETRYABLE:
        return undefined
      case InspectReply.CLAIMED:
      case InspectReply.EXECUTING:
        if (found.leaseRemainingMs > 0) return { kind: 'IN_PROGRESS', retryAfterMs: found.leaseRemainingMs }
        if (found.kind === InspectReply.CLAIMED || policy.expiredExecution === 'takeover') return undefined
        return { kind: 'RECOVERY_REQUIRED', reason: RecoveryReason.EXPIRED_EXECUTION }
    }
  }

  private claimRequest(): ClaimRequest {
    const { key, operation, fingerprint, legacyFingerprints, codec, policy } = this.request
    return {
      key,
      owner: this.owner,
      fingerprint,
      legacyFingerprints,
      operation,
      codec: codec.id,
      policy: policy.revision,
      leaseMs: policy.leaseMs,
      replayWindowMs: policy.replayWindowMs,
      failureRetentionMs: policy.failureRetentionMs,
      start: this.request.startSeparately !== true,
      expiredExecution: policy.expiredExecution,
    }
  }

  /** Claims, and after an indeterminate claim inspects with the same owner and resumes. */
  private async claim(): Promise<{ held: Held } | { outcome: ExecuteOutcome<T> }> {
    const claim = this.claimRequest()
    let lastError: unknown
    for (let round = 0; round <= this.rounds; round++) {
      if (round > 0) await backoff(round)
      if (this.timedOut) {
        // Past the deadline nothing more is sent; a claim sent before it may still land.
        if (lastError !== undefined) break
        return { outcome: this.unavailable(new StoreUnavailableError('The claim deadline passed before it was sent.')) }
      }
      let result: ClaimResult
      try {
        result = await this.request.store.claim(claim)
      } catch (error) {
        this.emit({ type: 'store-error', call: 'claim', error })
        // Only "nothing was sent" is certain, and only before anything else was sent.
        if (error instanceof StoreUnavailableError && lastError === undefined) {
          return { outcome: this.unavailable(error) }
        }
        lastError = error
        if (error instanceof StoreUnavailableError) continue
        // The claim may have landed. Inspect with the same token: our own record means our claim
        // landed, and this invocation has not run its action yet (SPEC §3 step 5, §4).
        const found = await this.inspectMine('claim')
        if (found !== undefined && found !== 'failed') return { held: found }
        continue // not ours, or no answer: re-send the same claim; the store decides the rest
      }
      this.emit({ type: 'claim', result: result.kind, attempt: 'attempt' in result ? result.attempt : undefined })
      return this.onClaim(result)
    }
    this.settleUndecided()
    return { outcome: this.unavailable(lastError) }
  }

  /**
   * After giving up on an undecided claim, the claim may still land: an EXECUTING record whose
   * action never ran would otherwise answer recovery-required once its lease ran out. The
   * store's queue of undecided claims keeps asking until it knows (see undecided-claims.ts).
   */
  private settleUndecided(): void {
    const { store, key, policy } = this.request
    settleUndecidedClaim(store, { key, owner: this.owner, times: policy, emit: (event) => this.emit(event) })
  }

  private onClaim(result: ClaimResult): { held: Held } | { outcome: ExecuteOutcome<T> } {
    switch (result.kind) {
      case ClaimReply.ACQUIRED:
      case ClaimReply.TAKEN_OVER:
      case ClaimReply.REPLAYED_ACQUIRE:
        return {
          held: {
            key: this.request.key,
            owner: this.owner,
            attempt: result.attempt,
            rev: result.rev,
            state: result.state,
          },
        }
      case ClaimReply.COMPLETED_REPLAY:
        return { outcome: this.replay(result.response, result.codec, result.policy) }
      case ClaimReply.FINGERPRINT_MISMATCH:
        return { outcome: { kind: 'FINGERPRINT_MISMATCH' } }
      case ClaimReply.RECOVERY_REQUIRED:
        return { outcome: { kind: 'RECOVERY_REQUIRED', reason: result.reason } }
      case ClaimReply.IN_PROGRESS:
        return { outcome: { kind: 'IN_PROGRESS', retryAfterMs: result.retryAfterMs } }
    }
  }

  /**
   * Inspects with this invocation's token. Returns the held record when it is ours and still
   * unfinished, `undefined` when it is not ours, or `'failed'` when the store did not answer.
   */
  private async inspectMine(call: StoreCall): Promise<Held | undefined | 'failed'> {
    try {
      const found = await this.request.store.inspect(this.request.key, this.owner)
      this.emit({ type: 'reconcile', call, found: found.kind })
      if (found.kind === InspectReply.ABSENT || !found.mine) return undefined
      if (found.kind === InspectReply.CLAIMED || found.kind === InspectReply.EXECUTING) {
        return { key: this.request.key, owner: this.owner, attempt: found.attempt, rev: found.rev, state: found.kind }
      }
      return undefined
    } catch (error) {
      this.emit({ type: 'store-error', call: 'inspect', error })
      return 'failed'
    }
  }

  /**
   * CLAIMED → EXECUTING, reconciling an indeterminate reply. The action has not run yet, so a
   * record lost to another invocation (`'lost'`) is simply claimed again.
   */
  private async start(held: Held): Promise<{ held: Held } | { outcome: ExecuteOutcome<T> } | 'lost'> {
    const { store, policy } = this.request
    let lastError: unknown
    for (let round = 0; round <= this.rounds; round++) {
      if (round > 0) await backoff(round)
      try {
        const result = await store.start(held, policy)
        if (result.kind === TransitionReply.OK || result.kind === TransitionReply.ALREADY) {
          return { held: { ...held, rev: result.rev, state: RecordState.EXECUTING } }
        }
        return 'lost'
      } catch (error) {
        this.emit({ type: 'store-error', call: 'start', error })
        lastError = error
        if (error instanceof StoreUnavailableError) continue
        const found = await this.inspectMine('start')
        if (found === 'failed') continue
        if (found === undefined) return 'lost'
        if (found.state === RecordState.EXECUTING) return { held: found }
        held = found
      }
      if (this.timedOut) break
    }
    // The start may still land and leave an EXECUTING record whose action never ran.
    this.settleUndecided()
    return { outcome: this.unavailable(lastError) }
  }

  private async runAction(held: Held): Promise<ExecuteOutcome<T>> {
    if (this.actionStarted) throw new Error('An invocation runs its action at most once.')
    this.actionStarted = true
    const { store, policy } = this.request
    const lease = new LeaseSignal()
    const renewer = new LeaseRenewer({
      store,
      ref: held,
      times: policy,
      lease,
      onEvent: (event) => this.emit(event),
    })
    renewer.start()
    let settled: Settled<T>
    try {
      const context: ActionContext = {
        fencingToken: held.attempt,
        get signal() {
          return lease.signal
        },
      }
      settled = { ok: true, value: await this.request.action(context) }
    } catch (error) {
      settled = { ok: false, error }
    } finally {
      const renewing = renewer.stop()
      if (renewing !== undefined) await renewing
    }
    return this.record(held, settled)
  }

  private classify(settled: Settled<T>): Classification {
    try {
      const classification = (this.request.classify ?? defaultClassify)(settled)
      if (CLASSIFICATIONS.has(classification)) return classification
    } catch {
      // A classifier that throws cannot vouch for "no effect".
    }
    return Classification.UNKNOWN
  }

  private async record(held: Held, settled: Settled<T>): Promise<ExecuteOutcome<T>> {
    let classification = this.classify(settled)
    let encoded: string | undefined
    if (settled.ok && classification === Classification.COMPLETE) {
      try {
        encoded = this.request.codec.encode(settled.value)
      } catch (error) {
        settled = { ok: false, error }
        classification = Classification.UNKNOWN
      }
    }
    if (encoded !== undefined && settled.ok) {
      return this.complete(held, settled.value, encoded)
    }
    const failure = classification === Classification.RETRYABLE ? Classification.RETRYABLE : Classification.UNKNOWN
    const recorded = await this.markFailed(held, failure)
    return { kind: 'FAILED', classification: failure, settled, attempt: held.attempt, recorded }
  }

  private async complete(held: Held, value: T, encoded: string): Promise<ExecuteOutcome<T>> {
    const { store, policy } = this.request
    const unrecorded = (reason: UnrecordedReason, cause?: unknown): ExecuteOutcome<T> => ({
      kind: 'UNRECORDED',
      reason,
      value,
      attempt: held.attempt,
      cause,
    })
    let lastError: unknown
    const started = performance.now()
    for (let round = 0; this.mayRetryRecord(round, started); round++) {
      if (round > 0) await recordBackoff(round)
      let result: TransitionResult
      try {
        result = await store.complete(held, encoded, policy)
      } catch (error) {
        this.emit({ type: 'store-error', call: 'complete', error })
        lastError = error
        if (error instanceof StoreUnavailableError) continue
        const found = await this.inspectAfterTransition('complete')
        if (found === 'failed') continue
        if (found.kind === InspectReply.COMPLETED && found.mine) {
          return found.response === encoded ? this.executed(value, held.attempt) : unrecorded(UnrecordedReason.CONFLICT)
        }
        if (found.kind === InspectReply.EXECUTING && found.mine && found.rev === held.rev) continue
        return unrecorded(UnrecordedReason.LOST_OWNERSHIP)
      }
      if (result.kind === TransitionReply.OK || result.kind === TransitionReply.ALREADY) {
        return this.executed(value, held.attempt)
      }
      return unrecorded(UnrecordedReason.LOST_OWNERSHIP)
    }
    return unrecorded(UnrecordedReason.STORE_UNAVAILABLE, lastError)
  }

  /** Recording goes on for `reconcileRounds + 1` attempts, and then while `recordRetryMs` lasts. */
  private mayRetryRecord(round: number, started: number): boolean {
    return round <= this.rounds || performance.now() - started < this.recordRetryMs
  }

  private executed(value: T, attempt: number): ExecuteOutcome<T> {
    this.emit({ type: 'recorded', state: RecordState.COMPLETED, attempt })
    return { kind: 'EXECUTED', value, attempt }
  }

  /** Records a failure; reconciles an indeterminate reply (SPEC §7 defect 7). */
  private async markFailed(held: Held, failure: Classification): Promise<boolean> {
    const { store, policy } = this.request
    const kind = failure === Classification.RETRYABLE ? FailureKind.RETRYABLE : FailureKind.UNKNOWN
    const target = kind === FailureKind.RETRYABLE ? InspectReply.FAILED_RETRYABLE : InspectReply.ABANDONED
    const started = performance.now()
    for (let round = 0; this.mayRetryRecord(round, started); round++) {
      if (round > 0) await recordBackoff(round)
      try {
        const result = await store.markFailed(held, kind, policy)
        const ok = result.kind === TransitionReply.OK || result.kind === TransitionReply.ALREADY
        if (ok) this.emit({ type: 'recorded', state: target, attempt: held.attempt })
        return ok
      } catch (error) {
        this.emit({ type: 'store-error', call: 'markFailed', error })
        if (error instanceof StoreUnavailableError) continue
        const found = await this.inspectAfterTransition('markFailed')
        if (found === 'failed') continue
        if (found.kind === target && found.mine) return true
        if (found.kind === InspectReply.EXECUTING && found.mine && found.rev === held.rev) continue
        return false
      }
    }
    return false
  }

  private async inspectAfterTransition(call: StoreCall) {
    try {
      const found = await this.request.store.inspect(this.request.key, this.owner)
      this.emit({ type: 'reconcile', call, found: found.kind })
      return found
    } catch (error) {
      this.emit({ type: 'store-error', call: 'inspect', error })
      return 'failed' as const
    }
  }

  private replay(response: string, codecId: string, policyRevision: string): ExecuteOutcome<T> {
    const { codec, policy } = this.request
    if (!canRead(codec, codecId)) return { kind: 'RECOVERY_REQUIRED', reason: RecoveryReason.CODEC_MISMATCH }
    if (policyRevision !== policy.revision) return { kind: 'RECOVERY_REQUIRED', reason: RecoveryReason.POLICY_MISMATCH }
    try {
      return { kind: 'REPLAYED', value: codec.decode(response) }
    } catch (error) {
      this.emit({ type: 'store-error', call: 'claim', error })
      return { kind: 'RECOVERY_REQUIRED', reason: RecoveryReason.CODEC_MISMATCH }
    }
  }

  private unavailable(cause: unknown, retryAfterMs = this.request.unavailableRetryAfterMs ?? 1000): ExecuteOutcome<T> {
    return {
      kind: 'STORE_UNAVAILABLE',
      retryAfterMs,
      cause: cause ?? new StoreUnavailableError('The store did not decide the claim.'),
    }
  }

  private emit(event: ExecutorEvent): void {
    try {
      this.request.onEvent?.(event)
    } catch {
      // Observers never change the outcome.
    }
  }
}

/** A short pause before re-sending a call the store did not confirm: 50 ms, 100 ms, ... */
function backoff(round: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 50 * round))
}

/** The pause before re-sending a completion: 50 ms, doubling, at most 1 s. */
function recordBackoff(round: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.min(1_000, 50 * 2 ** (round - 1))))
}
