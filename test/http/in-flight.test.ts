/**
 * `inFlight: { waitMs }` over a listening server, on every adapter and store: duplicates of a
 * request still running wait for its answer instead of answering 409, and the store calls each
 * waiting request makes are counted and printed.
 */
import { randomUUID } from 'node:crypto'
import { afterEach, describe, expect, it } from 'vitest'
import { waitForExecution, waitingRequests, watchedKeys } from '../../src/core/in-flight.js'
import { ADAPTERS, authHeaders, type RunningApp, send, type TestResponse } from '../helpers/adapters.js'
import { countingStore } from '../helpers/counting-store.js'
import { harness } from '../helpers/executor-harness.js'
import { sleep } from '../helpers/sleep.js'
import { createMemoryStore, createPostgresStore, createRedisStore, STORES, type TestStore } from '../helpers/stores.js'

const CASES = ADAPTERS.flatMap(([adapterName, adapter]) =>
  STORES.map(([storeName, create]) => [adapterName, storeName, adapter, create] as const),
)

describe.each(CASES)('inFlight waiting on %s with the %s store', (adapterName, storeName, adapter, create) => {
  let backing: TestStore | undefined
  let app: RunningApp | undefined

  afterEach(async () => {
    await app?.close()
    await backing?.teardown()
    app = undefined
    backing = undefined
  })

  async function start(waitMs: number | undefined, options: { hideWatch?: boolean; leaseMs?: number } = {}) {
    backing = await create()
    const counting = countingStore(backing.store, options)
    app = await adapter.example(counting.store, { waitMs, leaseMs: options.leaseMs })
    return counting
  }

  const burst = (running: RunningApp, key: string, body: unknown, n: number): Promise<TestResponse[]> =>
    Promise.all(
      Array.from({ length: n }, () => send(running, 'POST', '/orders', { headers: authHeaders('alice', key), body })),
    )

  it('100 duplicates of a 300 ms request with waitMs 5000: 1 execution, 100 × 201 with one body, no 409', async () => {
    const counting = await start(5_000)
    const running = app as RunningApp
    const key = randomUUID()
    const started = performance.now()
    const responses = await burst(running, key, { item: 'book', qty: 1, delayMs: 300 }, 100)
    const elapsed = Math.round(performance.now() - started)
    const statuses = responses.map((response) => response.status)
    const replayed = responses.filter((response) => response.headers.get('idempotent-replayed') === 'true').length
    const bodies = new Set(responses.map((response) => response.text))
    const orders = (await send(running, 'GET', '/orders', { headers: authHeaders('alice') })).json().orders
    const claims = counting.counts.claim ?? 0
    console.log(
      `[in-flight ${adapterName}/${storeName}] waitMs 5000: ${statuses.filter((s) => s === 201).length} × 201 ` +
        `(${replayed} replayed) in ${elapsed} ms; store calls: claim ${claims} (${(claims / 100).toFixed(2)} per request), ` +
        `inspect ${counting.counts.inspect ?? 0}, watch ${counting.counts.watch ?? 0}, complete ${counting.counts.complete ?? 0}`,
    )
    expect(statuses).toEqual(Array(100).fill(201))
    expect(replayed).toBe(99)
    expect(bodies.size).toBe(1)
    expect(orders).toHaveLength(1)
    // One claim each, and at most one more per waiter after the wake-up: no polling per waiter.
    expect(claims).toBeLessThanOrEqual(200)
    expect(counting.counts.inspect ?? 0).toBeLessThanOrEqual(20)
    expect(watchedKeys(counting.store)).toBe(0)
  })

  it('with waitMs 100 the rest answer 409 with Retry-After once 100 ms have passed', async () => {
    await start(100)
    const running = app as RunningApp
    const key = randomUUID()
    const started = performance.now()
    const responses = await burst(running, key, { item: 'book', qty: 1, delayMs: 1_500 }, 20)
    const conflicts = responses.filter((response) => response.status === 409)
    const replayed = (response: (typeof responses)[number]) => response.headers.get('idempotent-replayed') === 'true'
    const executed = responses.filter((response) => response.status === 201 && !replayed(response))
    expect(executed).toHaveLength(1)
    // A duplicate that a loaded machine delivers after the 1.5 s handler ended gets the replay;
    // every other one waited its 100 ms and got the 409.
    expect(responses.filter((response) => response.status !== 409 && !executed.includes(response))).toEqual(
      responses.filter((response) => response.status === 201 && replayed(response)),
    )
    expect(conflicts.length).toBeGreaterThanOrEqual(1)
    for (const conflict of conflicts) {
      expect(Number(conflict.headers.get('retry-after'))).toBeGreaterThanOrEqual(1)
      expect(conflict.json()).toMatchObject({ status: 409, code: 'IDEMPOTENCY_IN_FLIGHT' })
    }
    expect(performance.now() - started).toBeGreaterThanOrEqual(100)
  })

  it('without the option a duplicate answers 409 at once', async () => {
    await start(undefined)
    const running = app as RunningApp
    const key = randomUUID()
    // Sent together: whichever claims first runs (400 ms), the other is answered at once. A
    // fixed head start does not say which claims first on a loaded machine.
    const both = [0, 1].map(() =>
      send(running, 'POST', '/orders', {
        headers: authHeaders('alice', key),
        body: { item: 'book', qty: 1, delayMs: 400 },
      }),
    )
    const statuses = (await Promise.all(both)).map((answer) => answer.status)
    expect(statuses.sort()).toEqual([201, 409])
  })

  it('a waiter whose first request failed retryably runs it itself; the other waiters replay that', async () => {
    await start(5_000)
    const running = app as RunningApp
    const key = randomUUID()
    const failing = send(running, 'POST', '/orders', {
      headers: authHeaders('alice', key),
      body: { item: 'book', qty: 1, delayMs: 300, fail: 'retryable' },
    })
    await sleep(100)
    const waiting = await burst(running, key, { item: 'book', qty: 1, delayMs: 300, fail: 'retryable' }, 5)
    expect((await failing).status).toBe(503)
    // Each waiter answers as a retry would: it ran (503 again, nothing created) or waited for a
    // run of another waiter's; never a 409 while they had time left.
    expect(waiting.map((response) => response.status)).toEqual(Array(5).fill(503))
    const orders = (await send(running, 'GET', '/orders', { headers: authHeaders('alice') })).json().orders
    expect(orders).toHaveLength(0)
  })

  it('wakes by its poll alone on a store without notifications', async () => {
    const counting = await start(5_000, { hideWatch: true })
    const running = app as RunningApp
    const key = randomUUID()
    const responses = await burst(running, key, { item: 'book', qty: 1, delayMs: 300 }, 10)
    expect(responses.map((response) => response.status)).toEqual(Array(10).fill(201))
    expect(counting.counts.watch ?? 0).toBe(0)
    // About one inspect every 100 ms for the key, shared by the nine waiters.
    expect(counting.counts.inspect ?? 0).toBeGreaterThanOrEqual(2)
    expect(counting.counts.inspect ?? 0).toBeLessThanOrEqual(8)
  })
})

describe('the shared watch', () => {
  it('answers deadline on a store that never notifies and whose record stays running', async () => {
    const [, create] = STORES[0] as (typeof STORES)[number]
    const backing = await create()
    try {
      const { claimRequest } = await import('../helpers/stores.js')
      const request = claimRequest(backing.store, { leaseMs: 5_000 })
      await backing.store.claim(request)
      const started = performance.now()
      const woken = await Promise.all([
        waitForExecution(backing.store, request.key, started + 150, 5_000),
        waitForExecution(backing.store, request.key, started + 250, 5_000),
      ])
      expect(woken).toEqual([{ woken: 'deadline' }, { woken: 'deadline' }])
      expect(performance.now() - started).toBeGreaterThanOrEqual(240)
      expect(watchedKeys(backing.store)).toBe(0)
    } finally {
      await backing.teardown()
    }
  })

  it('waits past claimTimeoutMs: the claim deadline bounds each decision, not the wait between them', async () => {
    const backing = await createMemoryStore()
    try {
      const h = harness(backing.store)
      const first = h.run({ action: () => sleep(1_200).then(() => ({ done: true })) })
      await sleep(50)
      const started = performance.now()
      const waiter = await h.run({ inFlightWaitMs: 5_000, claimTimeoutMs: 300 })
      expect(waiter).toMatchObject({ kind: 'REPLAYED', value: { done: true } })
      expect(performance.now() - started).toBeGreaterThan(1_000)
      expect(await first).toMatchObject({ kind: 'EXECUTED' })
      expect(h.events.filter((event) => event.type === 'waited')).toEqual([
        expect.objectContaining({ type: 'waited', result: 'changed' }),
      ])
    } finally {
      await backing.teardown()
    }
  })

  // Issue 23, finding 5 (and issue 24, finding 5): every waiter used to claim again after the
  // wake-up although the shared poll had read the COMPLETED record: 1,000 waiters on a pool of
  // 10 PostgreSQL connections made 1,000 claims at once and 229 of them answered 503. Now the
  // waiters take the answer from the record the shared inspect read: one claim each, no more.
  it.each([
    ['redis', createRedisStore],
    // 1,000 first claims at once on 10 connections wait their turn in the pool: on a loaded
    // machine longer than the default acquireTimeoutMs. What is tested is what comes after the
    // wake-up (no claim again), counted below.
    ['postgres (a pool of 10)', () => createPostgresStore({ acquireTimeoutMs: 30_000 })],
  ] as const)(
    '1,000 waiting duplicates of one key on %s: 1,000 replays, no 503, one claim each',
    async (name, create) => {
      const backing = await create()
      try {
        const counting = countingStore(backing.store)
        const h = harness(counting.store)
        const first = h.run({ action: () => sleep(1_000).then(() => ({ done: true })) })
        await sleep(100)
        counting.reset()
        const waiters = await Promise.all(
          Array.from({ length: 1_000 }, () => h.run({ inFlightWaitMs: 20_000, storeCallTimeoutMs: 30_000 })),
        )
        const counts = { ...counting.counts }
        const kinds: Record<string, number> = {}
        for (const outcome of waiters) kinds[outcome.kind] = (kinds[outcome.kind] ?? 0) + 1
        console.log(
          `[in-flight ${name}] 1,000 waiters of one key: ${JSON.stringify(kinds)}; store calls ${JSON.stringify(counts)}`,
        )
        expect(await first).toMatchObject({ kind: 'EXECUTED' })
        expect(kinds).toEqual({ REPLAYED: 1_000 })
        expect(h.runs()).toBe(1)
        // The first claim each (answered IN_PROGRESS); none after the wake-up: the answer came from
        // the shared inspect. The watch and its inspects are shared by all of them.
        expect(counts.claim).toBe(1_000)
        expect(counts.watch ?? 0).toBeLessThanOrEqual(1)
        expect(counts.inspect ?? 0).toBeLessThanOrEqual(name === 'redis' ? 4 : 20)
        expect(waitingRequests()).toBe(0)
      } finally {
        await backing.teardown()
      }
    },
  )
})
