/**
 * The replay cache (`replayCache`, src/core/replay-cache.ts) on every real store: a replay it
 * answers makes no store call (the store's calls are counted, not changed); only a store's
 * COMPLETED_REPLAY is kept, and it answers only the same request (another body still gets the
 * store's FINGERPRINT_MISMATCH, another principal its own run); entries end at `maxAgeMs` and at
 * the record's replay window; the bounds evict; look-ups under older secrets are made as without it.
 */
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest'
import { jsonCodec } from '../../src/core/codec.js'
import { ErrorCode } from '../../src/core/errors.js'
import { Executor, execute } from '../../src/core/executor.js'
import type { ExecutorEvent } from '../../src/core/outcomes.js'
import { resolvePolicy } from '../../src/core/policy.js'
import { ReplayCache } from '../../src/core/replay-cache.js'
import { parseSecrets } from '../../src/core/scope.js'
import { idempotent } from '../../src/jobs/idempotent.js'
import { memoryStore } from '../../src/stores/memory/index.js'
import { type CountingStore, countingStore } from '../helpers/counting-store.js'
import { sleep } from '../helpers/executor-harness.js'
import { STORES, type TestStore } from '../helpers/stores.js'

const SECRET_1 = 'a'.repeat(32)
const SECRET_2 = 'b'.repeat(32)

describe.each(STORES)('the replay cache on the %s store', (_name, create) => {
  let backing: TestStore
  let counted: CountingStore
  let runs: number

  beforeEach(async () => {
    backing = await create()
    counted = countingStore(backing.store)
    runs = 0
  })

  afterEach(async () => {
    await backing.teardown()
  })

  function executor(
    replayCache: ConstructorParameters<typeof Executor>[0]['replayCache'],
    options: { replayWindowMs?: number; current?: number; events?: ExecutorEvent[] } = {},
  ): Executor<unknown> {
    const { current = 1, replayWindowMs = 60_000, events } = options
    return new Executor<unknown>({
      store: counted.store,
      operation: 'POST /orders',
      codec: jsonCodec(),
      policy: resolvePolicy({ leaseMs: 5_000, replayWindowMs }),
      secrets: parseSecrets({ current, keys: current === 1 ? { 1: SECRET_1 } : { 1: SECRET_1, 2: SECRET_2 } }),
      replayCache,
      onEvent: events === undefined ? undefined : (event) => events.push(event),
    })
  }

  /** One call of the scope (`principal`, `key`) with the body `body`: begin, run, finish. */
  async function call(on: Executor<unknown>, key: string, body = 'a', principal = 'alice') {
    const begun = await on.begin(
      { scope: { principal, key }, fingerprint: `f1:${body.length}:${body.slice(0, 8)}` },
      undefined,
    )
    if (begun.kind !== 'RUN') return begun
    runs++
    return begun.finish({ ok: true, value: { run: runs, principal, body } })
  }

  it('answers a replay it kept without a store call, and keeps only what the store replayed', async () => {
    const cache = new ReplayCache({ maxAgeMs: 60_000 })
    const events: ExecutorEvent[] = []
    const on = executor(cache, { events })

    const first = await call(on, 'k1')
    expect(first).toMatchObject({ kind: 'EXECUTED', value: { run: 1 } })
    // The execution's own completion is not kept: only a store's COMPLETED_REPLAY is.
    expect(cache.size).toBe(0)

    const fromStore = await call(on, 'k1')
    expect(fromStore).toEqual({ kind: 'REPLAYED', value: { run: 1, principal: 'alice', body: 'a' } })
    expect(cache.size).toBe(1)

    counted.reset()
    for (let i = 0; i < 5; i++) {
      expect(await call(on, 'k1')).toEqual({ kind: 'REPLAYED', value: { run: 1, principal: 'alice', body: 'a' } })
    }
    expect(counted.counts).toEqual({})
    expect(runs).toBe(1)
    const claims = events.filter((event) => event.type === 'claim')
    expect(claims.at(-1)).toEqual({ type: 'claim', result: 'COMPLETED_REPLAY', cached: true })
    expect(claims.filter((event) => event.type === 'claim' && event.cached === true)).toHaveLength(5)
  })

  it('sends another body to the store, which answers FINGERPRINT_MISMATCH, and still replays the first', async () => {
    const cache = new ReplayCache()
    const on = executor(cache)
    await call(on, 'k1')
    await call(on, 'k1')
    expect(cache.size).toBe(1)

    counted.reset()
    expect(await call(on, 'k1', 'b')).toEqual({ kind: 'FINGERPRINT_MISMATCH' })
    expect(counted.counts.claim).toBe(1)
    expect(runs).toBe(1)
    // The store's answer to the first body is its replay again (and kept again).
    expect(await call(on, 'k1')).toMatchObject({ kind: 'REPLAYED', value: { body: 'a' } })
    counted.reset()
    expect(await call(on, 'k1')).toMatchObject({ kind: 'REPLAYED', value: { body: 'a' } })
    expect(counted.counts).toEqual({})
  })

  it("never hands another principal's answer to the same key string", async () => {
    const cache = new ReplayCache()
    const on = executor(cache)
    await call(on, 'shared-key', 'a', 'alice')
    await call(on, 'shared-key', 'a', 'alice')
    expect(cache.size).toBe(1)

    const bob = await call(on, 'shared-key', 'a', 'bob')
    expect(bob).toMatchObject({ kind: 'EXECUTED', value: { run: 2, principal: 'bob' } })
    expect(await call(on, 'shared-key', 'a', 'bob')).toMatchObject({ kind: 'REPLAYED', value: { principal: 'bob' } })
    expect(await call(on, 'shared-key', 'a', 'alice')).toMatchObject({
      kind: 'REPLAYED',
      value: { principal: 'alice' },
    })
    expect(runs).toBe(2)
  })

  it('keeps nothing while the first execution runs (IN_PROGRESS goes to the store every time)', async () => {
    const cache = new ReplayCache()
    const on = executor(cache)
    const begun = await on.begin({ scope: { principal: 'alice', key: 'k1' }, fingerprint: 'f1:1:a' }, undefined)
    expect(begun.kind).toBe('RUN')
    counted.reset()
    expect(await call(on, 'k1')).toMatchObject({ kind: 'IN_PROGRESS' })
    expect(await call(on, 'k1')).toMatchObject({ kind: 'IN_PROGRESS' })
    expect(counted.counts.claim).toBe(2)
    expect(cache.size).toBe(0)
    if (begun.kind === 'RUN') await begun.finish({ ok: true, value: { run: 0 } })
  })

  it('ends an entry after maxAgeMs: the next replay goes to the store', async () => {
    const cache = new ReplayCache({ maxAgeMs: 300 })
    const on = executor(cache)
    await call(on, 'k1')
    await call(on, 'k1')
    counted.reset()
    await call(on, 'k1')
    expect(counted.counts).toEqual({})

    await sleep(450)
    expect(await call(on, 'k1')).toMatchObject({ kind: 'REPLAYED', value: { run: 1 } })
    expect(counted.counts.claim).toBe(1)
    expect(runs).toBe(1)
  })

  it("ends an entry at the record's replay window: past it the key is new again, as in the store", async () => {
    const cache = new ReplayCache({ maxAgeMs: 600_000 })
    const on = executor(cache, { replayWindowMs: 1_500 })
    await call(on, 'k1')
    expect(await call(on, 'k1')).toMatchObject({ kind: 'REPLAYED' })
    expect(cache.size).toBe(1)

    await sleep(1_800)
    counted.reset()
    expect(await call(on, 'k1')).toMatchObject({ kind: 'EXECUTED', value: { run: 2 } })
    expect(counted.counts.claim).toBe(1)
    expect(cache.size).toBe(0)
  })

  it('evicts the least recently used entry past maxEntries', async () => {
    const cache = new ReplayCache({ maxEntries: 2 })
    const on = executor(cache)
    for (const key of ['k1', 'k2', 'k3']) {
      await call(on, key)
      await call(on, key)
    }
    expect(cache.size).toBe(2)
    counted.reset()
    await call(on, 'k2')
    await call(on, 'k3')
    expect(counted.counts).toEqual({})
    expect(await call(on, 'k1')).toMatchObject({ kind: 'REPLAYED', value: { run: 1 } })
    expect(counted.counts.claim).toBe(1)
    expect(runs).toBe(3)
  })

  it('evicts past maxBytes, and keeps no answer larger than maxBytes', async () => {
    const big = 'x'.repeat(4_000)
    const cache = new ReplayCache({ maxBytes: 10_000 })
    const on = executor(cache)
    for (const key of ['k1', 'k2', 'k3']) {
      await call(on, key, big)
      await call(on, key, big)
    }
    expect(cache.size).toBe(2)
    expect(cache.bytes).toBeLessThanOrEqual(10_000)
    counted.reset()
    await call(on, 'k1', big)
    expect(counted.counts.claim).toBe(1)

    const tiny = new ReplayCache({ maxBytes: 1_000 })
    const other = executor(tiny)
    await call(other, 'k9', big)
    await call(other, 'k9', big)
    expect(tiny.size).toBe(0)
    expect(tiny.bytes).toBe(0)
  })

  it('looks records up under older secrets as without it', async () => {
    const cache = new ReplayCache()
    await call(executor(cache), 'k1')
    const rotated = executor(cache, { current: 2 })
    counted.reset()
    for (let i = 0; i < 3; i++) expect(await call(rotated, 'k1')).toMatchObject({ kind: 'REPLAYED', value: { run: 1 } })
    // Every replay read the record under secret 1, as it does without the cache.
    expect(counted.counts.inspect).toBe(3)
    expect(counted.counts.claim ?? 0).toBe(0)
    expect(runs).toBe(1)
  })

  it('is shared through execute() by passing one ReplayCache', async () => {
    const cache = new ReplayCache()
    const request = {
      store: counted.store,
      key: `${counted.store.keyPrefix}:idem:1:d1:op:${'0'.repeat(16)}`,
      operation: 'op',
      fingerprint: 'f1:a',
      codec: jsonCodec(),
      policy: resolvePolicy({ leaseMs: 5_000 }),
      replayCache: cache,
      action: () => ({ ok: true }),
    }
    await execute(request)
    await execute(request)
    counted.reset()
    expect(await execute(request)).toEqual({ kind: 'REPLAYED', value: { ok: true } })
    expect(counted.counts).toEqual({})
  })
})

describe('the replayCache option', () => {
  const base = { store: memoryStore(), operation: 'op', codec: jsonCodec(), policy: resolvePolicy({}) }
  afterAll(() => base.store.close())

  it.each([
    [{ maxEntries: 0 }, 'replayCache.maxEntries'],
    [{ maxBytes: -1 }, 'replayCache.maxBytes'],
    [{ maxAgeMs: 1.5 }, 'replayCache.maxAgeMs'],
    [{ maxAgeMs: 86_400_001 }, 'replayCache.maxAgeMs'],
    [{ maxItems: 10 }, 'replayCache.maxItems'],
    ['yes', 'replayCache'],
    [null, 'replayCache'],
    [[], 'replayCache'],
  ])('refuses %j naming %s', (value, name) => {
    expect(() => new Executor({ ...base, replayCache: value as never })).toThrow(
      expect.objectContaining({ code: ErrorCode.INVALID_OPTION, message: expect.stringContaining(`"${name}"`) }),
    )
  })

  it('is off by default, and true takes the default bounds', () => {
    expect(new Executor(base).replayCache).toBeUndefined()
    expect(new Executor({ ...base, replayCache: false }).replayCache).toBeUndefined()
    const cache = new Executor({ ...base, replayCache: true }).replayCache
    expect(cache).toMatchObject({ maxEntries: 1000, maxBytes: 8 * 1024 * 1024, maxAgeMs: 5000 })
    const mine = new ReplayCache({ maxEntries: 5 })
    expect(new Executor({ ...base, replayCache: mine }).replayCache).toBe(mine)
  })
})

describe('replayCache on idempotent()', () => {
  it('answers a later call with a kept result without a store call, and checks the option', async () => {
    const counted = countingStore(memoryStore())
    let runs = 0
    const options = {
      store: counted.store,
      secrets: { current: 1, keys: { 1: SECRET_1 } },
      operation: 'charge',
      key: 'id',
    }
    const charge = idempotent(async (order: { id: string; cents: number }) => ({ charged: order.cents, run: ++runs }), {
      ...options,
      replayCache: true,
    })
    expect(await charge({ id: 'o1', cents: 5 })).toEqual({ charged: 5, run: 1 })
    expect(await charge({ id: 'o1', cents: 5 })).toEqual({ charged: 5, run: 1 })
    counted.reset()
    expect(await charge({ id: 'o1', cents: 5 })).toEqual({ charged: 5, run: 1 })
    expect(counted.counts).toEqual({})
    await expect(charge({ id: 'o1', cents: 6 })).rejects.toMatchObject({ code: ErrorCode.KEY_REUSED })
    expect(counted.counts.claim).toBe(1)
    expect(() =>
      idempotent(async (order: { id: string }) => order.id, { ...options, replayCache: { maxAgeMs: 0 } }),
    ).toThrow(/"replayCache.maxAgeMs"/)
    await counted.store.close()
  })
})
