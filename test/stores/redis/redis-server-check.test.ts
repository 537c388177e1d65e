/**
 * What the Redis store checks about its server (issue 6, faults 8 and 9): the eviction policy
 * (refused, or warned about, unless noeviction), a new run_id after a restart (reported), and
 * transitions that still land at maxmemory (allow-oom) while new claims are refused.
 */
import { randomBytes } from 'node:crypto'
import { Redis, type RedisOptions } from 'ioredis'
import { afterEach, describe, expect, it } from 'vitest'
import { freePort } from '../../../scripts/redis-server.js'
import { ErrorCode, IdempotencyError, StoreUnavailableError } from '../../../src/core/errors.js'
import type { ClaimRequest } from '../../../src/core/store.js'
import { decodeRecord } from '../../../src/stores/record-layout.js'
import { redisStore } from '../../../src/stores/redis/index.js'
import { parseInfo, type RedisStoreEvent } from '../../../src/stores/redis/server-check.js'
import { redisFixture } from './fixture.js'

const TIMES = { leaseMs: 5_000, replayWindowMs: 60_000, failureRetentionMs: 60_000 }

function claimOf(key: string, owner = randomBytes(32).toString('hex')): ClaimRequest {
  return {
    key,
    owner,
    fingerprint: 'fp',
    operation: 'op',
    codec: 'json-1',
    policy: '1',
    start: true,
    expiredExecution: 'recover',
    ...TIMES,
  }
}

async function until<T>(check: () => T | undefined, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = check()
    if (value !== undefined) return value
    if (Date.now() > deadline) throw new Error('condition not met in time')
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

describe('parseInfo', () => {
  it('reads run_id, maxmemory_policy, aof_enabled, redis_version, connected_slaves and the keys of every database', () => {
    const info = [
      '# Server',
      'redis_version:7.0.15',
      'run_id:abc123',
      '# Memory',
      'maxmemory_policy:volatile-lru',
      '# Persistence',
      'aof_enabled:1',
      '# Replication',
      'connected_slaves:2',
      '# Keyspace',
      'db0:keys=3,expires=3,avg_ttl=10',
      'db5:keys=4,expires=0,avg_ttl=0',
      '',
    ].join('\r\n')

    expect(parseInfo('h:1', info)).toEqual({
      node: 'h:1',
      runId: 'abc123',
      maxmemoryPolicy: 'volatile-lru',
      aofEnabled: true,
      keys: 7,
      version: '7.0.15',
      replicas: 2,
    })
  })

  it('reports an unknown policy and no keys when the fields are missing', () => {
    expect(parseInfo('h:1', 'run_id:x\r\n')).toMatchObject({
      maxmemoryPolicy: 'unknown',
      aofEnabled: false,
      keys: 0,
      version: 'unknown',
      replicas: 0,
    })
  })
})

describe('the Redis store and its server', () => {
  const server = redisFixture({
    server: { config: { 'maxmemory-policy': 'noeviction' } },
    admin: { retryStrategy: () => 50 },
  })
  const client = (options: RedisOptions = {}) => server.client({ retryStrategy: () => 50, ...options })
  const ready = (options: RedisOptions = {}) => server.ready({ retryStrategy: () => 50, ...options })

  afterEach(async () => {
    await server.admin.config('SET', 'maxmemory-policy', 'noeviction')
    await server.admin.config('SET', 'maxmemory', '0')
    await server.admin.flushall()
  })

  it('verifies a noeviction server and reports its run_id', async () => {
    const store = redisStore({ redis: await ready() })

    const [report] = await store.verify()

    expect(report).toMatchObject({ node: `127.0.0.1:${server.port}`, maxmemoryPolicy: 'noeviction', aofEnabled: false })
    expect(report?.runId).toMatch(/^[0-9a-f]{40}$/)
  })

  it('verifies at once after creating a client that queues nothing offline: the check waits for the connection', async () => {
    const store = redisStore({ redis: client({ enableOfflineQueue: false }) })

    const [report] = await store.verify()

    expect(report).toMatchObject({ node: `127.0.0.1:${server.port}`, maxmemoryPolicy: 'noeviction' })
  })

  it.each(['allkeys-lru', 'volatile-ttl'])(
    'refuses a server whose policy is %s: verify throws, claims write nothing',
    async (policy) => {
      await server.admin.config('SET', 'maxmemory-policy', policy)
      const events: RedisStoreEvent[] = []
      const store = redisStore({ redis: await ready(), onEvent: (event) => events.push(event) })

      const verified = await store.verify().catch((error: unknown) => error)
      const claimed = await store.claim(claimOf('refused')).catch((error: unknown) => error)
      const inspected = await store.inspect('refused', randomBytes(32).toString('hex'))

      expect(verified).toBeInstanceOf(IdempotencyError)
      expect((verified as IdempotencyError).code).toBe(ErrorCode.STORE_MISCONFIGURED)
      expect((verified as Error).message).toContain(policy)
      expect(claimed).toBeInstanceOf(StoreUnavailableError)
      expect(((claimed as Error).cause as IdempotencyError).code).toBe(ErrorCode.STORE_MISCONFIGURED)
      expect(await server.admin.exists('refused')).toBe(0)
      expect(inspected.kind).toBe('ABSENT')
      expect(events).toEqual([expect.objectContaining({ type: 'unsafe-eviction-policy', policy, action: 'refused' })])
    },
  )

  it('still records the outcome of an execution claimed before the policy was refused', async () => {
    const store = redisStore({ redis: await ready(), onEvent: () => {} })
    const owner = randomBytes(32).toString('hex')
    const held = await store.claim(claimOf('running', owner))
    await server.admin.config('SET', 'maxmemory-policy', 'allkeys-lru')
    await store.verify().catch(() => undefined)

    const completed = await store.complete(
      { key: 'running', owner, attempt: 1, rev: 1 },
      Buffer.from('{"ok":true}'),
      TIMES,
    )
    const next = await store.claim(claimOf('next')).catch((error: unknown) => error)

    expect(held.kind).toBe('ACQUIRED')
    expect(completed).toEqual({ kind: 'OK', rev: 2 })
    expect(next).toBeInstanceOf(StoreUnavailableError)
  })

  it('refuses the first call of a store created on a ready client, without a verify() call', async () => {
    await server.admin.config('SET', 'maxmemory-policy', 'allkeys-lru')
    const store = redisStore({ redis: await ready(), onEvent: () => {} })

    const claimed = await store.claim(claimOf('first')).catch((error: unknown) => error)

    expect(claimed).toBeInstanceOf(StoreUnavailableError)
    expect(await server.admin.exists('first')).toBe(0)
  })

  it("runs and reports once with unsafeEviction 'warn'", async () => {
    await server.admin.config('SET', 'maxmemory-policy', 'allkeys-lru')
    const events: RedisStoreEvent[] = []
    const store = redisStore({ redis: await ready(), unsafeEviction: 'warn', onEvent: (event) => events.push(event) })

    await store.verify()
    await store.verify()
    const claimed = await store.claim(claimOf('warned'))

    expect(claimed.kind).toBe('ACQUIRED')
    expect(events).toEqual([
      expect.objectContaining({ type: 'unsafe-eviction-policy', action: 'warned', policy: 'allkeys-lru' }),
    ])
  })

  it('runs again once the policy is fixed and verified', async () => {
    await server.admin.config('SET', 'maxmemory-policy', 'allkeys-lru')
    const store = redisStore({ redis: await ready(), onEvent: () => {} })
    await store.verify().catch(() => undefined)

    await server.admin.config('SET', 'maxmemory-policy', 'noeviction')
    await store.verify()
    const claimed = await store.claim(claimOf('fixed'))

    expect(claimed.kind).toBe('ACQUIRED')
  })

  it('refuses, or warns about, a server that will not answer INFO', async () => {
    await server.admin.call('ACL', 'SETUSER', 'noinfo', 'on', '>secret', '~*', '+@all', '-info')
    const options = { username: 'noinfo', password: 'secret', enableReadyCheck: false }
    const events: RedisStoreEvent[] = []
    try {
      const refusing = redisStore({ redis: await ready(options), onEvent: () => {} })
      const warning = redisStore({
        redis: await ready(options),
        unsafeEviction: 'warn',
        onEvent: (event) => events.push(event),
      })

      const refused = await refusing.verify().catch((error: unknown) => error)
      await warning.verify()

      expect((refused as IdempotencyError).code).toBe(ErrorCode.STORE_MISCONFIGURED)
      expect((refused as Error).message).toContain('cannot be read')
      expect(events).toEqual([expect.objectContaining({ policy: 'unknown', action: 'warned' })])
    } finally {
      await server.admin.call('ACL', 'DELUSER', 'noinfo')
    }
  })

  it('reports a restart: a new run_id seen on reconnect, with the keys the server has now', async () => {
    const events: RedisStoreEvent[] = []
    const store = redisStore({ redis: await ready(), onEvent: (event) => events.push(event) })
    const [before] = await store.verify()
    await server.admin.set('survivor', '1')

    await server.restart()
    const event = await until(() => events.find((e) => e.type === 'redis-restarted'))

    expect(event).toMatchObject({
      type: 'redis-restarted',
      node: `127.0.0.1:${server.port}`,
      previousRunId: before?.runId,
      aofEnabled: false,
      keys: 0,
    })
    expect(event.type === 'redis-restarted' && event.runId).not.toBe(before?.runId)
    expect(event.message).toContain('a retry of a lost key runs its handler again')
  })

  it('emits a Node.js process warning by default', async () => {
    await server.admin.config('SET', 'maxmemory-policy', 'allkeys-lru')
    const warned = new Promise<Error>((resolve) => process.once('warning', resolve))
    const store = redisStore({ redis: await ready(), unsafeEviction: 'warn' })

    await store.verify()
    const warning = await warned

    expect(warning).toMatchObject({ name: 'IdempotencyWarning', code: 'IDEMKIT_UNSAFE_EVICTION' })
  })

  it('keeps working when onEvent throws', async () => {
    await server.admin.config('SET', 'maxmemory-policy', 'allkeys-lru')
    const store = redisStore({
      redis: await ready(),
      unsafeEviction: 'warn',
      onEvent: () => {
        throw new Error('observer failed')
      },
    })

    await expect(store.verify()).resolves.toHaveLength(1)
  })

  it('stops listening to the client when closed', async () => {
    const redis = await ready()
    const before = redis.listenerCount('ready')
    const store = redisStore({ redis })

    const during = redis.listenerCount('ready')
    await store.close()

    expect(during).toBe(before + 1)
    expect(redis.listenerCount('ready')).toBe(before)
  })

  it.each([
    ['an unknown unsafeEviction', { unsafeEviction: 'ignore' }],
    ['an onEvent that is not a function', { onEvent: 'log' }],
  ])('throws ERR_IDEM_INVALID_OPTION for %s', async (_name, extra) => {
    const redis = await ready()

    expect(() => redisStore({ redis, ...(extra as object) })).toThrow(/Option "(unsafeEviction|onEvent)"/)
  })

  it('lands every transition of an existing record at maxmemory, and refuses only new claims', async () => {
    const store = redisStore({ redis: await ready() })
    const owner = randomBytes(32).toString('hex')
    const held = await store.claim(claimOf('held', owner))
    const other = randomBytes(32).toString('hex')
    const pending = await store.claim({ ...claimOf('pending', other), start: false })
    if (held.kind !== 'ACQUIRED' || pending.kind !== 'ACQUIRED') throw new Error('setup failed')
    await server.admin.config('SET', 'maxmemory', '1')

    const refused = await store.claim(claimOf('new')).catch((error: unknown) => error)
    const renewed = await store.renew({ key: 'held', owner, attempt: 1, rev: 1 }, TIMES)
    const completed = await store.complete(
      { key: 'held', owner, attempt: 1, rev: 1 },
      Buffer.from('{"ok":true}'),
      TIMES,
    )
    const released = await store.release({ key: 'pending', owner: other, attempt: 1, rev: 1 })

    expect(refused).toBeInstanceOf(StoreUnavailableError)
    expect(((refused as Error).cause as Error).message).toMatch(/^OOM /)
    expect(renewed.kind).toBe('OK')
    expect(completed).toEqual({ kind: 'OK', rev: 2 })
    expect(released.kind).toBe('OK')
    expect(decodeRecord((await server.admin.getBuffer('held')) as Buffer).state).toBe('COMPLETED')
  })
})

describe('verify() on a Redis it cannot reach', () => {
  it('says it cannot connect, where, and why: not an indeterminate call with a record to inspect', async () => {
    const port = await freePort() // nothing listens there
    const redis = new Redis({ host: '127.0.0.1', port, db: 3, maxRetriesPerRequest: 1 })
    redis.on('error', () => undefined)
    const store = redisStore({ redis, onEvent: () => undefined })
    try {
      const error = await store.verify().then(
        () => undefined,
        (thrown: unknown) => thrown,
      )
      expect(error).toBeInstanceOf(StoreUnavailableError)
      const message = (error as Error).message
      expect(message).toContain(`cannot connect to redis 127.0.0.1:${port}/3: connect ECONNREFUSED 127.0.0.1:${port}`)
      expect(message).not.toMatch(/indeterminate|inspect the record/)
    } finally {
      await store.close()
      redis.disconnect()
    }
  })

  it('names the connection error too when the client queues nothing offline (enableOfflineQueue: false)', async () => {
    const port = await freePort() // nothing listens there
    const redis = new Redis({ host: '127.0.0.1', port, db: 2, enableOfflineQueue: false, maxRetriesPerRequest: 1 })
    redis.on('error', () => undefined)
    const store = redisStore({ redis, onEvent: () => undefined })
    try {
      const error = await store.verify().then(
        () => undefined,
        (thrown: unknown) => thrown,
      )
      expect(error).toBeInstanceOf(StoreUnavailableError)
      const message = (error as Error).message
      expect(message).toContain(`cannot connect to redis 127.0.0.1:${port}/2: connect ECONNREFUSED 127.0.0.1:${port}`)
      expect(message).not.toMatch(/indeterminate|inspect the record|enableOfflineQueue|writeable/)
    } finally {
      await store.close()
      redis.disconnect()
    }
  })
})
