/**
 * `idemkit/knex`: `transaction: knexTransactions(knex)` runs the handler in Knex's own transaction
 * (`knex.transaction(trx => ...)`), with the stored answer written in it (docs/postgresql.md
 * "Knex"). `knex` is an optional peer, imported by this entry only.
 */
import type { Knex } from 'knex'
import { type OrmAdapter, ormAdapter, rowsOf } from './adapter.js'

export type { OrmAdapter } from './adapter.js'

/**
 * Runs a route's (or `execute()`'s) handler in a transaction of `knex`'s (client `pg`): the
 * handler writes through `adapter.tx(request.idempotency)`, Knex's `Transaction`, and the stored
 * answer commits with its writes, or nothing does.
 * @param knex the app's Knex instance.
 * @param config Knex's transaction settings (`isolationLevel`, ...), for every run.
 */
export function knexTransactions(knex: Knex, config?: Knex.TransactionConfig): OrmAdapter<Knex.Transaction> {
  return ormAdapter<Knex.Transaction>(
    'knex',
    (body) => knex.transaction(body, config),
    (trx) => ({
      query: async (text, values) => {
        // Knex binds `?` in order: each `$n` becomes one, its value in that place.
        const bindings: unknown[] = []
        const positional = text.replace(/\$(\d+)/g, (_, n: string) => {
          bindings.push(values[Number(n) - 1])
          return '?'
        })
        return { rows: rowsOf(await trx.raw(positional, bindings as Knex.RawBinding[])) }
      },
    }),
  )
}
