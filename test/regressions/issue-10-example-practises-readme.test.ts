/**
 * Issue 10, item 6: the example is the model users copy, so it does what the README asks of a
 * handler: it stops when the execution's signal fires instead of writing anyway, its writes
 * carry the fencing token and refuse a stale one, and its Redis client has the README's settings.
 */
import { randomUUID } from 'node:crypto'
import { afterEach, describe, expect, inject, it } from 'vitest'
import { exampleEnvironment } from '../../examples/environment.js'
import { FencedError, Shop } from '../../examples/shop.js'
import { ADAPTERS, authHeaders, fastifyAdapter, type RunningApp, send } from '../helpers/adapters.js'
import { faultyStore } from '../helpers/faulty-store.js'
import { STORES, type TestStore } from '../helpers/stores.js'

const CASES = ADAPTERS.flatMap(([adapterName, adapter]) =>
  STORES.map(([storeName, create]) => [adapterName, storeName, adapter, create] as const),
)

describe.each(CASES)('the %s example on the %s store', (_adapterName, _storeName, adapter, create) => {
  let backing: TestStore | undefined
  let app: RunningApp | undefined

  afterEach(async () => {
    await app?.close()
    await backing?.teardown()
  })

  it('creates no order once the lease is lost mid-handler', async () => {
    backing = await create()
    const store = faultyStore(backing.store)
    // No renewal is ever confirmed: after one lease (90 ms) the execution's signal fires.
    store.block('renew', 'not-sent')
    app = await adapter.example(store, { leaseMs: 90 })

    const response = await send(app, 'POST', '/orders', {
      headers: authHeaders('alice', randomUUID()),
      body: { item: 'book', qty: 1, delayMs: 1_000 },
    })
    const orders = (await send(app, 'GET', '/orders', { headers: authHeaders('alice') })).json().orders

    expect(response.status).toBe(503)
    expect(orders).toEqual([])
  })
})

describe('the example shop', () => {
  const execution = (fencingToken: number, aborted = false) => {
    const controller = new AbortController()
    if (aborted) controller.abort()
    return { signal: controller.signal, fencingToken, digest: 'abcdef012345' }
  }

  it('refuses a write with a fencing token lower than one it accepted for the scope', async () => {
    const shop = new Shop()

    await shop.createOrder('alice', { item: 'a', qty: 1 }, execution(2))
    const stale = shop.createOrder('alice', { item: 'a', qty: 1 }, execution(1))

    await expect(stale).rejects.toBeInstanceOf(FencedError)
    expect(() => shop.deposit('alice', 'acc', 5, execution(1))).toThrow(FencedError)
    expect(shop.ordersOf('alice')).toHaveLength(1)
    expect(shop.balanceOf('alice', 'acc')).toBe(0)
  })

  it('writes nothing once the signal fired', async () => {
    const shop = new Shop()

    await expect(shop.createOrder('alice', { item: 'a', qty: 1 }, execution(1, true))).rejects.toBeInstanceOf(
      FencedError,
    )
    expect(shop.ordersOf('alice')).toEqual([])
  })
})

describe('the example environment', () => {
  it('builds its Redis client with the README settings', async () => {
    const env = await exampleEnvironment({ REDIS_URL: inject('redisUrl') })
    try {
      expect(env.redis?.options).toMatchObject({
        commandTimeout: 2_000,
        maxRetriesPerRequest: 1,
        autoResendUnfulfilledCommands: false,
      })
    } finally {
      await env.close()
    }
  })

  it('uses PostgreSQL with DATABASE_URL: the README pool settings, the table migrated at startup', async () => {
    const env = await exampleEnvironment({ DATABASE_URL: inject('postgresUrl') })
    try {
      expect(env.store.name).toBe('postgres')
      expect(env.redis).toBeUndefined()
      expect(env.pool?.options).toMatchObject({ statement_timeout: 6_000 })
      expect(env.pool?.listenerCount('error')).toBe(1)
      expect(env.warnings).toEqual(['IDEMPOTENCY_SECRET is not set: using a development secret'])
      const app = await fastifyAdapter.example(env.store, {})
      try {
        const key = randomUUID()
        const send1 = await send(app, 'POST', '/orders', {
          headers: authHeaders('alice', key),
          body: { item: 'book', qty: 1 },
        })
        const send2 = await send(app, 'POST', '/orders', {
          headers: authHeaders('alice', key),
          body: { item: 'book', qty: 1 },
        })
        expect(send1.status).toBe(201)
        expect(send2.status).toBe(201)
        expect(send2.headers.get('idempotent-replayed')).toBe('true')
        expect(send2.body).toEqual(send1.body)
      } finally {
        await app.close()
      }
    } finally {
      await env.close()
    }
  })
})
