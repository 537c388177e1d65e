/** The PostgreSQL store's public surface: `idemkit/postgres`. */
import type { PostgresStoreOptions } from './options.js'
import { PostgresStore } from './postgres-store.js'

export type { PostgresClient, PostgresPool, PostgresQuery } from './connection.js'
export { postgresFault } from './faults.js'
export { migrationFiles, migrationSql, POSTGRES_SCHEMA_VERSION } from './migrations.js'
export type { PostgresStoreEvent, PostgresStoreOptions } from './options.js'
export { PostgresStore } from './postgres-store.js'
export type { PostgresVerifyReport } from './verify.js'

/**
 * Creates the PostgreSQL store (docs/design.md §6) on the application's `pg.Pool`. Run `await
 * store.migrate()` once at startup (safe from every instance) before the first request.
 * @param options the pool and the store's settings; see `PostgresStoreOptions`.
 * @returns an `IdempotencyStore` backed by one table and its PL/pgSQL functions.
 * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` for a missing pool, an unknown option or a
 *   value out of range.
 * @example
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
 * pool.on('error', (error) => app.log.warn(error))
 * const store = postgresStore({ pool })
 * await store.migrate()
 */
export function postgresStore(options: PostgresStoreOptions): PostgresStore {
  return new PostgresStore(options)
}
