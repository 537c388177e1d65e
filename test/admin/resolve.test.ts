/**
 * The operators' calls on every store, in process: `read()` gives the record as stored,
 * `replace()` is a compare-and-set that refuses a record changed since it was read, and
 * `resolveScope()` applies each resolution with its audit line.
 */
import diagnostics from 'node:diagnostics_channel'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { resolveScope } from '../../src/admin/index.js'
import { EVENT_CHANNEL } from '../../src/core/channels.js'
import { ErrorCode } from '../../src/core/errors.js'
import { ClaimReply, FailureKind, RecordState } from '../../src/core/record.js'
import { parseSecrets, scopeDigest } from '../../src/core/scope.js'
import type { IdempotencyStore } from '../../src/core/store.js'
import { operationCode, storeKey } from '../../src/core/store-key.js'
import { claimRequest, STORES, type TestStore } from '../helpers/stores.js'

const secrets = parseSecrets({ current: 1, keys: { 1: 'c'.repeat(32) } })
const OPERATION = 'POST /orders'

describe.each(STORES)('operators’ calls on the %s store', (_name, create) => {
  let backing: TestStore
  let store: IdempotencyStore

  beforeEach(async () => {
    backing = await create()
    store = backing.store
  })

  afterEach(async () => {
    await backing.teardown()
  })

  /** A scope's key as the layer makes it, and a record held in it (EXECUTING). */
  async function held(principal: string, key: string, leaseMs = 10_000) {
    const at = storeKey(
      store.keyPrefix,
      1,
      operationCode(OPERATION),
      scopeDigest(secrets, 1, { principal, key, operation: OPERATION }),
    )
    const request = claimRequest(store, { key: at, operation: OPERATION, leaseMs })
    const claim = await store.claim(request)
    if (claim.kind !== ClaimReply.ACQUIRED) throw new Error(claim.kind)
    return { at, ref: { key: at, owner: request.owner, attempt: claim.attempt, rev: claim.rev }, request }
  }

  it('replaces only the record as it was read', async () => {
    const { at, ref, request } = await held('alice', 'k-1')
    const first = await store.read?.(at)
    expect(first?.record).toMatchObject({ state: RecordState.EXECUTING, attempt: 1, op: OPERATION })
    expect(Math.abs((first?.now ?? 0) - Date.now())).toBeLessThan(5_000)
    // A renewal changes the lease: the record is no longer the one read.
    await new Promise((resolve) => setTimeout(resolve, 5))
    await store.renew(ref, request)
    const record = first?.record
    if (record === undefined) throw new Error('no record')
    expect(
      await store.replace?.(at, record, { ...record, state: RecordState.FAILED_RETRYABLE, rev: record.rev + 1 }),
    ).toBe(false)
    const again = (await store.read?.(at))?.record
    if (again === undefined) throw new Error('no record')
    expect(await store.replace?.(at, again, undefined)).toBe(true)
    expect((await store.read?.(at))?.record).toBeUndefined()
    expect(await store.replace?.(at, again, undefined)).toBe(false)
  })

  it('resolves an ABANDONED record to retryable, with an audit line and a channel event', async () => {
    const { ref, request } = await held('bob', 'k-2')
    await store.markFailed(ref, FailureKind.UNKNOWN, request)
    const published: unknown[] = []
    const listener = (message: unknown) => published.push(message)
    diagnostics.subscribe(EVENT_CHANNEL, listener)
    try {
      const audit = await resolveScope({
        store,
        secrets,
        principal: 'bob',
        key: 'k-2',
        operation: OPERATION,
        resolution: { as: 'retryable' },
        actor: 'oncall',
      })
      expect(audit).toMatchObject({ type: 'admin-resolve', from: 'ABANDONED', to: 'FAILED_RETRYABLE', actor: 'oncall' })
      expect(published).toContainEqual(expect.objectContaining({ type: 'admin-resolve', from: 'ABANDONED' }))
    } finally {
      diagnostics.unsubscribe(EVENT_CHANNEL, listener)
    }
    // The next claim takes the retryable record over: the handler runs again.
    expect((await store.claim({ ...request, owner: 'f'.repeat(64) })).kind).toBe(ClaimReply.TAKEN_OVER)
  })

  it('refuses a running execution without force, and takes it with force', async () => {
    await held('carol', 'k-3')
    const input = { store, secrets, principal: 'carol', key: 'k-3', operation: OPERATION }
    await expect(resolveScope({ ...input, resolution: { as: 'deleted' } })).rejects.toMatchObject({
      code: ErrorCode.RESOLVE_REFUSED,
    })
    expect(
      await resolveScope({ ...input, resolution: { as: 'deleted' }, force: true, reason: 'a test' }),
    ).toMatchObject({
      from: 'EXECUTING',
      to: 'deleted',
      forced: true,
    })
    expect(await resolveScope({ ...input, resolution: { as: 'deleted' } })).toBeUndefined()
  })
})
