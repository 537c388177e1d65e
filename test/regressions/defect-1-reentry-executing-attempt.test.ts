/**
 * docs/design.md §7 defect 1: re-entry with a retained attempt whose record was already EXECUTING ran the
 * action again. Here an owner token belongs to one invocation only, and a REPLAYED_ACQUIRE is
 * honoured only by the invocation that has not run its action yet.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { ClaimReply, RecordState } from '../../src/core/record.js'
import { gate, harness } from '../helpers/executor-harness.js'
import { faultyStore } from '../helpers/faulty-store.js'
import { claimRequest, STORES, type TestStore } from '../helpers/stores.js'

describe.each(STORES)('defect 1 on the %s store', (_name, create) => {
  let backing: TestStore

  beforeEach(async () => {
    backing = await create()
  })

  afterEach(async () => {
    await backing.teardown()
  })

  it('answers a re-sent claim of an EXECUTING record with REPLAYED_ACQUIRE and changes nothing', async () => {
    const request = claimRequest(backing.store)
    await backing.store.claim(request)

    const again = await backing.store.claim(request)

    expect(again).toMatchObject({ kind: ClaimReply.REPLAYED_ACQUIRE, state: RecordState.EXECUTING, attempt: 1, rev: 1 })
  })

  it('runs the action once when every claim reply of the invocation is lost', async () => {
    const store = faultyStore(backing.store)
    store.inject('claim', 'lost-reply', 'lost-reply', 'lost-reply')
    store.inject('inspect', 'dropped', 'dropped')
    const h = harness(store)

    const result = await h.run()

    expect(result.kind).toBe('EXECUTED')
    expect(h.runs()).toBe(1)
  })

  it('never lets two invocations with identical inputs both run', async () => {
    const h = harness(backing.store)
    // The action is held open until the other invocation has answered.
    const hold = gate()
    const run = () => h.run({ action: () => hold.promise.then(() => 'done') }).finally(() => hold.open())

    const [a, b] = await Promise.all([run(), run()])

    expect(h.runs()).toBe(1)
    expect([a.kind, b.kind].sort()).toEqual(['EXECUTED', 'IN_PROGRESS'])
  })
})
