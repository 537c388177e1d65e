/**
 * Where `idemkit` works: the store a URL names (Redis or PostgreSQL, connected and checked
 * before any command runs), and the errors a command ends with: bad arguments (exit 2), a store
 * not reached or failing (exit 3).
 */
import type { IdempotencyStore } from '../core/store.js'

/** Bad arguments: the message, then the usage (exit 2). */
export class UsageError extends Error {}

/** A setting the command needs is missing or wrong (a secret, who acts): the message alone, exit 2. */
export class SetupError extends Error {}

export interface OpenStore {
  readonly store: IdempotencyStore
  /** The server, for messages: `redis 127.0.0.1:6380/2`, `postgres 127.0.0.1:5432/app`. */
  readonly where: string
  close(): Promise<void>
}

/** The store could not be reached: the server, and why. */
export class ConnectError extends Error {}

/** `host:port/db` of a store URL, never its user or password. */
export function serverOf(url: URL, defaultPort: number, defaultDb: string): string {
  const db = decodeURIComponent(url.pathname.slice(1)) || defaultDb
  return `${url.hostname || '127.0.0.1'}:${url.port || defaultPort}/${db}`
}

export function causeOf(error: unknown): string {
  const { message, code } = error as { message?: string; code?: string }
  const nested = (error as { cause?: unknown }).cause
  const own = message || code || String(error)
  return nested === undefined ? own : `${own} (${causeOf(nested)})`
}

export async function openStore(url: string, values: Record<string, unknown>): Promise<OpenStore> {
  const keyPrefix = values['key-prefix'] as string | undefined
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    throw new UsageError(`--store is not a URL: ${url.replace(/\/\/[^@/]*@/, '//…@')}`)
  }
  const scheme = parsed.protocol
  if (scheme === 'redis:' || scheme === 'rediss:') {
    const { Redis } = await import('ioredis')
    const { redisStore } = await import('../stores/redis/index.js')
    const { databaseRefusal } = await import('../stores/redis/server-check.js')
    const where = `redis ${serverOf(parsed, 6379, '0')}`
    const redis = new Redis(url, {
      commandTimeout: 5_000,
      connectTimeout: 5_000,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
      lazyConnect: true,
    })
    let lastError: unknown
    redis.on('error', (error: unknown) => {
      lastError = error
    })
    try {
      await redis.connect()
    } catch (error) {
      redis.disconnect()
      throw new ConnectError(`cannot connect to ${where}: ${causeOf(lastError ?? error)}`)
    }
    // A database the server does not have: ioredis reports the refused SELECT as an error event
    // and goes on in database 0, which must not be read or changed in its place.
    const wrongDatabase = await databaseRefusal(redis).catch((error: unknown) => {
      redis.disconnect()
      throw new ConnectError(`cannot use ${where}: ${causeOf(error)}`)
    })
    if (wrongDatabase !== undefined) {
      redis.disconnect()
      throw new ConnectError(`cannot use ${where}: ${wrongDatabase.message}`)
    }
    const store = redisStore({ redis, keyPrefix, onEvent: () => undefined })
    return {
      store,
      where,
      async close() {
        await store.close()
        redis.disconnect()
      },
    }
  }
  if (scheme === 'postgres:' || scheme === 'postgresql:') {
    const { default: pg } = await import('pg')
    const { postgresStore } = await import('../stores/postgres/index.js')
    const pool = new pg.Pool({ connectionString: url, max: 1, connectionTimeoutMillis: 5_000 })
    pool.on('error', () => undefined)
    const where = `postgres ${serverOf(parsed, 5432, decodeURIComponent(parsed.username) || 'postgres')}`
    try {
      ;(await pool.connect()).release()
    } catch (error) {
      await pool.end().catch(() => undefined)
      throw new ConnectError(`cannot connect to ${where}: ${causeOf(error)}`)
    }
    const store = postgresStore({
      pool,
      keyPrefix,
      schema: values.schema as string | undefined,
      table: values.table as string | undefined,
      sweepIntervalMs: 0,
      acquireTimeoutMs: 5_000,
    })
    return {
      store,
      where,
      async close() {
        await store.close()
        await pool.end()
      },
    }
  }
  throw new UsageError(`--store must be a redis:// or postgres:// URL, not ${scheme}`)
}

/** A store call that failed once the store was reached: the server it failed on, and why. */
export class StoreError extends Error {
  constructor(where: string, error: unknown) {
    super(`${where}: ${causeOf(error)}`, { cause: error })
  }
}

/** The store's URL: --store, else IDEMKIT_STORE; a warning when a password is on the command line. */
export function storeUrl(values: Record<string, unknown>, env: NodeJS.ProcessEnv): string {
  const url = (values.store as string | undefined) ?? env.IDEMKIT_STORE
  if (url === undefined || url === '') throw new UsageError('--store (or IDEMKIT_STORE) is required')
  if (values.store !== undefined && /^[a-z]+:\/\/[^/@]*:[^/@]+@/i.test(url)) {
    process.stderr.write(
      'idemkit: warning: the --store URL carries a password, which shell history and process lists show; ' +
        'set IDEMKIT_STORE instead.\n',
    )
  }
  return url
}
