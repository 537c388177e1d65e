/**
 * `idemkit/drizzle`: `transaction: drizzleTransactions(db)` runs the handler in Drizzle's own
 * transaction (`db.transaction()`), with the stored answer written in it (docs/postgresql.md
 * "Drizzle"). `drizzle-orm` is an optional peer, imported by this entry only.
 */
import { type SQL, sql } from 'drizzle-orm'
import type { PgTransactionConfig } from 'drizzle-orm/pg-core'
import { type OrmAdapter, ormAdapter, rowsOf, type TransactionOf } from './adapter.js'

export type { OrmAdapter } from './adapter.js'

/** What the adapter uses of a Drizzle PostgreSQL database (`drizzle-orm/node-postgres`'s `drizzle(pool)`). */
export interface DrizzleDatabase {
  // biome-ignore lint/suspicious/noExplicitAny: Drizzle's own signature
  transaction(run: (tx: any) => Promise<any>, config?: PgTransactionConfig): Promise<any>
}

/**
 * Runs a route's (or `execute()`'s) handler in a transaction of `db`'s: the handler writes through
 * `adapter.tx(request.idempotency)`, Drizzle's transaction object, and the stored answer commits
 * with its writes, or nothing does.
 * @param db the app's Drizzle database over a `pg.Pool`.
 * @param config Drizzle's transaction settings (`isolationLevel`, ...), for every run.
 * @example
 * const deposits = drizzleTransactions(db)
 * app.post('/deposits', { config: { idempotency: { transaction: deposits } } }, async (request) => {
 *   await deposits.tx(request.idempotency).insert(ledger).values({ amount: 10 })
 * })
 */
export function drizzleTransactions<DB extends DrizzleDatabase>(
  db: DB,
  config?: PgTransactionConfig,
): OrmAdapter<TransactionOf<DB>> {
  return ormAdapter<TransactionOf<DB>>(
    'drizzle',
    (body) => db.transaction(body, config),
    (tx) => ({ query: async (text, values) => ({ rows: rowsOf(await tx.execute(statement(text, values))) }) }),
  )
}

/** `text` with its `$1`-style placeholders as Drizzle's parameters. */
function statement(text: string, values: readonly unknown[]): SQL {
  const parts = text.split(/\$(\d+)/)
  return sql.join(parts.map((part, i) => (i % 2 === 0 ? sql.raw(part) : sql.param(values[Number(part) - 1]))))
}
