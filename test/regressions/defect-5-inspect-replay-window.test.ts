/**
 * docs/design.md §7 defect 5: inspect ignored the replay window that claim respected, giving two answers
 * for one record. Here both classify with one rule and the store's clock.
 */
import { randomBytes } from 'node:crypto'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { ClaimReply, InspectReply } from '../../src/core/record.js'
import { sleep } from '../helpers/executor-harness.js'
import { claimRequest, STORES, type TestStore } from '../helpers/stores.js'

describe.each(STORES)('defect 5 on the %s store', (_name, create) => {
  let backing: TestStore

  beforeEach(async () => {
    backing = await create()
  })

  afterEach(async () => {
    await backing.teardown()
  })

  it('answers ABSENT from inspect exactly when claim acquires afresh', async () => {
    const times = { leaseMs: 1_000, replayWindowMs: 100, failureRetentionMs: 1_000 }
    const base = claimRequest(backing.store, times)
    const key = base.key
    const claim = (owner: string) => backing.store.claim({ ...base, owner })
    const owner = randomBytes(32).toString('hex')
    const first = await claim(owner)
    if (first.kind !== ClaimReply.ACQUIRED) throw new Error(first.kind)
    await backing.store.complete({ key, owner, attempt: 1, rev: first.rev }, Buffer.from('old answer'), times)

    await sleep(180)
    const inspected = await backing.store.inspect(key, owner)
    const claimed = await claim(randomBytes(32).toString('hex'))

    expect(inspected).toEqual({ kind: InspectReply.ABSENT })
    expect(claimed).toMatchObject({ kind: ClaimReply.ACQUIRED, attempt: 1 })
  })
})
