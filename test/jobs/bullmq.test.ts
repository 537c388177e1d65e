/**
 * `idempotentProcessor` with real BullMQ workers on the suite's redis-server: a worker SIGKILLed
 * mid-job in a process of its own, whose job BullMQ's stalled-job check hands to a second
 * worker (the effect happens once: the job fails with recovery required on Redis, and is taken
 * over and completed, one row, with `transaction: true` on PostgreSQL); the same job added twice
 * by a producer, under one job id or one business key; and how handler errors meet BullMQ's
 * attempts.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { randomBytes, randomUUID } from 'node:crypto'
import { type Job, Queue, QueueEvents, Worker } from 'bullmq'
import type { Redis } from 'ioredis'
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest'
import { idempotentProcessor } from '../../src/bullmq/index.js'
import { redisStore } from '../../src/stores/redis/index.js'
import { sleep } from '../helpers/sleep.js'
import { testPostgresPool, testRedisClient } from '../helpers/stores.js'

const SECRET = randomBytes(32).toString('hex')
const WORKER_APP = 'test/jobs/apps/bullmq-worker.ts'

function connection() {
  const url = new URL(inject('redisUrl'))
  return { host: url.hostname, port: Number(url.port), maxRetriesPerRequest: null }
}

interface WorkerProcess {
  readonly child: ChildProcess
  output(): string
  /** Resolves with the first line of output that matches `pattern` (or rejects after `ms`). */
  line(pattern: RegExp, ms?: number): Promise<RegExpExecArray>
  stop(signal: NodeJS.Signals): Promise<void>
}

/** Starts test/jobs/apps/bullmq-worker.ts and waits until its worker is ready. */
async function startWorker(env: Record<string, string>): Promise<WorkerProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', WORKER_APP], {
    env: {
      ...process.env,
      REDIS_URL: inject('redisUrl'),
      DATABASE_URL: inject('postgresUrl'),
      IDEMPOTENCY_SECRET: SECRET,
      LEASE_MS: '1500',
      LOCK_MS: '1500',
      STALLED_MS: '500',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  child.stdout?.on('data', (chunk: Buffer) => {
    output += chunk.toString()
  })
  child.stderr?.on('data', (chunk: Buffer) => {
    output += chunk.toString()
  })
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  const process_: WorkerProcess = {
    child,
    output: () => output,
    async line(pattern, ms = 60_000) {
      const deadline = Date.now() + ms
      for (;;) {
        const found = pattern.exec(output)
        if (found !== null) return found
        if (child.exitCode !== null || child.signalCode !== null) throw new Error(`the worker exited: ${output}`)
        if (Date.now() > deadline) throw new Error(`no line ${pattern} within ${ms} ms: ${output}`)
        await sleep(20)
      }
    },
    async stop(signal) {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill(signal)
        await exited
      }
    },
  }
  await process_.line(/^ready$/m)
  return process_
}

/** Polls the job's state until it is `completed` or `failed`. */
async function settled(queue: Queue, id: string, ms = 60_000): Promise<Job> {
  const deadline = Date.now() + ms
  for (;;) {
    const state = await queue.getJobState(id)
    // Read once it has settled: a job read before, whose state then settled, holds no return value.
    const job = state === 'completed' || state === 'failed' ? await queue.getJob(id) : undefined
    if (job !== undefined) return job
    if (Date.now() > deadline) throw new Error(`job ${id} is still ${state} after ${ms} ms`)
    await sleep(50)
  }
}

describe('a BullMQ worker killed mid-job', () => {
  let redis: Redis
  let queue: Queue
  const workers: WorkerProcess[] = []

  beforeEach(async () => {
    redis = testRedisClient()
    await redis.flushall()
    queue = new Queue(`charges-${randomUUID()}`, { connection: connection() })
  })

  afterEach(async () => {
    for (const worker of workers.splice(0)) await worker.stop('SIGKILL')
    await queue.obliterate({ force: true })
    await queue.close()
    redis.disconnect()
  })

  it('on Redis: a second worker gets the stalled job and fails it as recovery required; the effect happened once', async () => {
    const first = await startWorker({ QUEUE: queue.name, HANG: '1' })
    workers.push(first)
    await queue.add('charge', { orderId: 'o-1', amount: 5 }, { jobId: 'j-1' })
    await first.line(/^effect j-1 1$/m)
    await first.stop('SIGKILL')

    const second = await startWorker({ QUEUE: queue.name })
    workers.push(second)
    const job = await settled(queue, 'j-1')

    expect(await job.getState()).toBe('failed')
    expect(job.failedReason).toContain('stopped without an outcome')
    expect(job.failedReason).toContain('its effect may have happened')
    expect(job.stalledCounter).toBe(1)
    expect(await redis.get('effects:j-1')).toBe('1')
    expect(second.output()).not.toMatch(/^effect/m)
  }, 180_000)

  it('on PostgreSQL with transaction: true: the second worker takes the job over and completes it; one row', async () => {
    const pool = testPostgresPool()
    await pool.query('CREATE TABLE IF NOT EXISTS jobs_ledger (job_id text, amount int, token int)')
    await pool.query('TRUNCATE jobs_ledger')
    await pool.query('TRUNCATE idemkit_records')
    try {
      const first = await startWorker({ QUEUE: queue.name, HANG: '1', STORE: 'postgres' })
      workers.push(first)
      await queue.add('charge', { orderId: 'o-2', amount: 7 }, { jobId: 'j-2' })
      // Killed between its INSERT and the commit: the row is not there.
      await first.line(/^effect j-2 1$/m)
      expect((await pool.query('SELECT count(*)::int AS n FROM jobs_ledger')).rows[0].n).toBe(0)
      await first.stop('SIGKILL')

      const second = await startWorker({ QUEUE: queue.name, STORE: 'postgres' })
      workers.push(second)
      const job = await settled(queue, 'j-2')

      expect({ state: await job.getState(), reason: job.failedReason }).toEqual({
        state: 'completed',
        reason: undefined,
      })
      expect(job.returnvalue).toEqual({ charged: 7, token: 2 })
      expect((await pool.query('SELECT job_id, amount, token FROM jobs_ledger')).rows).toEqual([
        { job_id: 'j-2', amount: 7, token: 2 },
      ])
    } finally {
      await pool.query('DROP TABLE IF EXISTS jobs_ledger')
      await pool.end()
    }
  }, 180_000)
})

describe('a BullMQ producer that adds the same job twice', { timeout: 60_000 }, () => {
  let redis: Redis
  let storeClient: Redis
  let queue: Queue
  let events: QueueEvents
  let worker: Worker | undefined

  beforeEach(async () => {
    redis = testRedisClient()
    await redis.flushall()
    storeClient = testRedisClient({ autoResendUnfulfilledCommands: false })
    queue = new Queue(`orders-${randomUUID()}`, { connection: connection() })
    events = new QueueEvents(queue.name, { connection: connection() })
    await events.waitUntilReady()
  })

  afterEach(async () => {
    await worker?.close()
    worker = undefined
    await events.close()
    await queue.obliterate({ force: true })
    await queue.close()
    storeClient.disconnect()
    redis.disconnect()
  })

  /** A worker whose handler counts its runs per order and takes `ms`. */
  function startWorker(key: 'id' | 'order', ms = 0, concurrency = 1) {
    const runs = new Map<string, number>()
    const store = redisStore({ redis: storeClient, keyPrefix: 'jobs' })
    worker = new Worker<{ orderId: string }, { order: string; run: number }>(
      queue.name,
      idempotentProcessor(
        async (job) => {
          const run = (runs.get(job.data.orderId) ?? 0) + 1
          runs.set(job.data.orderId, run)
          await sleep(ms)
          return { order: job.data.orderId, run }
        },
        {
          store,
          secrets: { current: 1, keys: { 1: SECRET } },
          operation: 'place-order',
          key: key === 'order' ? 'data.orderId' : undefined,
          inProgressRetryAfterMs: 100,
        },
      ),
      { connection: connection(), concurrency },
    )
    return runs
  }

  it('under one jobId, added again after the first completed and was removed: runs once, both complete with its result', async () => {
    const runs = startWorker('id')
    const first = await queue.add('order', { orderId: 'o-1' }, { jobId: 'job-1', removeOnComplete: true })
    const firstResult = await first.waitUntilFinished(events, 30_000)
    const again = await queue.add('order', { orderId: 'o-1' }, { jobId: 'job-1', removeOnComplete: true })
    const againResult = await again.waitUntilFinished(events, 30_000)

    expect(firstResult).toEqual({ order: 'o-1', run: 1 })
    expect(againResult).toEqual(firstResult)
    expect(runs.get('o-1')).toBe(1)
  })

  it('under one business key and two job ids at once: one runs, the other waits (delayed) and completes with its result', async () => {
    const runs = startWorker('order', 400, 2)
    const [a, b] = await Promise.all([
      queue.add('order', { orderId: 'o-2' }, { jobId: 'job-2a' }),
      queue.add('order', { orderId: 'o-2' }, { jobId: 'job-2b' }),
    ])
    const results = await Promise.all([a.waitUntilFinished(events, 30_000), b.waitUntilFinished(events, 30_000)])

    expect(results).toEqual([
      { order: 'o-2', run: 1 },
      { order: 'o-2', run: 1 },
    ])
    expect(runs.get('o-2')).toBe(1)
    const b1 = await queue.getJob('job-2b')
    const a1 = await queue.getJob('job-2a')
    // Neither used a second attempt: the one that found the key running was delayed instead.
    expect([a1?.attemptsMade, b1?.attemptsMade]).toEqual([1, 1])
  })

  it('under one jobId with other data (removed meanwhile): fails for good as key reused', async () => {
    startWorker('id')
    const first = await queue.add('order', { orderId: 'o-3' }, { jobId: 'job-3', removeOnComplete: true })
    await first.waitUntilFinished(events, 30_000)
    const other = await queue.add('order', { orderId: 'o-4' }, { jobId: 'job-3', attempts: 3 })

    await expect(other.waitUntilFinished(events, 30_000)).rejects.toThrow(/used before with other arguments/)
    const failed = await queue.getJob('job-3')
    expect(failed?.attemptsMade).toBe(1)
  })
})

describe("a BullMQ handler's errors and the job's attempts", { timeout: 60_000 }, () => {
  let redis: Redis
  let storeClient: Redis
  let queue: Queue
  let events: QueueEvents
  let worker: Worker | undefined

  beforeEach(async () => {
    redis = testRedisClient()
    await redis.flushall()
    storeClient = testRedisClient({ autoResendUnfulfilledCommands: false })
    queue = new Queue(`errors-${randomUUID()}`, { connection: connection() })
    events = new QueueEvents(queue.name, { connection: connection() })
    await events.waitUntilReady()
  })

  afterEach(async () => {
    await worker?.close()
    worker = undefined
    await events.close()
    await queue.obliterate({ force: true })
    await queue.close()
    storeClient.disconnect()
    redis.disconnect()
  })

  function startWorker(fail: (attempt: number) => Error | undefined) {
    let runs = 0
    worker = new Worker(
      queue.name,
      idempotentProcessor(
        async () => {
          runs++
          const error = fail(runs)
          if (error !== undefined) throw error
          return runs
        },
        {
          store: redisStore({ redis: storeClient, keyPrefix: 'jobs' }),
          secrets: { current: 1, keys: { 1: SECRET } },
          operation: 'work',
        },
      ),
      { connection: connection() },
    )
    return () => runs
  }

  it('an error marked retryable goes to BullMQ, which retries it; the retry runs', async () => {
    const runs = startWorker((run) =>
      run === 1 ? Object.assign(new Error('no effect'), { retryable: true }) : undefined,
    )
    const job = await queue.add('work', {}, { attempts: 3 })

    expect(await job.waitUntilFinished(events, 30_000)).toBe(2)
    expect(runs()).toBe(2)
  })

  it('an unmarked error fails the job for good, its own message first; no attempt is spent on recovery-required', async () => {
    const runs = startWorker(() => new Error('provider timed out'))
    const job = await queue.add('work', {}, { attempts: 3 })

    await expect(job.waitUntilFinished(events, 30_000)).rejects.toThrow(/^provider timed out \(idemkit: .*not retried/)
    const failed = await queue.getJob(job.id as string)
    expect(failed?.attemptsMade).toBe(1)
    expect(runs()).toBe(1)
  })
})
