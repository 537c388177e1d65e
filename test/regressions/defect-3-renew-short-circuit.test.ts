/**
 * docs/design.md §7 defect 3: renew of EXECUTING→EXECUTING short-circuited as "already" and never moved
 * the lease. Here renew is its own call that always writes a new leaseUntil.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { ClaimReply, TransitionReply } from '../../src/core/record.js'
import { sleep } from '../helpers/executor-harness.js'
import { claimRequest, STORES, type TestStore } from '../helpers/stores.js'

describe.each(STORES)('defect 3 on the %s store', (_name, create) => {
  let backing: TestStore

  beforeEach(async () => {
    backing = await create()
  })

  afterEach(async () => {
    await backing.teardown()
  })

  it('moves leaseUntil on every renew of an EXECUTING record', async () => {
    const times = { leaseMs: 1_000, replayWindowMs: 10_000, failureRetentionMs: 10_000 }
    const request = claimRequest(backing.store, times)
    const { key, owner } = request
    const claim = await backing.store.claim(request)
    if (claim.kind !== ClaimReply.ACQUIRED) throw new Error(claim.kind)
    const ref = { key, owner, attempt: claim.attempt, rev: claim.rev }
    const leases = [claim.leaseUntil]

    for (let i = 0; i < 3; i++) {
      await sleep(15)
      const renewed = await backing.store.renew(ref, times)
      if (renewed.kind !== TransitionReply.OK) throw new Error(renewed.kind)
      leases.push(renewed.leaseUntil)
    }

    for (let i = 1; i < leases.length; i++) expect(leases[i]).toBeGreaterThan(leases[i - 1] as number)
  })
})
