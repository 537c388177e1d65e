/**
 * Store factories for tests that run on every store: the memory store, the Redis store on the
 * suite's own redis-server (flushed, scripts and functions too, before each test) and the PostgreSQL store on
 * the suite's own cluster (its table migrated by the global setup, emptied before each test).
 */
import { randomBytes } from 'node:crypto'
import { Redis } from 'ioredis'
import pg from 'pg'
import { inject } from 'vitest'
import { freePort } from '../../scripts/redis-server.js'
import { jsonCodec } from '../../src/core/codec.js'
import { type ActionContext, execute } from '../../src/core/executor.js'
import { resolvePolicy } from '../../src/core/policy.js'
import type { ClaimRequest, IdempotencyStore } from '../../src/core/store.js'
import { memoryStore } from '../../src/stores/memory/index.js'
import { type PostgresStoreOptions, postgresStore } from '../../src/stores/postgres/index.js'
import { type RedisStoreOptions, redisStore } from '../../src/stores/redis/index.js'

export { serverNow } from './redis-time.js'

export interface TestStore {
  readonly store: IdempotencyStore
  teardown(): Promise<void>
}

export type StoreFactory = readonly [name: string, create: () => Promise<TestStore>]

/**
 * How another process makes the same store (test/helpers/runtime-adapter.ts): the memory store
 * (its own), or the Redis store on a server's URL under a key prefix.
 */
export type StoreSpec =
  | { readonly kind: 'memory' }
  | { readonly kind: 'redis'; readonly url: string; readonly keyPrefix: string }

const SPECS = new WeakMap<IdempotencyStore, StoreSpec>()

/** The spec of a store made here, for an app in another process; `undefined` for the others. */
export function storeSpec(store: IdempotencyStore): StoreSpec | undefined {
  return SPECS.get(store)
}

/** A fresh memory store. */
export async function createMemoryStore(): Promise<TestStore> {
  const store = memoryStore({ keyPrefix: 'test' })
  SPECS.set(store, { kind: 'memory' })
  return { store, teardown: () => store.close() }
}

/** A client to the suite's redis-server, with commands timing out quickly. */
export function testRedisClient(options: Record<string, unknown> = {}): Redis {
  return new Redis(inject('redisUrl'), { commandTimeout: 2_000, maxRetriesPerRequest: 1, ...options })
}

/** A Redis store on the suite's redis-server, flushed (data, scripts and functions) first. */
export async function createRedisStore(
  options: Partial<RedisStoreOptions> = {},
  clientOptions: Record<string, unknown> = {},
): Promise<TestStore> {
  const redis = testRedisClient(clientOptions)
  await redis.flushall()
  // Flushing scripts and functions makes every test go through the store's library load (and
  // ioredis's NOSCRIPT reload path where the store sends scripts).
  await redis.script('FLUSH')
  await redis.call('FUNCTION', 'FLUSH')
  const store = redisStore({ redis, keyPrefix: 'test', ...options })
  SPECS.set(store, { kind: 'redis', url: inject('redisUrl'), keyPrefix: store.keyPrefix })
  return {
    store,
    async teardown() {
      await store.close()
      redis.disconnect()
    },
  }
}

/** A Redis store whose server cannot be reached: a free port nothing listens on. */
export async function unreachableRedisStore(): Promise<TestStore> {
  const port = await freePort()
  const redis = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 1 })
  redis.on('error', () => {})
  redis.connect().catch(() => {})
  const store = redisStore({ redis })
  SPECS.set(store, { kind: 'redis', url: `redis://127.0.0.1:${port}`, keyPrefix: store.keyPrefix })
  return { store, teardown: async () => redis.disconnect() }
}

/** A pool on the suite's PostgreSQL cluster; idle connections that die are dropped quietly. */
export function testPostgresPool(options: pg.PoolConfig = {}): pg.Pool {
  const pool = new pg.Pool({ connectionString: inject('postgresUrl'), max: 10, ...options })
  pool.on('error', () => undefined)
  return pool
}

/** A PostgreSQL store on the suite's cluster, on a pool of its own, its table emptied first. */
export async function createPostgresStore(options: Partial<PostgresStoreOptions> = {}): Promise<TestStore> {
  const pool = testPostgresPool()
  await pool.query('TRUNCATE idemkit_records')
  const store = postgresStore({ pool, keyPrefix: 'test', sweepIntervalMs: 0, ...options })
  return {
    store,
    async teardown() {
      await store.close()
      await pool.end()
    },
  }
}

/** Every store, for `describe.each`. */
export const STORES: readonly StoreFactory[] = [
  ['memory', createMemoryStore],
  ['redis', createRedisStore],
  ['postgres', () => createPostgresStore()],
]

/** A claim on a fresh key of `store` with a fresh owner token and 10 s times. */
export function claimRequest(store: IdempotencyStore, overrides: Partial<ClaimRequest> = {}): ClaimRequest {
  return {
    key: `${store.keyPrefix}:idem:1:d1:op:${randomBytes(8).toString('hex')}`,
    owner: randomBytes(32).toString('hex'),
    fingerprint: 'f',
    operation: 'op',
    codec: 'c',
    policy: 'p',
    start: true,
    expiredExecution: 'recover',
    leaseMs: 10_000,
    replayWindowMs: 10_000,
    failureRetentionMs: 10_000,
    ...overrides,
  }
}

/**
 * One deposit on a `transaction: true` run of the PostgreSQL store: `execute()` of the scope
 * `key` with `action`, under a lease of `leaseMs`.
 */
export function transactionalDeposit(
  store: IdempotencyStore,
  key: string,
  leaseMs: number,
  action: (context: ActionContext) => Promise<unknown>,
) {
  return execute({
    store,
    key,
    fingerprint: 'f1:deposit',
    operation: 'POST /deposits',
    codec: jsonCodec(),
    policy: resolvePolicy({ leaseMs }),
    transaction: true,
    action,
  })
}

/** The claim fields of the order records the Redis tests write by hand (`fp-1`, `POST /orders`, `json@1`, `p1`). */
export const ORDER_CLAIM = { fingerprint: 'fp-1', operation: 'POST /orders', codec: 'json@1', policy: 'p1' } as const

/** The times (ms) of the order records the Redis tests claim: 5 s lease, 60 s replay window, 30 s failure retention. */
export const ORDER_TIMES = { leaseMs: 5_000, replayWindowMs: 60_000, failureRetentionMs: 30_000 } as const
