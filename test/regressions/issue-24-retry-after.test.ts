/**
 * Issue 24, finding 6: the 409's `Retry-After` was the lease left (30 s for a request that takes
 * 1.5 s), so a client that obeyed it waited 20 times longer than needed. It is now the route's
 * recent typical duration (1 s before its first run), never more than the lease left, or the
 * route's `inProgressRetryAfterMs`. Over HTTP on every store.
 */
import { randomUUID } from 'node:crypto'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { afterEach, describe, expect, it } from 'vitest'
import type { RouteOptions } from '../../src/http/route-options.js'
import { gate, sleep } from '../helpers/executor-harness.js'
import { pluginApp, postOrder } from '../helpers/plugin-app.js'
import { STORES, type TestStore } from '../helpers/stores.js'

describe.each(STORES)('Retry-After of a request still running, on the %s store', (_name, create) => {
  let backing: TestStore | undefined
  let app: FastifyInstance | undefined
  let running = gate()

  afterEach(async () => {
    await app?.close()
    await backing?.teardown()
    app = undefined
    backing = undefined
  })

  async function start(route: RouteOptions<unknown>, runMs: number) {
    backing = await create()
    app = await pluginApp(backing.store, { leaseMs: 30_000 })
    app.post('/orders', { config: { idempotency: route } }, async (_request, reply) => {
      running.open()
      await sleep(runMs)
      return reply.code(201).send({ order: 1 })
    })
    const instance = app
    return (key: string) => postOrder(instance, key)
  }

  /** A duplicate sent while the first request with its key runs: its 409. */
  async function duplicateOf(post: (key: string) => Promise<LightMyRequestResponse>) {
    const key = randomUUID()
    running = gate()
    const first = post(key)
    // The duplicate goes once the first request runs its handler (it holds the key).
    await running.promise
    const duplicate = await post(key)
    expect((await first).statusCode).toBe(201)
    expect(duplicate.statusCode).toBe(409)
    return Number(duplicate.headers['retry-after'])
  }

  it("a 1.5 s request's duplicate is told 1-2 s, not the 30 s lease left", async () => {
    const post = await start({}, 1_500)
    // Before any run of the route: 1 s.
    expect(await duplicateOf(post)).toBe(1)
    // After runs of 1.5 s: their typical duration, 2 s in whole seconds.
    const retryAfter = await duplicateOf(post)
    expect(retryAfter).toBeGreaterThanOrEqual(1)
    expect(retryAfter).toBeLessThanOrEqual(2)
  })

  it("the route's inProgressRetryAfterMs, bounded by the lease left", async () => {
    const post = await start({ inProgressRetryAfterMs: 5_000 }, 400)
    expect(await duplicateOf(post)).toBe(5)
    await app?.close()
    await backing?.teardown()
    const bounded = await start({ inProgressRetryAfterMs: 60_000, leaseMs: 3_000 }, 400)
    expect(await duplicateOf(bounded)).toBeLessThanOrEqual(3)
  })

  it('refuses an inProgressRetryAfterMs that is not a positive integer', async () => {
    for (const bad of [0, -5, 1.5, '1000']) {
      await expect(start({ inProgressRetryAfterMs: bad as number }, 0)).rejects.toThrow(/inProgressRetryAfterMs/)
      await app?.close()
      await backing?.teardown()
      app = undefined
      backing = undefined
    }
  })
})
