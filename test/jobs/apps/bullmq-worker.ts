/**
 * A BullMQ worker in a process of its own, for the tests that kill it: `idempotentProcessor`
 * on the Redis store (the effect an INCR of the job's key in Redis) or, with STORE=postgres and
 * transaction: true, on the PostgreSQL store (the effect a row in `jobs_ledger`, written through
 * the run's transaction). It prints `ready`, then `effect <job id> <fencing token>` once the
 * effect is written; with HANG=1 it then waits forever (for the test's SIGKILL), before the
 * handler returns (and, on PostgreSQL, before the commit).
 *
 * Environment: REDIS_URL, QUEUE, IDEMPOTENCY_SECRET, LEASE_MS, LOCK_MS, STALLED_MS, HANG, STORE,
 * DATABASE_URL.
 */
import { Worker } from 'bullmq'
import { Redis } from 'ioredis'
import pg from 'pg'
import { idempotentProcessor } from '../../../src/bullmq/index.js'
import type { IdempotencyStore } from '../../../src/core/store.js'
import { postgresStore } from '../../../src/stores/postgres/index.js'
import { redisStore } from '../../../src/stores/redis/index.js'

const env = (name: string): string => {
  const value = process.env[name]
  if (value === undefined) throw new Error(`${name} is not set`)
  return value
}

const url = new URL(env('REDIS_URL'))
const hang = process.env.HANG === '1'
const onPostgres = process.env.STORE === 'postgres'
// The store's client and BullMQ's are two: BullMQ needs maxRetriesPerRequest: null on its own.
const redis = new Redis(env('REDIS_URL'), {
  commandTimeout: 2000,
  maxRetriesPerRequest: 1,
  autoResendUnfulfilledCommands: false,
})
const pool = onPostgres ? new pg.Pool({ connectionString: env('DATABASE_URL'), max: 4 }) : undefined
pool?.on('error', () => undefined)
const store: IdempotencyStore =
  pool === undefined ? redisStore({ redis, keyPrefix: 'jobs' }) : postgresStore({ pool, sweepIntervalMs: 0 })

const processor = idempotentProcessor<{ orderId: string; amount: number }, { charged: number; token: number }>(
  async (job, { fencingToken, db }) => {
    if (db !== undefined) {
      await db.query('INSERT INTO jobs_ledger (job_id, amount, token) VALUES ($1, $2, $3)', [
        job.id,
        job.data.amount,
        fencingToken,
      ])
    } else {
      await redis.incr(`effects:${job.id}`)
    }
    console.log(`effect ${job.id} ${fencingToken}`)
    if (hang) await new Promise(() => undefined)
    return { charged: job.data.amount, token: fencingToken }
  },
  {
    store,
    secrets: { current: 1, keys: { 1: env('IDEMPOTENCY_SECRET') } },
    operation: 'charge',
    leaseMs: Number(env('LEASE_MS')),
    transaction: onPostgres,
  },
)

const worker = new Worker(env('QUEUE'), processor, {
  connection: { host: url.hostname, port: Number(url.port), maxRetriesPerRequest: null },
  lockDuration: Number(env('LOCK_MS')),
  stalledInterval: Number(env('STALLED_MS')),
  maxStalledCount: 1,
})
worker.on('error', (error) => console.error(`worker error: ${error.message}`))
await worker.waitUntilReady()
console.log('ready')

process.on('SIGTERM', () => {
  void worker
    .close()
    .then(() => store.close())
    .then(() => pool?.end())
    .finally(() => {
      redis.disconnect()
      process.exit(0)
    })
})
