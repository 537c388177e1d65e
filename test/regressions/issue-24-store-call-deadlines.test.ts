/**
 * Issue 24, finding 2: a client setting could hang a request forever. Nothing bounded the
 * completion, the failure mark or the renewal, so on an ioredis client without a
 * `commandTimeout` a Redis that stopped answering kept the response from ever leaving, and with
 * `autoResendUnfulfilledCommands: false` and no `commandTimeout` ioredis drops the calls in
 * flight at a disconnect without rejecting them. Now every store call the layer makes is bounded
 * by `storeCallTimeoutMs`, whatever the client says, and the store refuses the client setting
 * that can lose a call for good. One case per setting (no commandTimeout, autoResendUnfulfilledCommands
 * false with and without one, maxRetriesPerRequest null), on a real redis-server that is paused
 * (SIGSTOP) or killed (SIGKILL while paused, so it never reads the call) with the call in flight;
 * the completion, the failure mark and the renewals; and a PostgreSQL store whose own statement
 * bound is far above the layer's, its server paused with the completion in flight.
 */
import { randomUUID } from 'node:crypto'
import Fastify, { type FastifyInstance } from 'fastify'
import { Redis, type RedisOptions } from 'ioredis'
import pg from 'pg'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import fastifyIdempotency from '../../plugins/fastify/index.js'
import { postgresStore } from '../../src/stores/postgres/index.js'
import { redisStore } from '../../src/stores/redis/index.js'
import { SECRET } from '../helpers/example-app.js'
import { sleep } from '../helpers/executor-harness.js'
import { type FaultPostgres, startFaultPostgres } from '../helpers/fault-postgres.js'
import { type FaultRedis, startFaultRedis } from '../helpers/fault-redis.js'
import { pluginApp, postOrder } from '../helpers/plugin-app.js'

describe('every store call has a deadline, whatever the ioredis client is set to', () => {
  let redis: FaultRedis
  let client: Redis | undefined
  let app: FastifyInstance | undefined

  beforeEach(async () => {
    redis = await startFaultRedis()
  })

  afterEach(async () => {
    try {
      redis.resume()
    } catch {
      // Killed already.
    }
    await app?.close()
    client?.disconnect()
    await redis.stop()
    app = undefined
    client = undefined
  })

  /** An app whose handler runs `during` (a pause or a kill of Redis) just before it answers. */
  async function start(settings: RedisOptions, during: () => void | Promise<void>, leaseMs = 30_000) {
    const connecting = new Redis(redis.port, '127.0.0.1', settings)
    client = connecting
    connecting.on('error', () => undefined)
    await new Promise<void>((resolve) => connecting.once('ready', () => resolve()))
    const store = redisStore({ redis: connecting, onEvent: () => undefined })
    const events: string[] = []
    app = await pluginApp(store, {
      leaseMs,
      storeCallTimeoutMs: 300,
      recordRetryMs: 1_000,
      onEvent: (event) => {
        if (event.type === 'store-error') events.push(`${event.call}: ${(event.error as Error).message}`)
      },
    })
    app.post('/orders', { config: { idempotency: true } }, async (_request, reply) => {
      await during()
      return reply.code(201).send({ order: 1 })
    })
    return events
  }

  const post = () => postOrder(app as FastifyInstance, randomUUID())

  it('ioredis defaults (no commandTimeout), Redis paused with the completion in flight: 503, not a hang', async () => {
    const events = await start({}, () => redis.pause())
    const answered = await post()
    expect(answered.statusCode).toBe(503)
    expect(answered.json()).toMatchObject({ code: 'IDEMPOTENCY_STORE_UNAVAILABLE' })
    expect(events.some((event) => event.startsWith('complete: The store did not answer complete within 300 ms'))).toBe(
      true,
    )
  })

  it('ioredis defaults, Redis paused and then killed with the completion in flight: 503, not a hang', async () => {
    const events = await start({}, async () => {
      redis.pause()
      setTimeout(() => process.kill(redis.pid(), 'SIGKILL'), 200)
    })
    const answered = await post()
    expect(answered.statusCode).toBe(503)
    expect(events.some((event) => event.startsWith('complete: '))).toBe(true)
  })

  it('ioredis defaults, Redis paused during a run of several leases: the renewals are bounded too', async () => {
    // Renewals every 100 ms, each sent to a paused server: without a bound the first one never
    // settles and the run's finish waits for it forever.
    const events = await start(
      {},
      async () => {
        redis.pause()
        await sleep(1_000)
      },
      300,
    )
    const answered = await post()
    expect(answered.statusCode).toBe(503)
    expect(events.some((event) => event.startsWith('renew: ') || event.startsWith('complete: '))).toBe(true)
  })

  it('autoResendUnfulfilledCommands false with a commandTimeout, Redis killed with the completion in flight: 503', async () => {
    await start({ autoResendUnfulfilledCommands: false, commandTimeout: 500, maxRetriesPerRequest: 1 }, async () => {
      redis.pause()
      setTimeout(() => process.kill(redis.pid(), 'SIGKILL'), 100)
    })
    expect((await post()).statusCode).toBe(503)
  })

  it('maxRetriesPerRequest null (calls wait for a reconnect forever), Redis killed with the completion in flight: 503', async () => {
    const events = await start({ maxRetriesPerRequest: null }, async () => {
      redis.pause()
      setTimeout(() => process.kill(redis.pid(), 'SIGKILL'), 100)
    })
    const answered = await post()
    expect(answered.statusCode).toBe(503)
    expect(events.some((event) => event.startsWith('complete: '))).toBe(true)
  })

  it('ioredis defaults, Redis paused when the handler fails: the failure mark is bounded too', async () => {
    const connecting = new Redis(redis.port, '127.0.0.1', {})
    client = connecting
    connecting.on('error', () => undefined)
    await new Promise<void>((resolve) => connecting.once('ready', () => resolve()))
    const events: string[] = []
    app = await pluginApp(redisStore({ redis: connecting, onEvent: () => undefined }), {
      storeCallTimeoutMs: 300,
      recordRetryMs: 1_000,
      onEvent: (event) => {
        if (event.type === 'store-error') events.push(`${event.call}: ${(event.error as Error).message}`)
      },
    })
    app.post('/orders', { config: { idempotency: true } }, async () => {
      redis.pause()
      throw new Error('the handler failed')
    })
    const answered = await post()
    expect(answered.statusCode).toBeGreaterThanOrEqual(500)
    expect(
      events.some((event) => event.startsWith('markFailed: The store did not answer markFailed within 300 ms')),
    ).toBe(true)
  })

  it('autoResendUnfulfilledCommands false without a commandTimeout is refused when the store is made', async () => {
    const unsafe = new Redis(redis.port, '127.0.0.1', { autoResendUnfulfilledCommands: false, lazyConnect: true })
    try {
      expect(() => redisStore({ redis: unsafe })).toThrow(
        /autoResendUnfulfilledCommands: false and no commandTimeout.*Set commandTimeout/,
      )
      const cluster = {
        isCluster: true,
        defineCommand: () => undefined,
        options: { redisOptions: { autoResendUnfulfilledCommands: false } },
      }
      expect(() => redisStore({ redis: cluster as never })).toThrow(/no commandTimeout/)
    } finally {
      unsafe.disconnect()
    }
  })

  it('the option is checked: storeCallTimeoutMs must be an integer from 1 to 60000', async () => {
    const store = redisStore({
      redis: new Redis(redis.port, '127.0.0.1', { lazyConnect: true }),
      onEvent: () => undefined,
    })
    for (const bad of [0, -1, 1.5, 60_001, '100']) {
      const instance = Fastify()
      await expect(
        instance.register(fastifyIdempotency, {
          store,
          secrets: { current: 1, keys: { 1: SECRET } },
          principal: () => 'alice',
          storeCallTimeoutMs: bad as number,
        }),
      ).rejects.toThrow(/storeCallTimeoutMs/)
      await instance.close()
    }
  })
})

describe('every store call has a deadline on PostgreSQL too, whatever the store is set to', () => {
  let postgres: FaultPostgres
  let pool: pg.Pool
  let app: FastifyInstance | undefined

  beforeEach(async () => {
    postgres = await startFaultPostgres()
    pool = new pg.Pool({ connectionString: postgres.url })
    pool.on('error', () => undefined)
  }, 60_000)

  afterEach(async () => {
    postgres.resume()
    await app?.close()
    await pool.end().catch(() => undefined)
    await postgres.stop()
    app = undefined
  })

  it('statementTimeoutMs far above the bound, the server paused with the completion in flight: 503 at storeCallTimeoutMs', async () => {
    // The store's own bound is 30 s: only the layer's bound can answer within the test's time.
    const store = postgresStore({
      pool,
      sweepIntervalMs: 0,
      statementTimeoutMs: 30_000,
      lockTimeoutMs: 29_000,
      onEvent: () => undefined,
    })
    await store.migrate()
    const events: string[] = []
    app = await pluginApp(store, {
      storeCallTimeoutMs: 300,
      recordRetryMs: 1_000,
      onEvent: (event) => {
        if (event.type === 'store-error') events.push(`${event.call}: ${(event.error as Error).message}`)
      },
    })
    app.post('/orders', { config: { idempotency: true } }, async (_request, reply) => {
      postgres.pause()
      return reply.code(201).send({ order: 1 })
    })
    const answered = await postOrder(app, randomUUID())
    expect(answered.statusCode).toBe(503)
    expect(answered.json()).toMatchObject({ code: 'IDEMPOTENCY_STORE_UNAVAILABLE' })
    expect(events.some((event) => event.startsWith('complete: The store did not answer complete within 300 ms'))).toBe(
      true,
    )
  }, 20_000)
})
