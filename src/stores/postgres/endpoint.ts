/**
 * Where a PostgreSQL store's server is, for telemetry (`store.endpoint()`): the OpenTelemetry
 * database conventions' `server.address`, `server.port`, `db.namespace` (the database) and
 * `db.collection.name` (the store's table), from the pool's settings as node-postgres reads them
 * (its options, else the connection string, else the `PG*` environment variables).
 */
import type { StoreEndpoint } from '../../core/store.js'

interface PoolSettings {
  readonly host?: string
  readonly port?: number | string
  readonly database?: string
  readonly user?: string
  readonly connectionString?: string
}

/** The endpoint of a pool (`pg.Pool`'s `options`), its table `schema.table`. */
export function postgresEndpoint(pool: unknown, table: string): StoreEndpoint {
  const options = ((pool as { options?: PoolSettings }).options ?? {}) as PoolSettings
  let url: URL | undefined
  try {
    url = options.connectionString === undefined ? undefined : new URL(options.connectionString)
  } catch {
    url = undefined
  }
  const host = options.host ?? (url?.hostname || url?.searchParams.get('host')) ?? process.env.PGHOST ?? 'localhost'
  const port = Number(options.port ?? (url?.port || undefined) ?? process.env.PGPORT ?? 5432)
  const database =
    options.database ?? (url?.pathname.slice(1) || undefined) ?? process.env.PGDATABASE ?? options.user ?? undefined
  return {
    address: host,
    port: Number.isSafeInteger(port) ? port : undefined,
    namespace: database === undefined ? undefined : decodeURIComponent(database),
    collection: table,
  }
}
