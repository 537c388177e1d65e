/**
 * What every ORM adapter is (`idemkit/drizzle`, `idemkit/kysely`, `idemkit/knex`,
 * `idemkit/typeorm`, `idemkit/prisma`; docs/postgresql.md "With an ORM"): how the ORM opens a
 * transaction, a port over the ORM's transaction object for the store's statements
 * (`TransactionPort`), and `tx()`, which hands the run's transaction object to the handler
 * typed. No ORM is imported here.
 */
import { ErrorCode, IdempotencyError } from '../core/errors.js'
import type { AppTransactions, TransactionPort } from '../core/store-transaction.js'

/** An ORM's transactions, for `transaction: adapter` on a route, in `idempotent()` or in `execute()`. */
export interface OrmAdapter<Tx> extends AppTransactions<Tx> {
  /**
   * The ORM's transaction object of the run `context` belongs to (`request.idempotency`,
   * `req.idempotency`, the context `idempotent()`'s function or a processor's handler gets, the
   * action's context), typed.
   * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` when the run is not in a transaction of this
   *   adapter's (a route without `transaction: adapter`, a replay).
   */
  tx(context: { readonly tx: unknown } | null | undefined): Tx
}

/** The transaction object `transaction(callback)` hands its callback, of an ORM's database object. */
// biome-ignore lint/suspicious/noExplicitAny: the ORMs' own signatures
export type TransactionOf<DB> = DB extends { transaction(run: (tx: infer Tx) => Promise<any>, ...rest: any[]): any }
  ? Tx
  : never

/**
 * An adapter from the ORM's way to open a transaction and a port over its transaction object.
 * @param name the ORM's name, for messages.
 * @param open runs `body` in a new transaction of the ORM's: commits when it resolves, rolls back
 *   when it rejects, and settles once the ORM's COMMIT or ROLLBACK is answered.
 * @param port the store's statements through the transaction object.
 */
export function ormAdapter<Tx extends object>(
  name: string,
  open: <R>(body: (tx: Tx) => Promise<R>) => Promise<R>,
  port: (tx: Tx) => TransactionPort,
): OrmAdapter<Tx> {
  const runs = new WeakSet<object>()
  return Object.freeze({
    name,
    run: <R>(body: (tx: Tx, port: TransactionPort) => Promise<R>): Promise<R> =>
      open((tx) => {
        runs.add(tx)
        return body(tx, port(tx))
      }),
    tx(context: { readonly tx: unknown } | null | undefined): Tx {
      const tx = context?.tx
      // Knex's transaction object is a function.
      if ((typeof tx === 'object' || typeof tx === 'function') && tx !== null && runs.has(tx)) return tx as Tx
      throw new IdempotencyError(
        ErrorCode.INVALID_OPTION,
        `Not in a ${name} transaction of this adapter's: give the route (or idempotent(), or execute()) transaction: <the ${name} adapter>, ` +
          'and read tx() in the handler of a run (a replay has none).',
      )
    },
  })
}

/** Rows of a driver's result: node-postgres's `{ rows }`, or the rows themselves. */
export function rowsOf(result: unknown): readonly Record<string, unknown>[] {
  if (Array.isArray(result)) return result as Record<string, unknown>[]
  return ((result as { rows?: Record<string, unknown>[] } | undefined)?.rows ?? []) as Record<string, unknown>[]
}
