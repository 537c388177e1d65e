/**
 * The executor (docs/design.md §4) in two phases. `begin()` decides without running (a replay, 409, 422,
 * 503, recovery) or wins the scope and returns a `Run`: the action's context, its lease kept
 * alive by the process-wide heartbeat, and `finish(settled)`, which records the action's outcome
 * and never rejects. `execute()` is begin → action → finish; the HTTP adapters call the phases
 * around their own handler.
 *
 * Every store call of an invocation goes through one reconcile step (`#settle`), with the same
 * owner token throughout:
 *
 * | call       | answered                                | certainly not applied       | reply lost: inspect with our token says, then                                               |
 * | ---------- | --------------------------------------- | --------------------------- | ------------------------------------------------------------------------------------------- |
 * | claim      | the claim's result                      | first call: 503 at once; later: re-send | ours CLAIMED/EXECUTING: held (our claim landed, our action has not run); else re-send |
 * | start      | OK/ALREADY: held; refused: claim again  | re-send                     | ours EXECUTING: held; ours CLAIMED: re-send; else claim again                              |
 * | complete   | OK/ALREADY: done; refused: not ours     | re-send                     | ours COMPLETED with our bytes: done; other bytes: conflict; ours EXECUTING at our rev: re-send; else not ours |
 * | markFailed | OK/ALREADY: recorded; refused: not      | re-send                     | ours in the target state: recorded; ours EXECUTING at our rev: re-send; else not recorded  |
 *
 * An inspect that fails as well means re-send. Re-sends pause (50 ms, growing) and stop when
 * the call's budget is spent: `reconcileRounds` re-sends and the claim deadline for claim and
 * start; `recordRetryMs` for complete and markFailed, whose answer is worth waiting for. A claim
 * given up on, or won after the deadline, is settled in the background (undecided-claims.ts).
 */
import { newOwnerToken } from './attempt.js'
import { eventChannel, outcomeChannel, storeChannel } from './channels.js'
import { type Codec, canRead } from './codec.js'
import { bounded, DEFAULT_STORE_CALL_TIMEOUT_MS } from './deadline.js'
import { ErrorCode, IdempotencyError, invalidOption, StoreIndeterminateError, StoreUnavailableError } from './errors.js'
import { waitForExecution } from './in-flight.js'
import { LeaseLostError, LeaseSignal } from './lease.js'
import {
  Classification,
  type EventScope,
  type ExecuteOutcome,
  type ExecutorEvent,
  type Settled,
  type StoreCall,
  UnrecordedReason,
} from './outcomes.js'
import type { Policy } from './policy.js'
import {
  ClaimReply,
  type ExpiredExecution,
  FailureKind,
  InspectReply,
  RecordState,
  RecoveryReason,
  TransitionReply,
} from './record.js'
import { ClaimStep, claimStep } from './rules.js'
import { scheduleEvery, type Ticked } from './schedule.js'
import {
  type ClaimRequest,
  type ClaimResult,
  type IdempotencyStore,
  type InspectResult,
  isTransactional,
  type OwnerRef,
  type RenewResult,
  type StoreTransaction,
  type TransactionalStore,
  type TransactionClient,
  type TransitionResult,
} from './store.js'
import { settleUndecidedClaim } from './undecided-claims.js'

/** What the action sees of its invocation. */
export interface ActionContext {
  /**
   * The record's attempt number: grows by one on every takeover of the scope, so a side-effect
   * sink that rejects a token lower than the last it accepted fences off a stale owner.
   */
  readonly fencingToken: number
  /**
   * Fires when the lease is lost: a renewal was refused (another invocation took the scope
   * over), or none was confirmed for a whole lease.
   */
  readonly signal: AbortSignal
  /**
   * With `transaction: true`: the connection inside the run's transaction. What the action
   * writes through it commits with the record's completion, or not at all.
   */
  readonly db: TransactionClient | undefined
}

/** What an executor knows before any request: one per operation (an HTTP route), made once. */
export interface ExecutorConfig<T, C = undefined> {
  readonly store: IdempotencyStore
  /** The operation's name, stored in the record. */
  readonly operation: string
  readonly codec: Codec<T>
  readonly policy: Policy
  /**
   * Decides how a settled action is recorded.
   * @default success → complete; an error with `retryable === true` → retryable; else unknown.
   */
  readonly classify?: (settled: Settled<T>) => Classification
  /**
   * Called for every executor event (logs, metrics) with the context given to `begin` and the
   * invocation's store key. Must not throw.
   */
  readonly onEvent?: (event: ExecutorEvent, context: C, key: string) => void
  /**
   * The event types `onEvent` receives; the others are not even built. `undefined`: all of them.
   */
  readonly events?: ReadonlySet<ExecutorEvent['type']>
  /**
   * Claim first, then start in a second call, instead of claim-with-start in one round trip.
   * @default false
   */
  readonly startSeparately?: boolean
  /**
   * How many times one claim or start is re-sent or reconciled after an indeterminate reply
   * before the executor gives up.
   * @default 2
   */
  readonly reconcileRounds?: number
  /**
   * Retry-After for STORE_UNAVAILABLE, in milliseconds.
   * @default 1000
   */
  readonly unavailableRetryAfterMs?: number
  /**
   * After the action ran, how long a completion (or failure mark) the store did not confirm
   * keeps being re-sent, in milliseconds, with growing pauses (50 ms doubling to 1 s). The
   * action's answer is worth waiting for: a store that comes back within this time still
   * records it. At least `reconcileRounds + 1` attempts are made whatever this says.
   * @default 5000
   */
  readonly recordRetryMs?: number
  /**
   * The longest the decision before the action may take (the inspections under older secrets,
   * the claim with its re-sends and inspections, and a separate start), in milliseconds. Past
   * it the answer is STORE_UNAVAILABLE (Retry-After at least this long) and the action does not
   * run; a claim still under way is settled in the background (a hold it wins is given back).
   * `undefined`: no deadline beyond the store calls' own timeouts.
   */
  readonly claimTimeoutMs?: number
  /**
   * Runs the action in a transaction of the store's (a `TransactionalStore`: the PostgreSQL
   * store): the action writes through `context.db`, and the completion is written in the same
   * transaction, so both commit or neither does. A failure of any kind rolls back and is
   * recorded as FAILED_RETRYABLE (nothing happened); an expired execution is taken over (its
   * writes certainly did not commit), whatever the policy's `expiredExecution`.
   * @default false
   */
  readonly transaction?: boolean
  /**
   * A claim that finds the scope in progress waits up to this long for that execution to end
   * (a notification from the store, or its poll), then claims again and answers as a retry
   * would: the replay, recovery, or a run of its own if the first one failed retryably. Still
   * running at the deadline: IN_PROGRESS. A waiting invocation holds nothing in the store.
   * 0: IN_PROGRESS at once.
   * @default 0
   */
  readonly inFlightWaitMs?: number
  /**
   * The most invocations of this process that wait at once (all executors together); one that
   * finds them all waiting answers IN_PROGRESS at once.
   * @default 10000
   */
  readonly inFlightMaxWaiters?: number
  /**
   * The Retry-After of IN_PROGRESS, in milliseconds, bounded by the lease left. `undefined`:
   * the operation's recent typical run (the median of its last 16 runs in this process; 1 s
   * before the first), bounded by the lease left.
   */
  readonly inProgressRetryAfterMs?: number
  /**
   * The longest one store call (claim, start, complete, markFailed, renew, release, inspect)
   * may take, whatever the store's client is set to, in milliseconds. A call past it counts as
   * sent with its reply lost and is reconciled like one (inspect, re-send within the call's
   * budget); it is the bound for a client without a command timeout of its own.
   * @default 2000
   */
  readonly storeCallTimeoutMs?: number
  /** Over HTTP: the request method and route pattern, added to every published event. */
  readonly labels?: { readonly method?: string; readonly route?: string }
}

/** What one invocation brings: its scope's key and its request's fingerprint. */
export interface BeginInput {
  /** The scope's store key (see `storeKey()`). */
  readonly key: string
  readonly fingerprint: string
  /** The request's fingerprints under older algorithm versions, also accepted as a match. */
  readonly legacyFingerprints?: readonly string[]
  /**
   * Keys of the same scope under older secret versions, newest first. While a secret rotation
   * is in progress they are inspected (read-only) before the claim, so a retry across the
   * rotation replays, or waits, instead of running again (docs/design.md §5).
   */
  readonly legacyKeys?: readonly string[]
}

/** `execute()`'s request: the executor's settings, one invocation's input and its action. */
export interface ExecuteRequest<T> extends Omit<ExecutorConfig<T>, 'onEvent'>, BeginInput {
  /** Runs at most once per `execute()` call. */
  readonly action: (context: ActionContext) => T | Promise<T>
  /** Called for every executor event (logs, metrics). Must not throw. */
  readonly onEvent?: (event: ExecutorEvent) => void
}

/** What `begin()` answers without running: the action must not run. */
export type Decided<T> = Extract<
  ExecuteOutcome<T>,
  { kind: 'REPLAYED' | 'IN_PROGRESS' | 'FINGERPRINT_MISMATCH' | 'RECOVERY_REQUIRED' | 'STORE_UNAVAILABLE' }
>
/** What `finish()` answers: the outcome of a run. */
export type Finished<T> = Extract<ExecuteOutcome<T>, { kind: 'EXECUTED' | 'FAILED' | 'UNRECORDED' }>

/** The default classification: docs/design.md §4. */
export function defaultClassify(settled: Settled<unknown>): Classification {
  if (settled.ok) return Classification.COMPLETE
  const error = settled.error as { retryable?: unknown } | null
  return typeof error === 'object' && error !== null && error.retryable === true
    ? Classification.RETRYABLE
    : Classification.UNKNOWN
}

const CLASSIFICATIONS: ReadonlySet<string> = new Set(Object.values(Classification))

/** The executor of one operation. `begin()` once per invocation. */
export class Executor<T, C = undefined> {
  readonly config: ExecutorConfig<T, C>
  readonly rounds: number
  readonly recordRetryMs: number
  readonly unavailableRetryAfterMs: number
  readonly storeCallTimeoutMs: number
  readonly classify: (settled: Settled<T>) => Classification
  /** The heartbeat's period: renewals are due every lease/3, checked twice as often. */
  readonly heartbeat: ReturnType<typeof scheduleEvery>
  readonly renewEveryMs: number
  readonly deadlines: ReturnType<typeof scheduleEvery> | undefined
  /** How long the operation's last runs took in this process, ms (a ring of `RUN_SAMPLES`). */
  readonly #runs = new Float64Array(RUN_SAMPLES)
  #runCount = 0
  /** Whether the every-request events are wanted (built only then). */
  readonly emitsClaim: boolean
  readonly emitsRecorded: boolean
  readonly emitsOutcome: boolean

  constructor(config: ExecutorConfig<T, C>) {
    this.config = config
    const wants = (type: ExecutorEvent['type']) =>
      config.onEvent !== undefined && (config.events === undefined || config.events.has(type))
    this.emitsClaim = wants('claim')
    this.emitsRecorded = wants('recorded')
    this.emitsOutcome = wants('outcome')
    this.rounds = config.reconcileRounds ?? 2
    this.recordRetryMs = config.recordRetryMs ?? 5_000
    this.unavailableRetryAfterMs = config.unavailableRetryAfterMs ?? 1_000
    this.storeCallTimeoutMs = config.storeCallTimeoutMs ?? DEFAULT_STORE_CALL_TIMEOUT_MS
    if (!Number.isSafeInteger(this.storeCallTimeoutMs) || this.storeCallTimeoutMs < 1) {
      invalidOption('storeCallTimeoutMs', 'a positive integer number of milliseconds', this.storeCallTimeoutMs)
    }
    this.classify = config.classify ?? defaultClassify
    this.renewEveryMs = Math.max(1, Math.floor(config.policy.leaseMs / 3))
    this.heartbeat = scheduleEvery(this.renewEveryMs / 2)
    // The deadline is checked at a tenth of its length, at most every 100 ms: a decision past
    // it is answered at most that much later.
    const timeout = config.claimTimeoutMs
    this.deadlines = timeout === undefined ? undefined : scheduleEvery(Math.min(100, Math.max(1, timeout / 10)))
    if (config.transaction === true) {
      if (!isTransactional(config.store)) {
        throw new IdempotencyError(
          ErrorCode.INVALID_OPTION,
          `Option "transaction" needs a store that runs transactions (the PostgreSQL store); the ${config.store.name} store does not.`,
        )
      }
      if (config.startSeparately === true) {
        throw new IdempotencyError(
          ErrorCode.INVALID_OPTION,
          'Option "transaction" cannot be combined with "startSeparately".',
        )
      }
    }
  }

  /**
   * Decides, or wins the scope. Resolves to a `Decided` outcome (the action must not run) or a
   * `Run`: run the action once with it as the context, then hand its settled result to
   * `run.finish()`.
   * @param context handed to `onEvent` with every event of this invocation.
   * @throws only for programmer errors (a malformed argument to the store).
   */
  /** Notes how long a run of the operation took (the Retry-After estimate). */
  noteRun(ms: number): void {
    this.#runs[this.#runCount++ % RUN_SAMPLES] = ms
  }

  /**
   * The Retry-After of IN_PROGRESS (docs/design.md §5): the route's own, else the operation's
   * recent typical run (the median of the last runs), never more than the lease left.
   */
  retryAfter(leaseLeftMs: number): number {
    const wanted = this.config.inProgressRetryAfterMs ?? this.#typicalRunMs()
    return Math.max(1, Math.round(Math.min(leaseLeftMs, wanted)))
  }

  #typicalRunMs(): number {
    const count = Math.min(this.#runCount, RUN_SAMPLES)
    if (count === 0) return FIRST_RETRY_AFTER_MS
    const sorted = this.#runs.slice(0, count).sort()
    return sorted[count >> 1] as number
  }

  begin(input: BeginInput, context: C): Promise<Decided<T> | Run<T, C>> {
    return new Run<T, C>(this, input, context).begin()
  }
}

/** Begins one invocation with `request`'s settings (see `Executor.begin`). */
export function begin<T>(request: Omit<ExecuteRequest<T>, 'action'>): Promise<Decided<T> | Run<T, undefined>> {
  const onEvent = request.onEvent
  return new Executor<T>({ ...request, onEvent: onEvent && ((event) => onEvent(event)) }).begin(request, undefined)
}

/** Executes `request.action` under the idempotency of `request.key`: begin → action → finish. */
export async function execute<T>(request: ExecuteRequest<T>): Promise<ExecuteOutcome<T>> {
  const begun = await begin(request)
  if (begun.kind !== 'RUN') return begun
  let settled: Settled<T>
  try {
    settled = { ok: true, value: await request.action(begun) }
  } catch (error) {
    settled = { ok: false, error }
  }
  return begun.finish(settled)
}

/** A held record as a claim or start leaves it. */
type Hold = 'held' | 'lost' | 'undecided' | Decided<unknown>

/** The calls that go through the reconcile step (`#settle`). */
type SettledCall = 'claim' | 'start' | 'complete' | 'markFailed'

/** A judgement of `#found`: the reply is to be sent again. */
const RESEND = Symbol('re-send')

/** How many recent runs the Retry-After estimate of an operation looks at. */
const RUN_SAMPLES = 16
/** The Retry-After of IN_PROGRESS before an operation has run in this process, ms. */
const FIRST_RETRY_AFTER_MS = 1_000

/** A claim answered IN_PROGRESS. */
function inProgress(hold: Hold): hold is Extract<Decided<unknown>, { kind: 'IN_PROGRESS' }> {
  return typeof hold === 'object' && hold.kind === 'IN_PROGRESS'
}

function failedState(kind: FailureKind): RecordState {
  return kind === FailureKind.RETRYABLE ? RecordState.FAILED_RETRYABLE : RecordState.ABANDONED
}

/**
 * One invocation: its owner token and claim, and once it holds the scope, the run: the
 * action's context, the lease, and `finish`. It is its own claim request and owner reference,
 * so a call to the store carries no other object.
 */
export class Run<T, C = undefined> extends LeaseSignal implements ClaimRequest, OwnerRef, ActionContext, Ticked {
  readonly kind = 'RUN'
  readonly key: string
  readonly owner = newOwnerToken()
  readonly fingerprint: string
  readonly legacyFingerprints: readonly string[] | undefined
  readonly operation: string
  readonly codec: string
  readonly policy: string
  readonly leaseMs: number
  readonly replayWindowMs: number
  readonly failureRetentionMs: number
  readonly start: boolean
  readonly expiredExecution: ExpiredExecution
  attempt = 0
  rev = 0
  state: RecordState = RecordState.CLAIMED

  readonly #executor: Executor<T, C>
  readonly #context: C
  readonly #legacyKeys: readonly string[] | undefined
  /** The begin promise's resolvers while a claim deadline runs. */
  #resolveBegin: ((begun: Decided<T> | Run<T, C>) => void) | undefined
  #rejectBegin: ((error: unknown) => void) | undefined
  #deadlineAt = 0
  #timedOut = false
  #finished = false
  // What finish records: the value and its bytes, or the failure kind.
  #value: T | undefined
  #encoded: Buffer | undefined
  #failure: FailureKind = FailureKind.UNKNOWN
  // Timing, only while someone listens for the outcome: begin, the action's start, finish.
  #startedAt: number | undefined
  #ranAt: number | undefined
  /** When the run began (the Retry-After estimate). */
  #heldAt = 0
  #finishingAt = 0
  #storeMs = 0
  /** With `transaction`: the run's transaction, open from the claim until finish. */
  #transaction: StoreTransaction | undefined
  // The lease's renewal, once running.
  #renewDueAt = 0
  #confirmedAt = 0
  #renewing: Promise<void> | undefined

  constructor(executor: Executor<T, C>, input: BeginInput, context: C) {
    super()
    const { config } = executor
    this.#executor = executor
    this.#context = context
    this.#legacyKeys = input.legacyKeys
    this.key = input.key
    this.fingerprint = input.fingerprint
    this.legacyFingerprints = input.legacyFingerprints
    this.operation = config.operation
    this.codec = config.codec.id
    this.policy = config.policy.revision
    this.leaseMs = config.policy.leaseMs
    this.replayWindowMs = config.policy.replayWindowMs
    this.failureRetentionMs = config.policy.failureRetentionMs
    this.start = config.startSeparately !== true
    // In a transaction an expired execution's writes certainly did not commit (they commit
    // only with the completion): taking it over cannot run an effect twice.
    this.expiredExecution = config.transaction === true ? 'takeover' : config.policy.expiredExecution
  }

  /** With `transaction: true`: the connection inside the run's transaction (see `ActionContext.db`). */
  get db(): TransactionClient | undefined {
    return this.#transaction?.db
  }

  /** The record's attempt number: the fencing token. */
  get fencingToken(): number {
    return this.attempt
  }

  begin(): Promise<Decided<T> | Run<T, C>> {
    if (!this.#executor.emitsOutcome && !outcomeChannel.hasSubscribers) return this.#begin()
    this.#startedAt = performance.now()
    return this.#begin().then((begun) => {
      if (begun !== this) this.#outcome(begun as Decided<T>)
      return begun
    })
  }

  #begin(): Promise<Decided<T> | Run<T, C>> {
    const deadlines = this.#executor.deadlines
    if (deadlines === undefined) return this.#decide().then((hold) => this.#began(hold))
    return new Promise((resolve, reject) => {
      this.#resolveBegin = resolve
      this.#rejectBegin = reject
      this.#deadlineAt = performance.now() + (this.#executor.config.claimTimeoutMs as number)
      deadlines.add(this)
      this.#decide().then(
        (hold) => this.#decided(hold),
        (error: unknown) => this.#failed(error),
      )
    })
  }

  /** The deadline's tick: past it, the begin answers 503 and whatever the claim wins is given back. */
  tick(now: number): void {
    if (this.#resolveBegin !== undefined) {
      if (now < this.#deadlineAt) return
      this.#executor.deadlines?.delete(this)
      this.#timedOut = true
      const resolve = this.#resolveBegin
      this.#resolveBegin = undefined
      this.#rejectBegin = undefined
      const timeout = this.#executor.config.claimTimeoutMs as number
      resolve(
        this.#unavailable(
          new StoreUnavailableError(
            `The store did not decide the claim within claimTimeoutMs (${timeout} ms); nothing ran.`,
          ),
          Math.max(this.#executor.unavailableRetryAfterMs, timeout),
        ),
      )
      return
    }
    this.#heartbeat(now)
  }

  #decided(hold: Hold): void {
    const resolve = this.#resolveBegin
    if (resolve === undefined) {
      // The deadline answered first: a hold won now is given back; nothing runs.
      if (hold === 'held') {
        void this.#transaction?.rollback()
        this.#giveBack()
      }
      return
    }
    this.#executor.deadlines?.delete(this)
    this.#resolveBegin = undefined
    this.#rejectBegin = undefined
    resolve(this.#began(hold))
  }

  /** A programmer error (a malformed argument) from the store: the begin rejects with it. */
  #failed(error: unknown): void {
    const reject = this.#rejectBegin
    this.#executor.deadlines?.delete(this)
    this.#resolveBegin = undefined
    this.#rejectBegin = undefined
    reject?.(error)
  }

  #began(hold: Hold): Decided<T> | Run<T, C> {
    if (hold === 'held') {
      this.#run()
      return this
    }
    if (inProgress(hold)) return { kind: 'IN_PROGRESS', retryAfterMs: this.#executor.retryAfter(hold.retryAfterMs) }
    if (typeof hold === 'object') return hold as Decided<T>
    return this.#unavailable(new StoreUnavailableError('The store did not decide the claim.'))
  }

  /** The look-ups under older secrets, then the claim (and a separate start). */
  async #decide(): Promise<Hold> {
    const legacyKeys = this.#legacyKeys
    if (legacyKeys !== undefined) {
      for (const key of legacyKeys) {
        const found = await this.#inspectLegacy(key)
        if (found !== undefined) return found
      }
    }
    let hold = await this.#claimAndStart()
    const waitMs = this.#executor.config.inFlightWaitMs ?? 0
    if (waitMs <= 0 || !inProgress(hold)) return hold
    const waitStarted = performance.now()
    const until = waitStarted + waitMs
    for (;;) {
      // The claim deadline bounds each decision, not the time spent waiting between them.
      this.#deadlineAt = Number.POSITIVE_INFINITY
      const leaseLeftMs = hold.retryAfterMs
      const askedAt = performance.now()
      const { store, inFlightMaxWaiters } = this.#executor.config
      const waited = await waitForExecution(
        store,
        this.key,
        until,
        leaseLeftMs,
        inFlightMaxWaiters,
        this.#executor.storeCallTimeoutMs,
      )
      const now = performance.now()
      this.#emit({ type: 'waited', result: waited.woken, waitedMs: Math.round(now - waitStarted) })
      if (waited.woken !== 'changed' || this.#timedOut) {
        return { kind: 'IN_PROGRESS', retryAfterMs: Math.max(1, Math.round(leaseLeftMs - (now - askedAt))) }
      }
      // The shared inspect read the record: a completed (or abandoned) one answers this request
      // as a claim would, without a claim of its own.
      const decided = waited.found === undefined ? undefined : this.#fromRecord(waited.found)
      if (decided !== undefined && decided.kind !== 'IN_PROGRESS') return decided
      this.#deadlineAt = now + (this.#executor.config.claimTimeoutMs ?? 0)
      hold = await this.#claimAndStart()
      if (!inProgress(hold) || performance.now() >= until) return hold
    }
  }

  /** The claim, and a separate start when asked for. */
  async #claimAndStart(): Promise<Hold> {
    // A second pass only when a CLAIMED record was taken over before it could start.
    for (let pass = 0; pass < 2; pass++) {
      const claimed = await this.#settle<Hold>('claim')
      if (claimed !== 'held' || this.state === RecordState.EXECUTING) {
        return claimed === 'held' ? this.#openTransaction() : claimed
      }
      const started = await this.#settle<Hold>('start')
      if (started !== 'lost') return started
    }
    return this.#unavailable(new StoreUnavailableError('The claim was taken over twice before it could start.'))
  }

  /**
   * With `transaction`: opens the run's transaction once the scope is held. When it cannot be
   * opened nothing ran: the hold is marked FAILED_RETRYABLE and the answer is 503.
   */
  async #openTransaction(): Promise<Hold> {
    if (this.#executor.config.transaction !== true) return 'held'
    try {
      this.#transaction = await (this.#executor.config.store as TransactionalStore).beginTransaction(
        this,
        this.#executor.config.policy,
      )
      return 'held'
    } catch (error) {
      this.#emit({ type: 'store-error', call: 'begin', error })
      this.#failure = FailureKind.RETRYABLE
      await this.#settle<boolean>('markFailed')
      return this.#unavailable(error)
    }
  }

  /**
   * A record under an older secret version, judged by the claim steps without writing: an
   * answer when it decides the request, `undefined` when the claim may go ahead.
   */
  async #inspectLegacy(key: string): Promise<Decided<T> | undefined> {
    let found: InspectResult
    try {
      const { store } = this.#executor.config
      found = await this.#traced('inspect', () => this.#bounded('inspect', store.inspect(key, this.owner)))
    } catch (error) {
      this.#emit({ type: 'store-error', call: 'inspect', error })
      return this.#unavailable(error)
    }
    this.#emit({ type: 'reconcile', call: 'inspect', found: `legacy ${found.kind}` })
    return this.#fromRecord(found)
  }

  /**
   * What a claim would answer on the record `found` without writing (claim steps 1-8, read
   * only): a decision, or `undefined` when the claim would acquire or take over (and must be
   * sent).
   */
  #fromRecord(found: InspectResult): Decided<T> | undefined {
    if (found.kind === InspectReply.ABSENT) return undefined
    const left =
      found.kind === InspectReply.CLAIMED || found.kind === InspectReply.EXECUTING ? found.leaseRemainingMs : 0
    switch (claimStep({ state: found.kind, fp: found.fingerprint }, left > 0, found.mine, this)) {
      case ClaimStep.ACQUIRE:
      case ClaimStep.TAKE_OVER:
        return undefined
      case ClaimStep.FINGERPRINT_MISMATCH:
        return { kind: 'FINGERPRINT_MISMATCH' }
      case ClaimStep.COMPLETED_REPLAY:
        return found.kind === InspectReply.COMPLETED
          ? this.#replay(found.response, found.codec, found.policy)
          : undefined
      case ClaimStep.ABANDONED:
        return { kind: 'RECOVERY_REQUIRED', reason: RecoveryReason.ABANDONED }
      case ClaimStep.EXPIRED_EXECUTION:
        return { kind: 'RECOVERY_REQUIRED', reason: RecoveryReason.EXPIRED_EXECUTION }
      case ClaimStep.REPLAYED_ACQUIRE:
      case ClaimStep.IN_PROGRESS:
        return { kind: 'IN_PROGRESS', retryAfterMs: Math.max(1, left) }
    }
  }

  /**
   * The one reconcile step every store call goes through (the table at the top): send; re-send
   * what was certainly not applied; after a reply that may have been lost, inspect with this
   * invocation's token and let the call judge what the record says; stop when the call's budget
   * is spent. Each call's judgement is in `#answered`, `#found` and `#spent`.
   */
  async #settle<R>(call: SettledCall): Promise<R> {
    const recording = call === 'complete' || call === 'markFailed'
    const started = performance.now()
    let sent = false
    let lastError: unknown
    for (let round = 0; ; round++) {
      if (recording ? !this.#mayRecord(round, started) : round > this.#executor.rounds || this.#timedOut) break
      if (round > 0) await (recording ? recordBackoff(round) : backoff(round))
      if (!recording && this.#timedOut) break
      let reply: unknown
      try {
        reply = await this.#send(call)
      } catch (error) {
        this.#emit({ type: 'store-error', call, error })
        lastError = error
        if (!isFault(error)) {
          if (recording) return this.#spent(call, error, true) as R
          throw error
        }
        if (error instanceof StoreUnavailableError) {
          // "Certainly not applied" answers a claim at once, while nothing may have landed before.
          if (call === 'claim' && !sent) return this.#unavailable(error) as R
          continue
        }
        sent = true
        const found = await this.#inspect(call)
        if (found === undefined) continue
        const verdict = this.#found(call, found)
        if (verdict === RESEND) continue
        return verdict as R
      }
      return this.#answered(call, reply) as R
    }
    return this.#spent(call, lastError, sent) as R
  }

  #send(call: SettledCall): Promise<unknown> {
    if (this.#startedAt === undefined && !storeChannel.hasSubscribers) return this.#call(call)
    return this.#traced(call, () => this.#call(call))
  }

  #call(call: SettledCall): Promise<unknown> {
    return this.#bounded(call, this.#sendCall(call))
  }

  #sendCall(call: SettledCall): Promise<unknown> {
    const { store, policy } = this.#executor.config
    switch (call) {
      case 'claim':
        return store.claim(this)
      case 'start':
        return store.start(this, policy)
      case 'complete':
        return store.complete(this, this.#encoded as Buffer, policy)
      case 'markFailed':
        return store.markFailed(this, this.#failure, policy)
    }
  }

  /** A store call, bounded by `storeCallTimeoutMs` whatever the client is set to. */
  #bounded<R>(call: StoreCall, sent: Promise<R>): Promise<R> {
    return bounded(call, this.#executor.storeCallTimeoutMs, sent)
  }

  /** A store call timed for the outcome event and traced on `idemkit:store`, for whoever listens. */
  #traced<R>(call: StoreCall, send: () => Promise<R>): Promise<R> {
    const started = performance.now()
    const sent = storeChannel.hasSubscribers
      ? storeChannel.tracePromise(send, {
          call,
          store: this.#executor.config.store.name,
          operation: this.operation,
          digest: this.key.slice(-64, -52),
        })
      : send()
    if (this.#startedAt === undefined || call === 'renew') return sent
    const add = () => {
      this.#storeMs += performance.now() - started
    }
    sent.then(add, add)
    return sent
  }

  /** What the store's answer means. */
  #answered(call: SettledCall, reply: unknown): Hold | Finished<T> | boolean {
    switch (call) {
      case 'claim': {
        const result = reply as ClaimResult
        if (this.#executor.emitsClaim || eventChannel.hasSubscribers) {
          this.#emit({ type: 'claim', result: result.kind, attempt: 'attempt' in result ? result.attempt : undefined })
        }
        switch (result.kind) {
          case ClaimReply.ACQUIRED:
          case ClaimReply.TAKEN_OVER:
          case ClaimReply.REPLAYED_ACQUIRE:
            this.#hold(result.state, result.attempt, result.rev)
            return 'held'
          case ClaimReply.COMPLETED_REPLAY:
            return this.#replay(result.response, result.codec, result.policy)
          case ClaimReply.FINGERPRINT_MISMATCH:
            return { kind: 'FINGERPRINT_MISMATCH' }
          case ClaimReply.RECOVERY_REQUIRED:
            return { kind: 'RECOVERY_REQUIRED', reason: result.reason }
          case ClaimReply.IN_PROGRESS:
            return { kind: 'IN_PROGRESS', retryAfterMs: result.retryAfterMs }
        }
        break
      }
      case 'start': {
        const result = reply as TransitionResult
        if (result.kind !== TransitionReply.OK && result.kind !== TransitionReply.ALREADY) return 'lost'
        this.#hold(RecordState.EXECUTING, this.attempt, result.rev)
        return 'held'
      }
      case 'complete': {
        const { kind } = reply as TransitionResult
        if (kind === TransitionReply.OK || kind === TransitionReply.ALREADY) return this.#executed()
        return this.#unrecorded(UnrecordedReason.LOST_OWNERSHIP)
      }
      case 'markFailed': {
        const { kind } = reply as TransitionResult
        const ok = kind === TransitionReply.OK || kind === TransitionReply.ALREADY
        if (ok && (this.#executor.emitsRecorded || eventChannel.hasSubscribers)) {
          this.#emit({ type: 'recorded', state: failedState(this.#failure), attempt: this.attempt })
        }
        return ok
      }
    }
    throw new Error(`unknown call ${call}`)
  }

  /** What the record means when the reply may have been lost: a verdict, or RESEND. */
  #found(call: SettledCall, found: InspectResult): Hold | Finished<T> | boolean | typeof RESEND {
    const mine = found.kind !== InspectReply.ABSENT && found.mine
    switch (call) {
      case 'claim':
        // Our own unfinished record: our claim landed, and this invocation has not run its
        // action yet (docs/design.md §3 step 5, §4). Anything else: re-send; the store decides the rest.
        if (mine && (found.kind === InspectReply.CLAIMED || found.kind === InspectReply.EXECUTING)) {
          this.#hold(found.kind, found.attempt, found.rev)
          return 'held'
        }
        return RESEND
      case 'start':
        if (!mine) return 'lost'
        if (found.kind === InspectReply.EXECUTING) {
          this.#hold(RecordState.EXECUTING, found.attempt, found.rev)
          return 'held'
        }
        if (found.kind !== InspectReply.CLAIMED) return 'lost'
        this.#hold(RecordState.CLAIMED, found.attempt, found.rev)
        return RESEND
      case 'complete':
        if (mine && found.kind === InspectReply.COMPLETED) {
          return found.response.equals(this.#encoded as Buffer)
            ? this.#executed()
            : this.#unrecorded(UnrecordedReason.CONFLICT)
        }
        if (mine && found.kind === InspectReply.EXECUTING && found.rev === this.rev) return RESEND
        return this.#unrecorded(UnrecordedReason.LOST_OWNERSHIP)
      case 'markFailed':
        if (mine && found.kind === failedState(this.#failure)) return true
        if (mine && found.kind === InspectReply.EXECUTING && found.rev === this.rev) return RESEND
        return false
    }
  }

  /** The budget is spent without a decision (or the store refused the arguments, for a recording). */
  #spent(call: SettledCall, cause: unknown, sent: boolean): Hold | Finished<T> | boolean {
    switch (call) {
      case 'claim':
        // Undecided: the claim may still land, as an EXECUTING record whose action never runs.
        if (sent) this.#settleUndecided()
        return this.#unavailable(cause)
      case 'start':
        // The start may still land and leave an EXECUTING record whose action never ran.
        this.#settleUndecided()
        return this.#unavailable(cause)
      case 'complete':
        return this.#unrecorded(UnrecordedReason.STORE_UNAVAILABLE, cause)
      case 'markFailed':
        return false
    }
  }

  #hold(state: RecordState, attempt: number, rev: number): void {
    this.state = state
    this.attempt = attempt
    this.rev = rev
  }

  /** Inspects with this invocation's token; `undefined` when the store did not answer. */
  async #inspect(call: StoreCall): Promise<InspectResult | undefined> {
    try {
      const { store } = this.#executor.config
      const found = await this.#traced('inspect', () => this.#bounded('inspect', store.inspect(this.key, this.owner)))
      this.#emit({ type: 'reconcile', call, found: found.kind })
      return found
    } catch (error) {
      this.#emit({ type: 'store-error', call: 'inspect', error })
      if (!isFault(error)) throw error
      return undefined
    }
  }

  /** The run begins: the lease is renewed by the process-wide heartbeat from now until finish. */
  #run(): void {
    const now = performance.now()
    this.#heldAt = now
    if (this.#startedAt !== undefined) this.#ranAt = now
    this.#confirmedAt = now
    this.#renewDueAt = now + this.#executor.renewEveryMs
    this.#executor.heartbeat.add(this)
  }

  /** A heartbeat tick: renews when due; past a whole lease without a confirmed renewal, the lease is lost. */
  #heartbeat(now: number): void {
    if (this.#renewing !== undefined) return
    // Renewals go on after a lease lost this way: one refused tells the takeover for sure.
    if (!this.aborted && now - this.#confirmedAt >= this.leaseMs) {
      this.abort(new LeaseLostError('No lease renewal was confirmed for a whole lease; the scope may be taken over.'))
    }
    if (now < this.#renewDueAt) return
    this.#renewDueAt = now + this.#executor.renewEveryMs
    this.#renewing = this.#renew(now).finally(() => {
      this.#renewing = undefined
    })
  }

  async #renew(sentAt: number): Promise<void> {
    const { store, policy } = this.#executor.config
    let result: RenewResult
    try {
      result = storeChannel.hasSubscribers
        ? await this.#traced('renew', () => this.#bounded('renew', store.renew(this, policy)))
        : await this.#bounded('renew', store.renew(this, policy))
    } catch (error) {
      this.#emit({ type: 'renew-failed', error })
      return
    }
    if (result.kind === TransitionReply.OK) {
      this.#confirmedAt = sentAt
      this.#emit({ type: 'renewed', leaseUntil: result.leaseUntil })
      return
    }
    this.#emit({ type: 'renew-refused', result: result.kind, attempt: this.attempt })
    this.#executor.heartbeat.delete(this)
    this.abort(
      new LeaseLostError(`The lease renewal was refused (${result.kind}): another invocation holds the scope.`),
    )
  }

  /**
   * Records the action's settled result and answers the run's outcome. Never rejects: a store
   * that cannot record it is an outcome (FAILED not recorded, UNRECORDED), not an error.
   * Once per run: the heartbeat stops, a renewal already sent is waited for, so none lands
   * after the outcome.
   */
  finish(settled: Settled<T>): Promise<Finished<T>> {
    this.#executor.noteRun(performance.now() - this.#heldAt)
    if (this.#startedAt === undefined) return this.#finish(settled)
    this.#finishingAt = performance.now()
    return this.#finish(settled).then((finished) => {
      this.#outcome(finished)
      return finished
    })
  }

  async #finish(settled: Settled<T>): Promise<Finished<T>> {
    if (this.#finished) throw new Error('A run is finished once.')
    this.#finished = true
    this.#executor.heartbeat.delete(this)
    const renewing = this.#renewing
    if (renewing !== undefined) await renewing
    if (this.#transaction !== undefined) return this.#finishTransaction(this.#transaction, settled)
    let classification = this.#classify(settled)
    if (settled.ok && classification === Classification.COMPLETE) {
      const value = settled.value
      let encoded: Buffer | undefined
      try {
        encoded = this.#executor.config.codec.encode(value)
      } catch (error) {
        settled = { ok: false, error }
        classification = Classification.UNKNOWN
      }
      if (encoded !== undefined) {
        this.#value = value
        this.#encoded = encoded
        return this.#settle<Finished<T>>('complete')
      }
    }
    const failure = classification === Classification.RETRYABLE ? Classification.RETRYABLE : Classification.UNKNOWN
    this.#failure = failure === Classification.RETRYABLE ? FailureKind.RETRYABLE : FailureKind.UNKNOWN
    const recorded = await this.#settle<boolean>('markFailed')
    return { kind: 'FAILED', classification: failure, settled, attempt: this.attempt, recorded }
  }

  /**
   * Finish in a transaction: a result is committed with its completion, in the transaction
   * (refused: rolled back, not ours); anything else rolls back, and since nothing of the
   * action's writes is kept, it is recorded as FAILED_RETRYABLE. A commit whose reply was lost
   * is judged by inspecting: ours COMPLETED, the answer; ours EXECUTING, undecided (the commit
   * may still land; the lease decides).
   */
  async #finishTransaction(transaction: StoreTransaction, settled: Settled<T>): Promise<Finished<T>> {
    let encoded: Buffer | undefined
    if (settled.ok && this.#classify(settled) === Classification.COMPLETE) {
      try {
        encoded = this.#executor.config.codec.encode(settled.value)
      } catch (error) {
        // Not storable: its writes must not commit without it.
        this.#value = settled.value
        return this.#rollBack(transaction, error)
      }
      this.#value = settled.value
      this.#encoded = encoded
      let result: TransitionResult
      try {
        result = await transaction.commit(this, encoded, this.#executor.config.policy)
      } catch (error) {
        this.#emit({ type: 'store-error', call: 'complete', error })
        if (error instanceof StoreIndeterminateError) return this.#commitUndecided(error)
        if (error instanceof StoreUnavailableError) return this.#markRolledBack(error)
        // The action ended the transaction itself: its writes may have committed.
        this.#failure = FailureKind.UNKNOWN
        await this.#settle<boolean>('markFailed')
        return this.#unrecorded(UnrecordedReason.STORE_UNAVAILABLE, error)
      }
      if (result.kind === TransitionReply.OK) return this.#executed()
      return this.#unrecorded(UnrecordedReason.LOST_OWNERSHIP)
    }
    await transaction.rollback()
    this.#failure = FailureKind.RETRYABLE
    const recorded = await this.#settle<boolean>('markFailed')
    return { kind: 'FAILED', classification: Classification.RETRYABLE, settled, attempt: this.attempt, recorded }
  }

  /** Rolls back a result that cannot be stored; nothing happened, so a retry may run. */
  async #rollBack(transaction: StoreTransaction, cause: unknown): Promise<Finished<T>> {
    await transaction.rollback()
    return this.#markRolledBack(cause)
  }

  async #markRolledBack(cause: unknown): Promise<Finished<T>> {
    this.#failure = FailureKind.RETRYABLE
    await this.#settle<boolean>('markFailed')
    return this.#unrecorded(UnrecordedReason.ROLLED_BACK, cause)
  }

  /** A commit that may have happened: what the record says, inspected with this run's token. */
  async #commitUndecided(cause: unknown): Promise<Finished<T>> {
    const started = performance.now()
    for (let round = 0; this.#mayRecord(round, started); round++) {
      if (round > 0) await recordBackoff(round)
      const found = await this.#inspect('complete')
      if (found === undefined) continue
      if (found.kind === InspectReply.COMPLETED && found.mine) {
        return found.response.equals(this.#encoded as Buffer)
          ? this.#executed()
          : this.#unrecorded(UnrecordedReason.CONFLICT)
      }
      if (found.kind === InspectReply.EXECUTING && found.mine && found.attempt === this.attempt) break
      return this.#unrecorded(UnrecordedReason.LOST_OWNERSHIP)
    }
    return this.#unrecorded(UnrecordedReason.STORE_UNAVAILABLE, cause)
  }

  #classify(settled: Settled<T>): Classification {
    try {
      const classification = this.#executor.classify(settled)
      if (CLASSIFICATIONS.has(classification)) return classification
    } catch {
      // A classifier that throws cannot vouch for "no effect".
    }
    return Classification.UNKNOWN
  }

  /** Recording goes on for `reconcileRounds + 1` attempts, and then while `recordRetryMs` lasts. */
  #mayRecord(round: number, started: number): boolean {
    return round <= this.#executor.rounds || performance.now() - started < this.#executor.recordRetryMs
  }

  #executed(): Finished<T> {
    if (this.#executor.emitsRecorded || eventChannel.hasSubscribers) {
      this.#emit({ type: 'recorded', state: RecordState.COMPLETED, attempt: this.attempt })
    }
    return { kind: 'EXECUTED', value: this.#value as T, attempt: this.attempt }
  }

  #unrecorded(reason: UnrecordedReason, cause?: unknown): Finished<T> {
    return { kind: 'UNRECORDED', reason, value: this.#value as T, attempt: this.attempt, cause }
  }

  /** A stored answer, checked against this deployment's codec and policy (docs/design.md §7 defect 6). */
  #replay(response: Buffer, codecId: string, policyRevision: string): Decided<T> {
    const { codec, policy } = this.#executor.config
    if (!canRead(codec, codecId)) return { kind: 'RECOVERY_REQUIRED', reason: RecoveryReason.CODEC_MISMATCH }
    if (policyRevision !== policy.revision) return { kind: 'RECOVERY_REQUIRED', reason: RecoveryReason.POLICY_MISMATCH }
    try {
      return { kind: 'REPLAYED', value: codec.decode(response, codecId) }
    } catch (error) {
      this.#emit({ type: 'store-error', call: 'claim', error })
      return { kind: 'RECOVERY_REQUIRED', reason: RecoveryReason.CODEC_MISMATCH }
    }
  }

  /** Gives back a hold won after the deadline: nothing ran, so FAILED_RETRYABLE, or released if CLAIMED. */
  #giveBack(): void {
    const { store, policy } = this.#executor.config
    const executing = this.state === RecordState.EXECUTING
    const call = executing
      ? this.#bounded('markFailed', store.markFailed(this, FailureKind.RETRYABLE, policy))
      : this.#bounded('release', store.release(this))
    call.then(
      () => this.#emit({ type: 'reconcile', call: 'claim', found: `given back ${this.state} after the deadline` }),
      (error: unknown) => {
        this.#emit({ type: 'store-error', call: executing ? 'markFailed' : 'release', error })
        this.#settleUndecided()
      },
    )
  }

  /** Hands a claim that may still land to the store's queue of undecided claims (undecided-claims.ts). */
  #settleUndecided(): void {
    const { store, policy } = this.#executor.config
    settleUndecidedClaim(store, {
      key: this.key,
      owner: this.owner,
      times: policy,
      callTimeoutMs: this.#executor.storeCallTimeoutMs,
      emit: (event) => this.#emit(event),
    })
  }

  #unavailable(cause: unknown, retryAfterMs = this.#executor.unavailableRetryAfterMs): Decided<T> {
    return {
      kind: 'STORE_UNAVAILABLE',
      retryAfterMs,
      cause: cause ?? new StoreUnavailableError('The store did not decide the claim.'),
    }
  }

  /** The outcome event, to `onEvent` and `idemkit:outcome`. */
  #outcome(result: ExecuteOutcome<T>): void {
    const now = performance.now()
    const event: ExecutorEvent = {
      type: 'outcome',
      outcome: result.kind,
      attempt: 'attempt' in result ? result.attempt : undefined,
      reason: 'reason' in result ? result.reason : undefined,
      classification: result.kind === 'FAILED' ? result.classification : undefined,
      durationMs: now - (this.#startedAt as number),
      storeMs: this.#storeMs,
      executionMs: this.#ranAt === undefined ? undefined : this.#finishingAt - this.#ranAt,
    }
    if (outcomeChannel.hasSubscribers) outcomeChannel.publish(this.#scoped(event))
    this.#emit(event)
  }

  /** An event with what names its scope: operation, digest prefix, HTTP labels. Never the key or principal. */
  #scoped(event: ExecutorEvent): ExecutorEvent & EventScope {
    const { operation, labels } = this.#executor.config
    return { ...event, operation, digest: this.key.slice(-64, -52), ...labels }
  }

  #emit(event: ExecutorEvent): void {
    const { onEvent, events } = this.#executor.config
    if (event.type !== 'outcome' && eventChannel.hasSubscribers) eventChannel.publish(this.#scoped(event))
    if (onEvent === undefined || (events !== undefined && !events.has(event.type))) return
    try {
      onEvent(event, this.#context, this.key)
    } catch {
      // Observers never change the outcome.
    }
  }
}

/**
 * A store fault (unavailable, indeterminate, or an answer of the wrong shape) as opposed to a
 * programmer error (a malformed argument), which is thrown to the caller.
 */
function isFault(error: unknown): boolean {
  return !(error instanceof IdempotencyError && error.code === ErrorCode.INVALID_ARGUMENT)
}

/** A short pause before re-sending a call the store did not confirm: 50 ms, 100 ms, ... */
function backoff(round: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 50 * round))
}

/** The pause before re-sending a completion: 50 ms, doubling, at most 1 s. */
function recordBackoff(round: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.min(1_000, 50 * 2 ** (round - 1))))
}
