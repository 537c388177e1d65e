/**
 * The executor (docs/design.md §4) in two phases. `begin()` decides without running (a replay, 409, 422,
 * 503, recovery) or wins the scope and returns a `Run`: the action's context, its lease kept
 * alive by the process-wide heartbeat, and `finish(settled)`, which records the action's outcome
 * and never rejects. `execute()` is begin → action → finish; the HTTP adapters call the phases
 * around their own handler. One invocation's flow is in run/flow.ts, its store calls (what each
 * kind of answer leads to) in run/calls.ts.
 */
import { DEFAULT_STORE_CALL_TIMEOUT_MS } from './deadline.js'
import { ErrorCode, IdempotencyError, integerOption } from './errors.js'
import { Classification, type ExecuteOutcome, type ExecutorEvent, type Settled } from './outcomes.js'
import { type ReplayCache, replayCacheOption } from './replay-cache.js'
import { RunDurations } from './run/durations.js'
import { type EventTargets, wanted } from './run/events.js'
import { decide } from './run/flow.js'
import type { RunSettings } from './run/invocation.js'
import type { Run } from './run/run.js'
import { inTransaction } from './run/transaction.js'
import type {
  ActionContext,
  BeginInput,
  Decided,
  ExecutionScope,
  ExecutorConfig,
  KeyedBeginInput,
} from './run/types.js'
import { scheduleEvery } from './schedule.js'
import { parseSecrets, type Secrets, type SecretsInput } from './scope.js'
import { storeFront } from './store-front.js'
import { operationCode, scopeKeys } from './store-key.js'
import { isAppTransactions, isTransactional } from './store-transaction.js'

export type { Run } from './run/run.js'
export type {
  ActionContext,
  BeginInput,
  Decided,
  ExecutionScope,
  ExecutorConfig,
  Finished,
  KeyedBeginInput,
  ScopedBeginInput,
} from './run/types.js'

/** `begin()`'s request: the executor's settings and one invocation's input. */
export type BeginRequest<T> = Omit<ExecutorConfig<T>, 'onEvent'> &
  BeginInput & {
    /** Called for every executor event (logs, metrics). Must not throw. */
    readonly onEvent?: (event: ExecutorEvent) => void
  }

/** `execute()`'s request: the executor's settings, one invocation's input and its action. */
export type ExecuteRequest<T> = BeginRequest<T> & {
  /** Runs at most once per `execute()` call. */
  readonly action: (context: ActionContext) => T | Promise<T>
}

/** The default classification: docs/design.md §4. */
export function defaultClassify(settled: Settled<unknown>): Classification {
  if (settled.ok) return Classification.COMPLETE
  const error = settled.error as { retryable?: unknown } | null
  return typeof error === 'object' && error !== null && error.retryable === true
    ? Classification.RETRYABLE
    : Classification.UNKNOWN
}

/** The executor of one operation. `begin()` once per invocation. */
export class Executor<T, C = undefined> implements RunSettings<T, C> {
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
  /** How long the operation's last runs took in this process (the Retry-After estimate). */
  readonly #durations = new RunDurations()
  /** Whether the every-request events are wanted (built only then). */
  readonly emitsClaim: boolean
  readonly emitsRecorded: boolean
  readonly emitsOutcome: boolean
  /** Where the events of the operation's runs go. */
  readonly targets: EventTargets<C>
  /** The secrets of the scope digests: `keyFor`'s, and a scoped invocation's keys. */
  readonly secrets: Secrets | undefined
  /** Completed answers kept in this process (`replayCache`), when asked for. */
  readonly replayCache: ReplayCache | undefined
  /** The operation's code in a scoped invocation's store keys. */
  readonly #opcode: string

  constructor(config: ExecutorConfig<T, C>) {
    // Every store, built in or not, behind the one front that checks each call's arguments.
    this.config = { ...config, store: storeFront(config.store) }
    this.targets = {
      operation: config.operation,
      store: config.store.name,
      labels: config.labels,
      onEvent: config.onEvent,
      types: config.events,
      statusOf: config.statusOf as EventTargets<C>['statusOf'],
      endpoint: this.config.store.endpoint?.bind(this.config.store),
    }
    this.emitsClaim = wanted(this.targets, 'claim')
    this.emitsRecorded = wanted(this.targets, 'recorded')
    this.emitsOutcome = wanted(this.targets, 'outcome')
    this.secrets = config.secrets === undefined ? undefined : secretsOf(config.secrets)
    this.replayCache = replayCacheOption(config.replayCache)
    this.rounds = config.reconcileRounds ?? 2
    this.recordRetryMs = config.recordRetryMs ?? 5_000
    this.unavailableRetryAfterMs = config.unavailableRetryAfterMs ?? 1_000
    this.storeCallTimeoutMs = integerOption(
      'storeCallTimeoutMs',
      config.storeCallTimeoutMs ?? DEFAULT_STORE_CALL_TIMEOUT_MS,
      1,
      undefined,
      'milliseconds',
    )
    this.classify = config.classify ?? defaultClassify
    this.#opcode = operationCode(config.operation)
    this.renewEveryMs = Math.max(1, Math.floor(config.policy.leaseMs / 3))
    this.heartbeat = scheduleEvery(this.renewEveryMs / 2)
    // The deadline is checked at a tenth of its length, at most every 100 ms: a decision past
    // it is answered at most that much later.
    const timeout = config.claimTimeoutMs
    this.deadlines = timeout === undefined ? undefined : scheduleEvery(Math.min(100, Math.max(1, timeout / 10)))
    const transaction: unknown = config.transaction
    if (transaction !== undefined && typeof transaction !== 'boolean' && !isAppTransactions(transaction)) {
      throw new IdempotencyError(
        ErrorCode.INVALID_OPTION,
        'Option "transaction" must be a boolean or an ORM adapter (idemkit/drizzle, idemkit/kysely, idemkit/knex, ...).',
      )
    }
    if (inTransaction(config.transaction)) {
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

  /** Notes how long a run of the operation took (the Retry-After estimate). */
  noteRun(ms: number): void {
    this.#durations.note(ms)
  }

  /**
   * The Retry-After of IN_PROGRESS (docs/design.md §5): the route's own, else the operation's
   * recent typical run (the median of the last runs), never more than the lease left.
   */
  retryAfter(leaseLeftMs: number): number {
    const wanted = this.config.inProgressRetryAfterMs ?? this.#durations.typical()
    return Math.max(1, Math.round(Math.min(leaseLeftMs, wanted)))
  }

  /**
   * Decides, or wins the scope. Resolves to a `Decided` outcome (the action must not run) or a
   * `Run`: run the action once with its `context`, then hand its settled result to
   * `run.finish()`.
   * @param context handed to `onEvent` with every event of this invocation.
   * @throws only for programmer errors (a malformed argument to the store).
   */
  begin(input: BeginInput, context: C): Promise<Decided<T> | Run<T, C>> {
    return decide(this, input.scope === undefined ? input : this.#keyed(input.scope, input), context)
  }

  /**
   * A scoped invocation's store keys: the current secret's, and the older versions' to look up
   * first (docs/design.md §2), so a retry across a rotation finds the record an older secret wrote.
   */
  #keyed(scope: ExecutionScope, input: BeginInput): KeyedBeginInput {
    const secrets = this.secrets
    if (secrets === undefined) {
      throw new IdempotencyError(
        ErrorCode.INVALID_OPTION,
        'An invocation that names its "scope" needs the executor\'s "secrets" ({ current, keys: { [version]: secret } }), the same the HTTP adapters take.',
      )
    }
    if (scope === null || typeof scope !== 'object') {
      throw new IdempotencyError(ErrorCode.INVALID_ARGUMENT, 'The "scope" must be { principal, key }.')
    }
    const keys = scopeKeys(this.config.store.keyPrefix, secrets, this.#opcode, {
      principal: scope.principal,
      key: scope.key,
      operation: this.config.operation,
    })
    return {
      key: (keys[0] as (typeof keys)[0]).key,
      fingerprint: input.fingerprint,
      legacyFingerprints: input.legacyFingerprints,
      legacyKeys: keys.length === 1 ? undefined : keys.slice(1).map((legacy) => legacy.key),
    }
  }
}

/** Parsed secrets as they are; a `SecretsInput` parsed (and checked) once. */
function secretsOf(secrets: Secrets | SecretsInput): Secrets {
  return typeof (secrets as Secrets).key === 'function' ? (secrets as Secrets) : parseSecrets(secrets as SecretsInput)
}

/** Begins one invocation with `request`'s settings (see `Executor.begin`). */
export function begin<T>(request: BeginRequest<T>): Promise<Decided<T> | Run<T, undefined>> {
  const onEvent = request.onEvent
  return new Executor<T>({ ...request, onEvent: onEvent && ((event) => onEvent(event)) }).begin(request, undefined)
}

/** Executes `request.action` under the idempotency of `request.key`: begin → action → finish. */
export async function execute<T>(request: ExecuteRequest<T>): Promise<ExecuteOutcome<T>> {
  const begun = await begin(request)
  if (begun.kind !== 'RUN') return begun
  let settled: Settled<T>
  try {
    settled = { ok: true, value: await request.action(begun.context) }
  } catch (error) {
    settled = { ok: false, error }
  }
  return begun.finish(settled)
}
