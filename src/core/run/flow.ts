/**
 * One invocation of an operation (docs/design.md §4): begin → decide → claim → finish. The
 * decision reads the records under older secrets, claims (and starts, when asked to separately),
 * and may wait for an execution in progress to end; within the claim deadline, or its answer is
 * 503 and whatever the claim still wins is given back. A won scope is a `Run`: the action's
 * frozen context (fencing token, signal, db), its lease kept alive by the heartbeat, and
 * `finish(settled)`, which records the action's outcome and never rejects.
 */
import { newOwnerToken } from '../attempt.js'
import { outcomeChannel } from '../channels.js'
import { canRead } from '../codec.js'
import { bounded } from '../deadline.js'
import { StoreUnavailableError } from '../errors.js'
import { type FailureCause, LayerCause } from '../failure-cause.js'
import { waitForExecution } from '../in-flight.js'
import { ClaimReply, ExpiredExecution, FailureKind, InspectReply, RecordState, RecoveryReason } from '../record.js'
import { type AnsweredRecord, ClaimStep, claimAnswer, claimStep } from '../rules.js'
import type { ClaimRequest, InspectResult } from '../store.js'
import { isTransactional } from '../store-transaction.js'
import { calls, decisionOf, type Held, type Stored } from './calls.js'
import { ClaimDeadline } from './claim-deadline.js'
import { RunEvents } from './events.js'
import { Heartbeat } from './heartbeat.js'
import type { Invocation, RunSettings, Won } from './invocation.js'
import { Run } from './run.js'
import { inspect, type Refusal, settle, settleUndecided, unavailable } from './settle.js'
import { inTransaction, openTransaction } from './transaction.js'
import type { Decided, KeyedBeginInput } from './types.js'

/** Where the decision before the action ended. */
type Reached = Won | Stored | Refusal

/**
 * Decides, or wins the scope: a `Decided` outcome (the action must not run) or a `Run`.
 * @throws only for programmer errors (a malformed argument to the store).
 */
export function decide<T, C>(
  settings: RunSettings<T, C>,
  input: KeyedBeginInput,
  context: C,
): Promise<Decided<T> | Run<T, C>> {
  const { config } = settings
  const { policy, store } = config
  const request: ClaimRequest = {
    key: input.key,
    owner: newOwnerToken(),
    fingerprint: input.fingerprint,
    legacyFingerprints: input.legacyFingerprints,
    operation: config.operation,
    codec: config.codec.id,
    policy: policy.revision,
    leaseMs: policy.leaseMs,
    replayWindowMs: policy.replayWindowMs,
    failureRetentionMs: policy.failureRetentionMs,
    start: config.startSeparately !== true,
    // In a transaction an expired execution's writes certainly did not commit (they commit
    // only with the completion): taking it over cannot run an effect twice. `resume` takes over
    // an ABANDONED record as well.
    expiredExecution:
      inTransaction(config.transaction) && policy.expiredExecution === ExpiredExecution.RECOVER
        ? ExpiredExecution.TAKEOVER
        : policy.expiredExecution,
    // A duplicate that will wait has its IN_PROGRESS claim mark the record, so the end of the
    // execution notifies it (docs/waiting.md).
    wait: (config.inFlightWaitMs ?? 0) > 0,
  }
  const timed = settings.emitsOutcome || outcomeChannel.hasSubscribers
  const invocation: Invocation<T, C> = {
    settings,
    store,
    policy,
    request,
    limits: settings,
    codec: config.codec,
    classify: settings.classify,
    events: new RunEvents(settings.targets, input.key, context, timed, settings.emitsClaim, settings.emitsRecorded),
    legacyKeys: input.legacyKeys,
    deadline: undefined,
    claimSentAt: 0,
    replayCache: settings.replayCache,
  }
  const decided = withinDeadline(invocation)
  if (!timed) return decided
  return decided.then((begun) => {
    if (begun.kind !== 'RUN') invocation.events.outcome(begun)
    return begun
  })
}

/** The decision, raced against the claim deadline when there is one. */
function withinDeadline<T, C>(invocation: Invocation<T, C>): Promise<Decided<T> | Run<T, C>> {
  const { deadlines, config, unavailableRetryAfterMs } = invocation.settings
  const timeoutMs = config.claimTimeoutMs
  if (deadlines === undefined || timeoutMs === undefined) {
    return reach(invocation).then((reached) => answer(invocation, reached))
  }
  return new Promise((resolve, reject) => {
    const deadline = new ClaimDeadline(deadlines, timeoutMs, () => {
      const cause = new StoreUnavailableError(
        `The store did not decide the claim within claimTimeoutMs (${timeoutMs} ms); nothing ran.`,
      )
      resolve(unavailable(invocation, cause, Math.max(unavailableRetryAfterMs, timeoutMs)))
    })
    invocation.deadline = deadline
    reach(invocation).then(
      (reached) => {
        // The deadline answered first: a hold won now is given back; nothing runs.
        if (deadline.expired) return giveBack(invocation, reached, LayerCause.DEADLINE)
        deadline.stop()
        resolve(answer(invocation, reached))
      },
      (error: unknown) => {
        deadline.stop()
        reject(error)
      },
    )
  })
}

/** The look-ups under older secrets, then the claim (and a separate start), then the wait, if any. */
function reach<T, C>(invocation: Invocation<T, C>): Promise<Reached> {
  // Most routes have neither: the claim's own promise, with no step around it.
  if (invocation.legacyKeys === undefined && !((invocation.settings.config.inFlightWaitMs ?? 0) > 0)) {
    return claimAndStart(invocation)
  }
  return lookUpClaimAndWait(invocation)
}

async function lookUpClaimAndWait<T, C>(invocation: Invocation<T, C>): Promise<Reached> {
  const { legacyKeys } = invocation
  if (legacyKeys !== undefined) {
    for (const key of legacyKeys) {
      const found = await lookUp(invocation, key)
      if (found === RESUME_HERE) {
        // Resumed under the version the record is under: its re-run derives the same keys.
        invocation.request = { ...invocation.request, key }
        break
      }
      if (found !== undefined) return found
    }
  }
  const reached = await claimAndStart(invocation)
  const waitMs = invocation.settings.config.inFlightWaitMs ?? 0
  if (waitMs <= 0 || reached.kind !== 'IN_PROGRESS') return reached
  return waitAndClaim(invocation, reached.retryAfterMs, waitMs)
}

/**
 * Waits for the execution in progress to end, then answers from the record it read, or claims
 * again; until `waitMs` is over. The claim deadline bounds each decision, not the waits.
 */
async function waitAndClaim<T, C>(invocation: Invocation<T, C>, leaseLeftMs: number, waitMs: number): Promise<Reached> {
  const { store, request, deadline, settings } = invocation
  const waitStarted = performance.now()
  const until = waitStarted + waitMs
  for (;;) {
    deadline?.stop()
    const askedAt = performance.now()
    const { inFlightMaxWaiters } = settings.config
    const waited = await waitForExecution(
      store,
      request.key,
      until,
      leaseLeftMs,
      inFlightMaxWaiters,
      settings.storeCallTimeoutMs,
    )
    const now = performance.now()
    invocation.events.emit({ type: 'waited', result: waited.woken, waitedMs: Math.round(now - waitStarted) })
    if (waited.woken !== 'changed' || deadline?.expired === true) {
      return { kind: 'IN_PROGRESS', retryAfterMs: Math.max(1, Math.round(leaseLeftMs - (now - askedAt))) }
    }
    // The shared inspect read the record: a completed (or abandoned) one answers this request
    // as a claim would, without a claim of its own.
    const decided = waited.found === undefined ? undefined : fromRecord(invocation, waited.found)
    if (decided !== undefined && decided.kind !== 'IN_PROGRESS') return decided
    deadline?.restart()
    const reached = await claimAndStart(invocation)
    if (reached.kind !== 'IN_PROGRESS' || performance.now() >= until) return reached
    leaseLeftMs = reached.retryAfterMs
  }
}

/** The claim, and a separate start when asked for; with `transaction`, the transaction opened on the hold. */
async function claimAndStart<T, C>(invocation: Invocation<T, C>): Promise<Reached> {
  const cached = invocation.replayCache?.get(invocation.store, invocation.request)
  if (cached !== undefined) {
    // The store's own COMPLETED_REPLAY to this same claim, kept (replay-cache.ts): no store call.
    if (invocation.events.wants('claim')) {
      invocation.events.emit({ type: 'claim', result: cached.kind, cached: true })
    }
    return decisionOf(cached)
  }
  // The earliest the lease the claim wins can have begun: before its first send.
  invocation.claimSentAt = performance.now()
  // A second pass only when a CLAIMED record was taken over before it could start.
  for (let pass = 0; pass < 2; pass++) {
    const claimed = await settle(invocation, calls.claim, invocation.request)
    if (claimed.kind !== 'HELD') return claimed
    if (claimed.hold.state === RecordState.EXECUTING) return withTransaction(invocation, claimed)
    const started = await settle(invocation, calls.start, claimed.hold)
    if (started.kind !== 'LOST') return started
  }
  return unavailable(invocation, new StoreUnavailableError('The claim was taken over twice before it could start.'))
}

/** With `transaction`: the run's transaction, opened once the scope is held; else the hold as it is. */
function withTransaction<T, C>(invocation: Invocation<T, C>, held: Held): Reached | Promise<Reached> {
  const { store } = invocation
  const { transaction } = invocation.settings.config
  if (!inTransaction(transaction) || !isTransactional(store)) return held
  return openTransaction(invocation, store, held, transaction === true ? undefined : transaction)
}

/** `lookUp`: the record under an older secret is one a resumed claim takes over where it is. */
const RESUME_HERE = 'RESUME_HERE'

/**
 * A record under an older secret version, judged by the claim steps without writing: an
 * answer when it decides the request, `undefined` when the claim may go ahead, `RESUME_HERE`
 * when a resumed claim takes an execution that ended without its answer (ABANDONED, or
 * EXECUTING with its lease run out) over: under that key, so the re-run's `keyFor` derives
 * the keys the first execution sent.
 */
async function lookUp<T, C>(
  invocation: Invocation<T, C>,
  key: string,
): Promise<Stored | Refusal | typeof RESUME_HERE | undefined> {
  let found: InspectResult
  try {
    found = await inspect(invocation, key)
  } catch (error) {
    invocation.events.emit({ type: 'store-error', call: 'inspect', error })
    return unavailable(invocation, error)
  }
  invocation.events.emit({ type: 'reconcile', call: 'inspect', found: `legacy ${found.kind}` })
  if (
    invocation.request.expiredExecution === ExpiredExecution.RESUME &&
    (found.kind === InspectReply.ABANDONED ||
      (found.kind === InspectReply.EXECUTING && found.leaseRemainingMs === 0)) &&
    claimStep({ state: found.kind, fp: found.fingerprint }, false, false, invocation.request) === ClaimStep.TAKE_OVER
  ) {
    return RESUME_HERE
  }
  return fromRecord(invocation, found)
}

/**
 * What a claim would answer on the record `found` without writing (claim steps 1-8, read
 * only): a decision, or `undefined` when the claim would acquire or take over (and must be sent).
 */
function fromRecord<T, C>(invocation: Invocation<T, C>, found: InspectResult): Stored | Refusal | undefined {
  if (found.kind === InspectReply.ABSENT) return undefined
  const left = found.kind === InspectReply.CLAIMED || found.kind === InspectReply.EXECUTING ? found.leaseRemainingMs : 0
  const step = claimStep({ state: found.kind, fp: found.fingerprint }, left > 0, found.mine, invocation.request)
  const answered = claimAnswer(step, answeredRecord(found), left)
  if (answered === undefined) return undefined
  // Read only, a record of ours still running is in progress as any other.
  if (answered.kind === ClaimReply.REPLAYED_ACQUIRE) return { kind: 'IN_PROGRESS', retryAfterMs: Math.max(1, left) }
  return decisionOf(answered)
}

/** What `claimAnswer` reads of an inspected record. */
function answeredRecord(found: Exclude<InspectResult, { kind: typeof InspectReply.ABSENT }>): AnsweredRecord {
  const completed = found.kind === InspectReply.COMPLETED ? found : undefined
  return {
    state: found.kind,
    attempt: found.attempt,
    rev: found.rev,
    leaseUntil: 'leaseUntil' in found ? found.leaseUntil : 0,
    response: completed?.response,
    codec: completed?.codec ?? '',
    policy: completed?.policy ?? '',
    replayUntil: completed?.replayUntil ?? 0,
  }
}

/** What the begin answers for where the decision ended. */
function answer<T, C>(
  invocation: Invocation<T, C>,
  reached: Reached,
): Decided<T> | Run<T, C> | Promise<Decided<T> | Run<T, C>> {
  switch (reached.kind) {
    case 'HELD': {
      // The lease runs at least a lease from the claim's send; past that, it is confirmed first.
      const { store, policy, settings, events } = invocation
      const heartbeat = new Heartbeat(store, policy, settings, events, reached.hold, invocation.claimSentAt)
      if (heartbeat.live(performance.now())) return new Run(invocation, reached, heartbeat)
      return confirmLateHold(invocation, reached, heartbeat)
    }
    case 'STORED':
      return replay(invocation, reached)
    case 'IN_PROGRESS':
      return { kind: 'IN_PROGRESS', retryAfterMs: invocation.settings.retryAfter(reached.retryAfterMs) }
    default:
      return reached
  }
}

/** A stored answer, checked against this deployment's codec and policy (docs/design.md §7 defect 6). */
function replay<T, C>(invocation: Invocation<T, C>, stored: Stored): Decided<T> {
  const { codec, policy } = invocation.settings.config
  if (!canRead(codec, stored.codec)) return { kind: 'RECOVERY_REQUIRED', reason: RecoveryReason.CODEC_MISMATCH }
  if (stored.policy !== policy.revision) return { kind: 'RECOVERY_REQUIRED', reason: RecoveryReason.POLICY_MISMATCH }
  try {
    return { kind: 'REPLAYED', value: codec.decode(stored.response, stored.codec) }
  } catch (error) {
    invocation.events.emit({ type: 'store-error', call: 'claim', error })
    return { kind: 'RECOVERY_REQUIRED', reason: RecoveryReason.CODEC_MISMATCH }
  }
}

/**
 * A hold whose claim was answered only after its lease could have run out (the reply read more
 * than a lease after the claim was sent: an event loop stalled meanwhile, a slow network).
 * Another invocation may have taken the scope over and answered it already, so the action
 * starts only once a renewal, fenced on the owner and the attempt, confirms the scope is still
 * this one's. A renewal refused (taken over, or gone): nothing ran, 503, and the retry meets
 * the record as it is. A renewal that fails or is answered late again: the hold is given back
 * (cause `late-claim`), nothing ran, 503 (docs/design.md §4).
 */
async function confirmLateHold<T, C>(
  invocation: Invocation<T, C>,
  won: Won,
  heartbeat: Heartbeat,
): Promise<Run<T, C> | Refusal> {
  const lateMs = Math.round(performance.now() - invocation.claimSentAt)
  const late = `The claim was answered ${lateMs} ms after it was sent, past its lease (${invocation.policy.leaseMs} ms)`
  const renewal = await heartbeat.renewNow()
  switch (renewal.kind) {
    case 'confirmed':
      return new Run(invocation, won, heartbeat)
    case 'refused':
      void won.transaction?.rollback()
      return unavailable(
        invocation,
        new StoreUnavailableError(
          `${late}, and its renewal was refused (${renewal.result}): the scope was taken over meanwhile, so nothing ran. Retry with the same key.`,
        ),
      )
    default: {
      giveBack(invocation, won, LayerCause.LATE_CLAIM)
      const how = renewal.kind === 'failed' ? 'and its renewal failed' : 'and so was its renewal'
      return unavailable(invocation, new StoreUnavailableError(`${late}, ${how}: nothing ran.`))
    }
  }
}

/** Gives back a hold won too late to run: nothing ran, so FAILED_RETRYABLE, or released if CLAIMED. */
function giveBack<T, C>(invocation: Invocation<T, C>, reached: Reached, why: FailureCause): void {
  if (reached.kind !== 'HELD') return
  void reached.transaction?.rollback()
  const { store, policy, events, settings } = invocation
  const { hold } = reached
  const executing = hold.state === RecordState.EXECUTING
  const sent = executing
    ? bounded('markFailed', settings.storeCallTimeoutMs, store.markFailed(hold, FailureKind.RETRYABLE, policy, why))
    : bounded('release', settings.storeCallTimeoutMs, store.release(hold))
  sent.then(
    () => events.emit({ type: 'reconcile', call: 'claim', found: `given back ${hold.state}: ${why.class}` }),
    (error: unknown) => {
      events.emit({ type: 'store-error', call: executing ? 'markFailed' : 'release', error })
      settleUndecided(invocation)
    },
  )
}
