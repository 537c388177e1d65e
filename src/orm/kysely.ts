/**
 * `idemkit/kysely`: `transaction: kyselyTransactions(db)` runs the handler in Kysely's own
 * transaction (`db.transaction().execute()`), with the stored answer written in it
 * (docs/postgresql.md "Kysely"). `kysely` is an optional peer, imported by this entry only.
 */
import { CompiledQuery, type IsolationLevel, type Kysely, type Transaction } from 'kysely'
import { type OrmAdapter, ormAdapter, rowsOf } from './adapter.js'

export type { OrmAdapter } from './adapter.js'

/**
 * Runs a route's (or `execute()`'s) handler in a transaction of `db`'s (a `PostgresDialect`): the
 * handler writes through `adapter.tx(request.idempotency)`, Kysely's `Transaction<DB>`, and the
 * stored answer commits with its writes, or nothing does.
 * @param db the app's Kysely instance over a `pg.Pool`.
 * @param options the transaction's `isolationLevel`, for every run.
 */
export function kyselyTransactions<DB>(
  db: Kysely<DB>,
  options: { readonly isolationLevel?: IsolationLevel } = {},
): OrmAdapter<Transaction<DB>> {
  const { isolationLevel } = options
  return ormAdapter<Transaction<DB>>(
    'kysely',
    (body) => (isolationLevel ? db.transaction().setIsolationLevel(isolationLevel) : db.transaction()).execute(body),
    (tx) => ({
      query: async (text, values) => ({ rows: rowsOf(await tx.executeQuery(CompiledQuery.raw(text, [...values]))) }),
    }),
  )
}
