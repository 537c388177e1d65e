/**
 * The transactions a store runs an action in (docs/design.md §6): its own (`transaction: true`),
 * an application's through an ORM adapter (the transaction port), and the recovery points of
 * `step(name, run)`. The contract of the store itself is in ./store.ts.
 */

import type { IdempotencyStore, OwnerRef, RecordTimes, TransitionResult } from './store.js'

/**
 * A database connection inside a transaction a store opened for one run (the action's writes
 * go through it): node-postgres's `PoolClient` on the PostgreSQL store.
 */
export interface TransactionClient {
  query<R = Record<string, unknown>>(
    text: string,
    values?: readonly unknown[],
  ): Promise<{ readonly rows: R[]; readonly rowCount: number | null }>
}

/**
 * The statements of a transaction the application opened (an ORM's), as the store sends its own
 * into it (the transaction port): one statement per call, `$1`-style placeholders, rows as
 * objects in the statement's column order.
 */
export interface TransactionPort {
  query(text: string, values: readonly unknown[]): Promise<{ readonly rows: readonly Record<string, unknown>[] }>
}

/**
 * How an application opens its transactions (an ORM's: `idemkit/drizzle`, `idemkit/kysely`, ...),
 * for `transaction: <adapter>`: the run's writes go through the ORM's own transaction object, and
 * the store writes the completion through the port in that same transaction.
 */
export interface AppTransactions<Tx = unknown> {
  /** The ORM's name, for messages (`drizzle`). */
  readonly name: string
  /**
   * Opens one transaction of the ORM's on one connection and runs `body` in it with the ORM's
   * transaction object and a port over it; commits when `body` resolves and rolls back when it
   * rejects, and settles once the COMMIT or ROLLBACK is answered.
   */
  run<R>(body: (tx: Tx, port: TransactionPort) => Promise<R>): Promise<R>
}

/**
 * A transaction opened for one run: the action writes through `db` (or the ORM's `tx`), and the
 * completion is written in the same transaction, so both commit or neither does (docs/design.md §6).
 */
export interface StoreTransaction {
  /**
   * The connection, inside the transaction (the store's own; `undefined` in an application's
   * transaction, `tx`). The action must not end the transaction itself.
   */
  readonly db: TransactionClient | undefined
  /** In a transaction the application opened (`AppTransactions`): the ORM's transaction object. */
  readonly tx?: unknown
  /**
   * Writes `complete`'s transition inside the transaction (the same owner, attempt and rev
   * check), then commits. Any answer but OK rolls the transaction back and is returned.
   * @returns OK once committed; NOT_FOUND, NOT_OWNER, WRONG_STATE (rolled back).
   * @throws StoreUnavailableError when nothing was committed (the transaction rolled back, e.g.
   *   a serialization failure, or the action left it aborted); StoreIndeterminateError when the
   *   commit may have happened (its reply was lost).
   */
  commit(ref: OwnerRef, response: Uint8Array, times: RecordTimes): Promise<TransitionResult>
  /** Rolls the transaction back and gives the connection up. Never rejects. */
  rollback(): Promise<void>
}

/** What `openStep` found of a step's recovery point: committed by an earlier execution (with its result), or not. */
export type StepPoint =
  | { readonly committed: false }
  | {
      readonly committed: true
      /** The step's result as JSON text; `null` when the step returned `undefined`. */
      readonly result: string | null
    }

/**
 * A run's transaction that keeps recovery points (`step(name, run)` of a `transaction: true`
 * run, docs/design.md §6): each step commits in a transaction of its own with its point, fenced
 * by the owner's attempt, and the run goes on in a new transaction on the same connection. The
 * PostgreSQL store's transactions are.
 */
export interface SteppedTransaction extends StoreTransaction {
  /** The connection inside the run's current transaction: every step's `run(db)` gets it. */
  readonly db: TransactionClient
  /**
   * Opens step `name` of the record `ref` holds: its recovery point, if an earlier execution of
   * the record committed it.
   * @throws IdempotencyError `ERR_IDEM_STEP_MISUSED` when the transaction holds writes made
   *   since the last step (outside a step, they would commit with this one and run again on a
   *   re-run); StoreUnavailableError when the transaction's connection is gone.
   */
  openStep(ref: OwnerRef, name: string): Promise<StepPoint>
  /**
   * Writes the step's recovery point, fenced (the record is `ref`'s, EXECUTING, at its attempt),
   * commits, and begins the run's next transaction on the same connection. Any answer but OK
   * rolls the step back (the run goes on in a new transaction) and is returned; ALREADY: a point
   * of that name is there already.
   * @throws StoreUnavailableError when the step certainly did not commit (rolled back);
   *   StoreIndeterminateError when its COMMIT's reply was lost (the transaction is then ended).
   */
  commitStep(ref: OwnerRef, name: string, result: string | null): Promise<TransitionResult>
  /** Rolls back what the step wrote (it threw) and begins the run's next transaction. Never rejects. */
  abandonStep(): Promise<void>
}

/** Whether a run's transaction keeps recovery points (`step()`). */
export function keepsSteps(transaction: StoreTransaction | undefined): transaction is SteppedTransaction {
  return typeof (transaction as Partial<SteppedTransaction> | undefined)?.commitStep === 'function'
}

/** A store that can run an action's writes and its completion in one transaction. */
export interface TransactionalStore extends IdempotencyStore {
  /**
   * Opens a transaction on a connection of its own for `run`, the scope the caller holds (its
   * renewals may then take another path, one that cannot conflict with the transaction's
   * completion), bounding its waits by the lease in `times`. With `app`, the transaction is the
   * application's (an ORM's), opened through it, and the store's statements go through its port.
   * @throws StoreUnavailableError when no connection could be had or `BEGIN` failed.
   */
  beginTransaction(
    run?: OwnerRef,
    times?: Pick<RecordTimes, 'leaseMs'>,
    app?: AppTransactions,
  ): Promise<StoreTransaction>
}

/** Whether `value` is an application's way to open transactions (an ORM adapter's). */
export function isAppTransactions(value: unknown): value is AppTransactions {
  const candidate = value as Partial<AppTransactions> | null
  return typeof candidate === 'object' && candidate !== null && typeof candidate.run === 'function'
}

/** Whether `store` can run actions in transactions (`transaction: true` routes). */
export function isTransactional(store: IdempotencyStore): store is TransactionalStore {
  return typeof (store as Partial<TransactionalStore>).beginTransaction === 'function'
}
