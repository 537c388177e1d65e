/**
 * docs/design.md §7 defect 7: an indeterminate markFailed was never reconciled. Here the executor inspects
 * with its own token and re-sends until the record shows the failure.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { InspectReply } from '../../src/core/record.js'
import { harness } from '../helpers/executor-harness.js'
import { faultyStore } from '../helpers/faulty-store.js'
import { STORES, type TestStore } from '../helpers/stores.js'

describe.each(STORES)('defect 7 on the %s store', (_name, create) => {
  let backing: TestStore

  beforeEach(async () => {
    backing = await create()
  })

  afterEach(async () => {
    await backing.teardown()
  })

  it('reconciles a markFailed whose reply was lost and one that never arrived', async () => {
    const store = faultyStore(backing.store)
    const lost = harness(store)
    const dropped = harness(store)
    store.inject('markFailed', 'lost-reply', 'dropped')
    const fail = () => Promise.reject(new Error('effect unknown'))

    const first = await lost.run({ action: fail })
    const second = await dropped.run({ action: fail })

    expect(first).toMatchObject({ kind: 'FAILED', recorded: true })
    expect(second).toMatchObject({ kind: 'FAILED', recorded: true })
    expect(store.applied.markFailed).toBe(2)
    expect(await backing.store.inspect(lost.key, '0'.repeat(64))).toMatchObject({ kind: InspectReply.ABANDONED })
    expect(await backing.store.inspect(dropped.key, '0'.repeat(64))).toMatchObject({ kind: InspectReply.ABANDONED })
  })
})
