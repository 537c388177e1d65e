/**
 * The one front every store is called through (docs/design.md §3): the argument checks of
 * src/core/store-args.ts run here, once per call, before a store reads or writes anything, so a
 * store implements only its I/O and every store accepts exactly the same calls.
 *
 * - The stores this package ships extend `StoreFront` (and the PostgreSQL transaction
 *   `TransactionFront`): their public methods are the front's, their I/O the `do*` methods.
 * - Any other store is wrapped by `storeFront()` where the layer takes it (the executor, the
 *   operator commands, the `idemkit/testing` contract), so a malformed call to a store of your
 *   own is refused the same way, with the same error.
 *
 * The option checks every store's factory shares are here too: unknown option names and the
 * key prefix; and the check of the `store` option every entry that takes a store shares.
 */
import { invalidOption } from './errors.js'
import { boundCause, type FailureCause } from './failure-cause.js'
import type { FailureKind } from './record.js'
import type {
  ClaimRequest,
  ClaimResult,
  IdempotencyStore,
  InspectResult,
  OwnerRef,
  ReadResult,
  RecordTimes,
  RecordView,
  RenewResult,
  ScannedRecord,
  StoreEndpoint,
  StoreReport,
  TransitionResult,
} from './store.js'
import {
  checkClaim,
  checkComplete,
  checkInspect,
  checkKey,
  checkMarkFailed,
  checkRef,
  checkRenew,
  checkStart,
} from './store-args.js'
import type { StoreTransaction, TransactionalStore, TransactionClient } from './store-transaction.js'

/**
 * `doMarkFailed`'s arguments: `markFailed()`'s, checked, with the cause bounded (`boundCause`).
 * One type for the front and every store behind it.
 */
export type MarkFailedArgs = [ref: OwnerRef, kind: FailureKind, times: RecordTimes, cause: FailureCause | undefined]

/**
 * Runs `check` on the arguments: `undefined` when they pass, else the rejected promise a store
 * call answers with (a store call never throws synchronously).
 */
function refused<A, B, C, D>(
  check: (a: A, b: B, c: C, d: D) => void,
  a: A,
  b?: B,
  c?: C,
  d?: D,
): Promise<never> | undefined {
  try {
    check(a, b as B, c as C, d as D)
    return undefined
  } catch (error) {
    return Promise.reject(error)
  }
}

/**
 * A store whose calls are checked before its I/O runs. Extend it and implement the `do*`
 * methods (each receives arguments already checked), `close()`, and the optional methods of
 * `IdempotencyStore` the store supports.
 */
export abstract class StoreFront implements IdempotencyStore {
  abstract readonly name: string
  abstract readonly keyPrefix: string

  claim(request: ClaimRequest): Promise<ClaimResult> {
    return refused(checkClaim, request) ?? this.doClaim(request)
  }

  start(ref: OwnerRef, times: RecordTimes): Promise<TransitionResult> {
    return refused(checkStart, ref, times) ?? this.doStart(ref, times)
  }

  complete(ref: OwnerRef, response: Uint8Array, times: RecordTimes): Promise<TransitionResult> {
    return refused(checkComplete, ref, response, times) ?? this.doComplete(ref, response, times)
  }

  markFailed(ref: OwnerRef, kind: FailureKind, times: RecordTimes, cause?: FailureCause): Promise<TransitionResult> {
    return refused(checkMarkFailed, ref, kind, times, cause) ?? this.doMarkFailed(ref, kind, times, boundCause(cause))
  }

  release(ref: OwnerRef): Promise<TransitionResult> {
    return refused(checkRef, ref) ?? this.doRelease(ref)
  }

  renew(ref: OwnerRef, times: RecordTimes): Promise<RenewResult> {
    return refused(checkRenew, ref, times) ?? this.doRenew(ref, times)
  }

  inspect(key: string, owner: string): Promise<InspectResult> {
    return refused(checkInspect, key, owner) ?? this.doInspect(key, owner)
  }

  abstract close(): Promise<void>

  /** `claim()`'s I/O, on a checked request. */
  protected abstract doClaim(request: ClaimRequest): Promise<ClaimResult>
  /** `start()`'s I/O, on checked arguments. */
  protected abstract doStart(ref: OwnerRef, times: RecordTimes): Promise<TransitionResult>
  /** `complete()`'s I/O, on checked arguments. */
  protected abstract doComplete(ref: OwnerRef, response: Uint8Array, times: RecordTimes): Promise<TransitionResult>
  /** `markFailed()`'s I/O, on checked arguments (the cause bounded). */
  protected abstract doMarkFailed(...args: MarkFailedArgs): Promise<TransitionResult>
  /** `release()`'s I/O, on a checked reference. */
  protected abstract doRelease(ref: OwnerRef): Promise<TransitionResult>
  /** `renew()`'s I/O, on checked arguments. */
  protected abstract doRenew(ref: OwnerRef, times: RecordTimes): Promise<RenewResult>
  /** `inspect()`'s I/O, on checked arguments. */
  protected abstract doInspect(key: string, owner: string): Promise<InspectResult>
}

/**
 * A transaction whose `commit()` is checked as `complete()` is: a malformed call rolls the
 * transaction back (nothing of it is kept) and rejects with the argument error.
 */
export abstract class TransactionFront implements StoreTransaction {
  abstract readonly db: TransactionClient | undefined
  readonly tx?: unknown

  commit(ref: OwnerRef, response: Uint8Array, times: RecordTimes): Promise<TransitionResult> {
    const invalid = refused(checkComplete, ref, response, times)
    if (invalid === undefined) return this.doCommit(ref, response, times)
    return this.rollback().then(() => invalid)
  }

  abstract rollback(): Promise<void>

  /** `commit()`'s I/O, on checked arguments. */
  protected abstract doCommit(ref: OwnerRef, response: Uint8Array, times: RecordTimes): Promise<TransitionResult>
}

/** Another store's transaction behind the front. */
class CheckedTransaction extends TransactionFront {
  readonly db: TransactionClient | undefined
  override readonly tx: unknown
  readonly #transaction: StoreTransaction

  constructor(transaction: StoreTransaction) {
    super()
    this.#transaction = transaction
    this.db = transaction.db
    this.tx = transaction.tx
  }

  rollback(): Promise<void> {
    return this.#transaction.rollback()
  }

  protected doCommit(ref: OwnerRef, response: Uint8Array, times: RecordTimes): Promise<TransitionResult> {
    return this.#transaction.commit(ref, response, times)
  }
}

/** A store of another's behind the front: every call checked, then handed on unchanged. */
class CheckedStore extends StoreFront {
  readonly name: string
  readonly keyPrefix: string
  declare readonly watch?: (key: string, listener: () => void, ready?: () => void) => () => void
  declare readonly describe?: () => Promise<StoreReport>
  declare readonly read?: (key: string) => Promise<ReadResult>
  declare readonly replace?: (key: string, expected: RecordView, next: RecordView | undefined) => Promise<boolean>
  declare readonly scan?: () => AsyncIterable<ScannedRecord>
  declare readonly endpoint?: () => StoreEndpoint | undefined
  declare readonly beginTransaction?: TransactionalStore['beginTransaction']
  readonly #store: IdempotencyStore

  constructor(store: IdempotencyStore) {
    super()
    this.#store = store
    this.name = store.name
    this.keyPrefix = store.keyPrefix
    // The optional methods exist behind the front exactly when the store has them.
    const own = this as {
      -readonly [K in
        | 'watch'
        | 'describe'
        | 'read'
        | 'replace'
        | 'scan'
        | 'endpoint'
        | 'beginTransaction']?: CheckedStore[K]
    }
    const { watch, describe, read, replace, scan, endpoint } = store
    const begin = (store as Partial<TransactionalStore>).beginTransaction
    if (watch !== undefined) {
      own.watch = (key, listener, ready) => {
        checkKey(key)
        return watch.call(store, key, listener, ready)
      }
    }
    if (describe !== undefined) own.describe = () => describe.call(store)
    if (read !== undefined) own.read = (key) => refused(checkKey, key) ?? read.call(store, key)
    if (replace !== undefined) {
      own.replace = (key, expected, next) => refused(checkKey, key) ?? replace.call(store, key, expected, next)
    }
    if (scan !== undefined) own.scan = () => scan.call(store)
    if (endpoint !== undefined) own.endpoint = () => endpoint.call(store)
    if (begin !== undefined) {
      own.beginTransaction = (run, times, app) =>
        begin.call(store, run, times, app).then((transaction) => new CheckedTransaction(transaction))
    }
  }

  close(): Promise<void> {
    return this.#store.close()
  }

  protected doClaim(request: ClaimRequest): Promise<ClaimResult> {
    return this.#store.claim(request)
  }

  protected doStart(ref: OwnerRef, times: RecordTimes): Promise<TransitionResult> {
    return this.#store.start(ref, times)
  }

  protected doComplete(ref: OwnerRef, response: Uint8Array, times: RecordTimes): Promise<TransitionResult> {
    return this.#store.complete(ref, response, times)
  }

  protected doMarkFailed(...[ref, kind, times, cause]: MarkFailedArgs): Promise<TransitionResult> {
    return this.#store.markFailed(ref, kind, times, cause)
  }

  protected doRelease(ref: OwnerRef): Promise<TransitionResult> {
    return this.#store.release(ref)
  }

  protected doRenew(ref: OwnerRef, times: RecordTimes): Promise<RenewResult> {
    return this.#store.renew(ref, times)
  }

  protected doInspect(key: string, owner: string): Promise<InspectResult> {
    return this.#store.inspect(key, owner)
  }
}

/**
 * The store behind the front: the store itself when it is one already (every store this package
 * ships), else a wrapper that checks every call, then hands it on.
 * @param store any `IdempotencyStore`.
 * @returns a store whose malformed calls reject with `ERR_IDEM_INVALID_ARGUMENT` before the store
 *   is reached.
 */
export function storeFront(store: IdempotencyStore): IdempotencyStore {
  return store instanceof StoreFront ? store : new CheckedStore(store)
}

/**
 * The option check every factory starts with: `options` is an object, and every name in it is
 * one of `known` (a mistyped name must fail loudly, never fall back to a default silently).
 * @param options what the caller passed.
 * @param known the option names accepted.
 * @param what what the options are of, for the message when they are not an object.
 * @param where a prefix for the option's name in the message, e.g. `durability.`.
 * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION`.
 */
export function checkOptionNames(options: unknown, known: readonly string[], what: string, where = ''): void {
  if (typeof options !== 'object' || options === null) invalidOption(what, 'an object', options)
  for (const name of Object.keys(options)) {
    if (!known.includes(name)) invalidOption(`${where}${name}`, `one of ${known.join(', ')} (unknown option)`, name)
  }
}

/** The methods of `IdempotencyStore` the layer calls on any store it is given. */
const STORE_METHODS = ['claim', 'start', 'complete', 'markFailed', 'release', 'renew', 'inspect', 'close'] as const

/**
 * The `store` option of the adapters and of `idempotent()`: an object with a `keyPrefix` and every
 * method the layer calls (any store, not only the ones this package ships).
 * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` naming `store`.
 */
export function storeOption(store: IdempotencyStore): IdempotencyStore {
  if (
    store === null ||
    typeof store !== 'object' ||
    typeof store.keyPrefix !== 'string' ||
    STORE_METHODS.some((method) => typeof store[method] !== 'function')
  ) {
    invalidOption(
      'store',
      'an idempotency store such as redisStore({ redis }), postgresStore({ pool }) or memoryStore()',
      store,
    )
  }
  return store
}

/** The `keyPrefix` option of a store: non-empty, no whitespace. */
export function checkKeyPrefix(keyPrefix: unknown): asserts keyPrefix is string {
  if (typeof keyPrefix !== 'string' || keyPrefix.length === 0 || /\s/.test(keyPrefix)) {
    invalidOption('keyPrefix', 'a non-empty string without whitespace', keyPrefix)
  }
}
