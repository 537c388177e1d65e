/**
 * The shared poll of waiting duplicates (`inFlightWaitMs`) bounds its inspect by the waiters'
 * `storeCallTimeoutMs`, not by the default bound: a poll whose reply never comes stops holding
 * the watch once the route's own bound has passed, so the completion after it is seen in time.
 */
import { afterEach, describe, expect, it } from 'vitest'
import type { IdempotencyStore, InspectResult } from '../../src/core/store.js'
import { harness, sleep } from '../helpers/executor-harness.js'
import { createMemoryStore, type TestStore } from '../helpers/stores.js'

/** The store, with its first `inspect` never answered (a reply lost without a client timeout). */
function firstInspectUnanswered(inner: IdempotencyStore): IdempotencyStore {
  let inspects = 0
  return new Proxy(inner, {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver)
      if (name !== 'inspect') return typeof value === 'function' ? value.bind(target) : value
      return (key: string, owner: string): Promise<InspectResult> =>
        inspects++ === 0 ? new Promise<InspectResult>(() => {}) : target.inspect(key, owner)
    },
  })
}

describe('the shared poll of waiting duplicates', () => {
  let backing: TestStore | undefined

  afterEach(async () => {
    await backing?.teardown()
    backing = undefined
  })

  it('bounds its inspect by the route storeCallTimeoutMs, so a lost poll reply does not outlast the wait', async () => {
    backing = await createMemoryStore()
    const h = harness(firstInspectUnanswered(backing.store))
    const first = h.run({ action: () => sleep(300).then(() => ({ done: true })) })
    await sleep(20)
    // The poll's first inspect hangs: bounded at 100 ms, the completion at ~300 ms is seen;
    // bounded at the default 2 s, the wait (1.2 s) ends first and answers IN_PROGRESS.
    const waiter = await h.run({ inFlightWaitMs: 1_200, storeCallTimeoutMs: 100 })
    expect((await first).kind).toBe('EXECUTED')
    expect(waiter).toEqual({ kind: 'REPLAYED', value: { done: true } })
    expect(h.runs()).toBe(1)
  })
})
