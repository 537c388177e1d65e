/**
 * The executor's public types (docs/design.md §4): what an operation's executor is given once,
 * what one invocation brings, what the action sees, and what the two phases answer.
 */
import type { Codec } from '../codec.js'
import type { KeyFor } from '../derived-key.js'
import type { Classification, ExecuteOutcome, ExecutorEvent, Settled } from '../outcomes.js'
import type { Policy } from '../policy.js'
import type { ReplayCache, ReplayCacheOptions } from '../replay-cache.js'
import type { Secrets, SecretsInput } from '../scope.js'
import type { IdempotencyStore } from '../store.js'
import type { AppTransactions, TransactionClient } from '../store-transaction.js'
import type { Step } from './steps.js'

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
  /**
   * With `transaction: <adapter>` (`idemkit/drizzle`, ...): the ORM's own transaction object,
   * typed by the adapter's `tx(context)`. What the action writes through it commits with the
   * record's completion, or not at all.
   */
  readonly tx: unknown
  /**
   * The idempotency key of a downstream call named `name` (`'charge'`, `` `charge:${line.id}` ``):
   * the same on every execution of this scope (the first, a takeover, a resumed re-run), another
   * for every other scope or name, and unguessable without the secret (docs/design.md §2). Send
   * it as the downstream request's `Idempotency-Key`, with the same body on every execution.
   * Needs the executor's `secrets`.
   */
  readonly keyFor: KeyFor
  /**
   * With `transaction: true` on the PostgreSQL store: runs `run(db)` as the step named `name`,
   * committed in a transaction of its own together with its recovery point; a re-run of this
   * scope (a takeover, a resumed re-run, a retry after a failure) skips a step that committed
   * and gets its result back (through JSON). Write only inside steps until the last one; what
   * is written after it commits with the result. Elsewhere it rejects with
   * `ERR_IDEM_INVALID_OPTION` (docs/postgresql.md "Steps").
   */
  readonly step: Step
}

/** What an executor knows before any request: one per operation (an HTTP route), made once. */
export interface ExecutorConfig<T, C = undefined> {
  readonly store: IdempotencyStore
  /** The operation's name, stored in the record. */
  readonly operation: string
  readonly codec: Codec<T>
  readonly policy: Policy
  /**
   * The versioned HMAC secrets of the scope digest (as the HTTP adapters take them): what
   * `context.keyFor()` derives downstream keys under (without them `keyFor` throws), and what an
   * invocation that names its `scope` is digested with: under `current`, after a read-only
   * look-up under every older version, so a retry across a rotation replays instead of running
   * again (docs/design.md §2).
   */
  readonly secrets?: Secrets | SecretsInput
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
   * writes certainly did not commit), whatever the policy's `expiredExecution`. An ORM's
   * adapter (`idemkit/drizzle`, `idemkit/kysely`, ...) in place of `true`: the transaction is the
   * ORM's, the action writes through `context.tx`, and the rest is the same.
   * @default false
   */
  // biome-ignore lint/suspicious/noExplicitAny: any ORM's transaction object
  readonly transaction?: boolean | AppTransactions<any>
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
  /**
   * Completed answers kept in this process: a replay of the same request (same store key,
   * fingerprint, operation, codec and policy) is answered from it without a store call, for at
   * most `maxAgeMs` and never past the record's replay window. Only a store's COMPLETED_REPLAY
   * is kept; everything else goes to the store. An operator's change to a completed record is
   * seen after at most `maxAgeMs`. `true`: the default bounds; a `ReplayCache` to share one
   * between executors (one made per `execute()` call would keep nothing).
   * @default false
   */
  readonly replayCache?: boolean | ReplayCacheOptions | ReplayCache
  /** Over HTTP: the request method and route pattern, added to every published event. */
  readonly labels?: { readonly method?: string; readonly route?: string }
  /**
   * Over HTTP: the response status an outcome is answered with (`undefined` when the framework
   * decides it, e.g. for a thrown error), added to the outcome event as `status`.
   */
  readonly statusOf?: (outcome: ExecuteOutcome<T>) => number | undefined
}

/** Who sent an idempotency key, and the key: with the operation, the scope (docs/design.md §2). */
export interface ExecutionScope {
  /** Who owns the key (a user, a tenant, a queue's producer). */
  readonly principal: string
  /** The idempotency key as the caller gave it (a message id, a job id, a header's value). */
  readonly key: string
}

interface BeginCommon {
  readonly fingerprint: string
  /** The request's fingerprints under older algorithm versions, also accepted as a match. */
  readonly legacyFingerprints?: readonly string[]
}

/**
 * One invocation named by its scope: the executor computes its store key under every configured
 * secret version (the executor's `secrets`) and looks up the older ones before the claim.
 */
export interface ScopedBeginInput extends BeginCommon {
  readonly scope: ExecutionScope
  readonly key?: undefined
  readonly legacyKeys?: undefined
}

/** One invocation named by a store key the caller computed (see `storeKey()`). */
export interface KeyedBeginInput extends BeginCommon {
  /** The scope's store key (see `storeKey()`). */
  readonly key: string
  /**
   * Keys of the same scope under older secret versions, newest first. While a secret rotation
   * is in progress they are inspected (read-only) before the claim, so a retry across the
   * rotation replays, or waits, instead of running again (docs/design.md §5).
   */
  readonly legacyKeys?: readonly string[]
  readonly scope?: undefined
}

/**
 * What one invocation brings: its scope (with the executor's `secrets`: the rotation look-ups
 * are the executor's) or its store key, and its request's fingerprint.
 */
export type BeginInput = ScopedBeginInput | KeyedBeginInput

/** What `begin()` answers without running: the action must not run. */
export type Decided<T> = Extract<
  ExecuteOutcome<T>,
  { kind: 'REPLAYED' | 'IN_PROGRESS' | 'FINGERPRINT_MISMATCH' | 'RECOVERY_REQUIRED' | 'STORE_UNAVAILABLE' }
>
/** What `finish()` answers: the outcome of a run. */
export type Finished<T> = Extract<ExecuteOutcome<T>, { kind: 'EXECUTED' | 'FAILED' | 'UNRECORDED' }>
