/**
 * `idemkit/typeorm`: `transaction: typeormTransactions(dataSource)` runs the handler in TypeORM's
 * own transaction (`dataSource.transaction(manager => ...)`), with the stored answer written in it
 * (docs/postgresql.md "With an ORM"). `typeorm` is an optional peer, imported by this entry only.
 */
import type { DataSource, EntityManager } from 'typeorm'
import { type OrmAdapter, ormAdapter, rowsOf } from './adapter.js'

export type { OrmAdapter } from './adapter.js'

/** TypeORM's isolation levels. */
export type TypeormIsolationLevel = Parameters<DataSource['transaction']>[0] & string

/**
 * Runs a route's (or `execute()`'s) handler in a transaction of `dataSource`'s (driver
 * `postgres`): the handler writes through `adapter.tx(request.idempotency)`, TypeORM's
 * `EntityManager` of the transaction, and the stored answer commits with its writes, or nothing does.
 * @param dataSource the app's initialised TypeORM data source.
 * @param isolationLevel the transaction's isolation level, for every run.
 */
export function typeormTransactions(
  dataSource: DataSource,
  isolationLevel?: TypeormIsolationLevel,
): OrmAdapter<EntityManager> {
  return ormAdapter<EntityManager>(
    'typeorm',
    (body) => (isolationLevel ? dataSource.transaction(isolationLevel, body) : dataSource.transaction(body)),
    (manager) => ({ query: async (text, values) => ({ rows: rowsOf(await manager.query(text, [...values])) }) }),
  )
}
