/**
 * docs/design.md §7 defect 4: the executor never renewed the lease during a long action, so a second
 * invocation could find it expired while the first was still running.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { gate, harness, sleep } from '../helpers/executor-harness.js'
import { STORES, type TestStore } from '../helpers/stores.js'

describe.each(STORES)('defect 4 on the %s store', (_name, create) => {
  let backing: TestStore

  beforeEach(async () => {
    backing = await create()
  })

  afterEach(async () => {
    await backing.teardown()
  })

  it('keeps the scope IN_PROGRESS, not expired, for an action four leases long', async () => {
    const h = harness(backing.store)
    const policy = h.policy({ leaseMs: 100, expiredExecution: 'takeover' })
    const hold = gate()
    const first = h.run({ policy, action: () => hold.promise.then(() => 'done') })

    const seen: string[] = []
    for (let i = 0; i < 4; i++) {
      await sleep(100)
      seen.push((await h.run({ policy })).kind)
    }
    hold.open()

    expect(seen).toEqual(['IN_PROGRESS', 'IN_PROGRESS', 'IN_PROGRESS', 'IN_PROGRESS'])
    expect(await first).toMatchObject({ kind: 'EXECUTED', attempt: 1 })
    expect(h.runs()).toBe(1)
  })
})
