/**
 * Issue 24, finding 5: waiting duplicates (`inFlight: { waitMs }`). The subscription was made
 * after the claim and not waited for, and the first inspect went out at once, so a completion
 * landing before the subscription was active was only seen by the next poll, 500 ms later; and
 * nothing capped the requests waiting in a process. Now the first inspect follows the
 * subscription, and at most `maxWaiters` requests wait at once; the next answer 409 at once.
 */
import { randomUUID } from 'node:crypto'
import type { FastifyInstance } from 'fastify'
import { afterEach, describe, expect, it } from 'vitest'
import { waitingRequests } from '../../src/core/in-flight.js'
import type { IdempotencyStore } from '../../src/core/store.js'
import { ADAPTERS } from '../helpers/adapters.js'
import { gate, harness, sleep } from '../helpers/executor-harness.js'
import { pluginApp, postOrder } from '../helpers/plugin-app.js'
import { createMemoryStore, createPostgresStore, createRedisStore, type TestStore } from '../helpers/stores.js'

/** The store, with each subscription taking `delayMs` to become active (a slow subscriber connection). */
function slowSubscriptions(inner: IdempotencyStore, delayMs: number): IdempotencyStore {
  return new Proxy(inner, {
    get(target, name, receiver) {
      if (name !== 'watch') {
        const value = Reflect.get(target, name, receiver)
        // The store's own methods, on the store itself (they use its private fields).
        return typeof value === 'function' ? value.bind(target) : value
      }
      return (key: string, listener: () => void, ready?: () => void) => {
        let stop: (() => void) | undefined
        let stopped = false
        setTimeout(() => {
          if (!stopped) stop = target.watch?.(key, listener, ready)
        }, delayMs)
        return () => {
          stopped = true
          stop?.()
        }
      }
    },
  })
}

describe.each([
  ['memory', createMemoryStore],
  ['redis', createRedisStore],
] as const)('a completion before the subscription is active, on the %s store', (_name, create) => {
  let backing: TestStore | undefined

  afterEach(async () => {
    await backing?.teardown()
    backing = undefined
  })

  it('is seen by the inspect that follows the subscription, not by a poll 500 ms later', async () => {
    backing = await create()
    const store = slowSubscriptions(backing.store, 250)
    const h = harness(store)
    const first = h.run({ action: () => sleep(100).then(() => ({ done: true })) })
    await sleep(20)
    // waitMs 400: shorter than the 500 ms poll, longer than the 250 ms the subscription takes.
    const waiter = await h.run({ inFlightWaitMs: 400 })
    expect(await first).toMatchObject({ kind: 'EXECUTED' })
    expect(waiter).toMatchObject({ kind: 'REPLAYED', value: { done: true } })
    expect(h.runs()).toBe(1)
  })
})

describe.each([
  ['redis', createRedisStore],
  ['postgres', () => createPostgresStore()],
] as const)('the waiter cap on the %s store', (_name, create) => {
  let backing: TestStore | undefined
  let app: FastifyInstance | undefined

  afterEach(async () => {
    await app?.close()
    await backing?.teardown()
    app = undefined
    backing = undefined
  })

  it('5 wait and replay, the rest answer 409 at once', async () => {
    const started = gate()
    backing = await create()
    app = await pluginApp(backing.store)
    app.post(
      '/orders',
      { config: { idempotency: { inFlight: { waitMs: 10_000, maxWaiters: 5 } } } },
      async (_request, reply) => {
        started.open()
        await sleep(800)
        return reply.code(201).send({ order: 1 })
      },
    )
    const instance = app
    const key = randomUUID()
    const post = () => postOrder(instance, key, { n: 1 })
    const first = post()
    // The duplicates go once the first request runs its handler (it holds the key).
    await started.promise
    const answered = await Promise.all(Array.from({ length: 12 }, post))
    expect((await first).statusCode).toBe(201)
    const statuses = answered.map((response) => response.statusCode).sort()
    expect(statuses).toEqual([...Array(5).fill(201), ...Array(7).fill(409)])
    for (const response of answered) {
      if (response.statusCode === 201) expect(response.headers['idempotent-replayed']).toBe('true')
      else expect(response.json()).toMatchObject({ code: 'IDEMPOTENCY_IN_FLIGHT' })
    }
    expect(waitingRequests()).toBe(0)
  })
})

describe('inFlight.maxWaiters is checked', () => {
  it('refuses what is not a positive integer, and unknown keys', async () => {
    const backing = await createMemoryStore()
    try {
      const [, adapter] = ADAPTERS[0] as (typeof ADAPTERS)[number]
      for (const bad of [0, -1, 1.5, '5', null]) {
        await expect(
          adapter.custom(backing.store, [
            {
              path: '/x',
              options: { inFlight: { waitMs: 100, maxWaiters: bad as number } },
              reply: () => ({ status: 200, chunks: [] }),
            },
          ]),
        ).rejects.toThrow(/inFlight/)
      }
      await expect(
        adapter.custom(backing.store, [
          {
            path: '/x',
            options: { inFlight: { waitMs: 100, maxWaiter: 5 } as never },
            reply: () => ({ status: 200, chunks: [] }),
          },
        ]),
      ).rejects.toThrow(/inFlight/)
    } finally {
      await backing.teardown()
    }
  })
})
