/**
 * docs/design.md §7 defect 2: an inspection seeing EXECUTING by the same operation was taken as permission
 * to run. Here only an EXECUTING record owned by this invocation's own token resumes it.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { gate, harness, sleep } from '../helpers/executor-harness.js'
import { faultyStore } from '../helpers/faulty-store.js'
import { STORES, type TestStore } from '../helpers/stores.js'

describe.each(STORES)('defect 2 on the %s store', (_name, create) => {
  let backing: TestStore

  beforeEach(async () => {
    backing = await create()
  })

  afterEach(async () => {
    await backing.teardown()
  })

  it('does not run when an undecided claim finds the same operation EXECUTING under another owner', async () => {
    const store = faultyStore(backing.store)
    const h = harness(store)
    const hold = gate()
    const first = h.run({ action: () => hold.promise.then(() => 'first') })
    await sleep(20)
    store.inject('claim', 'dropped')

    const second = await h.run()
    hold.open()
    await first

    expect(second.kind).toBe('IN_PROGRESS')
    expect(store.applied.inspect).toBeGreaterThanOrEqual(1)
    expect(h.runs()).toBe(1)
  })
})
