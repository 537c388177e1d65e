/**
 * What only the memory store has: its options, its single clock, the sweep that deletes
 * expired records, close(), and replies that are copies. The shared semantics are in the
 * contract suite (test/contract/memory.test.ts).
 */
import { afterEach, describe, expect, it, vi } from 'vitest'
import { newOwnerToken } from '../../../src/core/attempt.js'
import { StoreUnavailableError } from '../../../src/core/errors.js'
import { ClaimReply, FailureKind, InspectReply, RecordState, TransitionReply } from '../../../src/core/record.js'
import type { ClaimRequest, OwnerRef, RecordTimes } from '../../../src/core/store.js'
import { type MemoryStore, memoryStore } from '../../../src/stores/memory/index.js'
import { claimRequest } from '../../../src/testing/index.js'

const T0 = 1_700_000_000_000
const TIMES: RecordTimes = { leaseMs: 1_000, replayWindowMs: 5_000, failureRetentionMs: 3_000 }

/** A store on a hand-moved clock. */
function clocked(options: { sweepIntervalMs?: number } = {}) {
  const clock = { now: T0 }
  const store = memoryStore({ clock: () => clock.now, ...options })
  return { store, clock }
}

function request(overrides: Partial<ClaimRequest> = {}): ClaimRequest {
  return claimRequest('idemkit:idem:1:d1:op1:abc', TIMES, overrides)
}

/** Claims with start and returns the holder's reference. */
async function hold(store: MemoryStore, overrides: Partial<ClaimRequest> = {}): Promise<OwnerRef> {
  const claim = request(overrides)
  const result = await store.claim(claim)
  if (result.kind !== ClaimReply.ACQUIRED) throw new Error(`expected ACQUIRED, got ${result.kind}`)
  return { key: claim.key, owner: claim.owner, attempt: result.attempt, rev: result.rev }
}

afterEach(() => {
  vi.useRealTimers()
  vi.restoreAllMocks()
})

describe('memoryStore options', () => {
  it('uses the idemkit prefix and the memory name when given no options', async () => {
    const store = memoryStore()

    expect(store.keyPrefix).toBe('idemkit')
    expect(store.name).toBe('memory')
    await store.close()
  })

  it('keeps the given key prefix and treats undefined values as defaults', async () => {
    const custom = memoryStore({ keyPrefix: 'shop' })
    const defaults = memoryStore({ keyPrefix: undefined, sweepIntervalMs: undefined, clock: undefined })

    expect(custom.keyPrefix).toBe('shop')
    expect(defaults.keyPrefix).toBe('idemkit')
    await custom.close()
    await defaults.close()
  })

  it.each([
    ['keyPrefix', ''],
    ['keyPrefix', 'has space'],
    ['keyPrefix', 'tab\there'],
    ['keyPrefix', 42],
    ['sweepIntervalMs', 0],
    ['sweepIntervalMs', -5],
    ['sweepIntervalMs', 10.5],
    ['sweepIntervalMs', 2 ** 31],
    ['sweepIntervalMs', '1000'],
    ['clock', 1_700_000_000_000],
    ['clock', 'Date.now'],
  ])('rejects %s = %j with a coded error naming the option', (name, value) => {
    expect(() => memoryStore({ [name]: value })).toThrow(
      expect.objectContaining({ code: 'ERR_IDEM_INVALID_OPTION', message: expect.stringContaining(`"${name}"`) }),
    )
  })

  it('rejects an unknown option key when its name is mistyped', () => {
    const options = { keyprefix: 'shop' } as unknown as Parameters<typeof memoryStore>[0]

    expect(() => memoryStore(options)).toThrow(
      expect.objectContaining({ code: 'ERR_IDEM_INVALID_OPTION', message: expect.stringContaining('"keyprefix"') }),
    )
  })

  it('rejects options when they are not an object', () => {
    const options = null as unknown as Parameters<typeof memoryStore>[0]

    expect(() => memoryStore(options)).toThrow(expect.objectContaining({ code: 'ERR_IDEM_INVALID_OPTION' }))
  })

  it('starts a sweep timer that does not keep the process alive when created', async () => {
    const setIntervalSpy = vi.spyOn(globalThis, 'setInterval')

    const store = memoryStore({ sweepIntervalMs: 12_345 })

    expect(setIntervalSpy).toHaveBeenCalledTimes(1)
    expect(setIntervalSpy.mock.calls[0]?.[1]).toBe(12_345)
    const timer = setIntervalSpy.mock.results[0]?.value as NodeJS.Timeout
    expect(timer.hasRef()).toBe(false)
    await store.close()
  })
})

describe('memoryStore clock', () => {
  it('sets the lease from the clock when it claims', async () => {
    const { store, clock } = clocked()

    const claimed = await store.claim(request({ start: false }))
    clock.now += 10
    const inspected = await store.inspect(request().key, newOwnerToken())

    expect(claimed).toMatchObject({ kind: ClaimReply.ACQUIRED, leaseUntil: T0 + 1_000 })
    expect(inspected).toMatchObject({ kind: InspectReply.CLAIMED, leaseUntil: T0 + 1_000, leaseRemainingMs: 990 })
    await store.close()
  })

  it('moves the lease to the clock plus leaseMs when it renews', async () => {
    const { store, clock } = clocked()
    const ref = await hold(store)
    clock.now += 700

    const renewed = await store.renew(ref, TIMES)

    expect(renewed).toEqual({ kind: TransitionReply.OK, leaseUntil: T0 + 700 + 1_000 })
    await store.close()
  })

  it('treats a lease as run out when the clock reaches leaseUntil exactly', async () => {
    const { store, clock } = clocked()
    await hold(store, { start: false })

    clock.now = T0 + 999
    const before = await store.claim(request({ start: false }))
    clock.now = T0 + 1_000
    const at = await store.claim(request({ start: false }))

    expect(before).toEqual({ kind: ClaimReply.IN_PROGRESS, retryAfterMs: 1 })
    expect(at).toMatchObject({ kind: ClaimReply.TAKEN_OVER, attempt: 2, rev: 2 })
    await store.close()
  })

  it('replays until the clock reaches replayUntil and then acquires afresh', async () => {
    const { store, clock } = clocked()
    const ref = await hold(store)
    await store.complete(ref, Buffer.from('stored'), TIMES)

    clock.now = T0 + 4_999
    const inside = await store.claim(request())
    const inspectedInside = await store.inspect(ref.key, ref.owner)
    clock.now = T0 + 5_000
    const inspectedAfter = await store.inspect(ref.key, ref.owner)
    const after = await store.claim(request())

    expect(inside).toMatchObject({
      kind: ClaimReply.COMPLETED_REPLAY,
      response: Buffer.from('stored'),
      replayUntil: T0 + 5_000,
    })
    expect(inspectedInside).toMatchObject({ kind: InspectReply.COMPLETED, response: Buffer.from('stored') })
    expect(inspectedAfter).toEqual({ kind: InspectReply.ABSENT })
    expect(after).toMatchObject({ kind: ClaimReply.ACQUIRED, attempt: 1, rev: 1 })
    await store.close()
  })

  it('keeps an EXECUTING record for the failure retention after its lease when it is not renewed', async () => {
    const { store, clock } = clocked()
    await hold(store)

    clock.now = T0 + 1_000 + 3_000 - 1
    const kept = await store.claim(request())
    clock.now = T0 + 1_000 + 3_000
    const gone = await store.claim(request())

    expect(kept).toEqual({ kind: ClaimReply.RECOVERY_REQUIRED, reason: 'EXPIRED_EXECUTION' })
    expect(gone).toMatchObject({ kind: ClaimReply.ACQUIRED, attempt: 1 })
    await store.close()
  })

  it('answers NOT_FOUND to a transition when the record has outlived its retention', async () => {
    const { store, clock } = clocked()
    const ref = await hold(store)
    await store.markFailed(ref, FailureKind.RETRYABLE, TIMES)

    clock.now = T0 + 3_000

    expect(await store.markFailed(ref, FailureKind.RETRYABLE, TIMES)).toEqual({ kind: TransitionReply.NOT_FOUND })
    expect(await store.inspect(ref.key, ref.owner)).toEqual({ kind: InspectReply.ABSENT })
    await store.close()
  })

  it('refuses the call and writes nothing when the clock returns something other than integer milliseconds', async () => {
    let reading = Number.NaN
    const store = memoryStore({ clock: () => reading })

    await expect(store.claim(request())).rejects.toMatchObject({ code: 'ERR_IDEM_INVALID_OPTION' })
    reading = 1.5
    await expect(store.claim(request())).rejects.toMatchObject({ code: 'ERR_IDEM_INVALID_OPTION' })
    expect(store.size).toBe(0)
    await store.close()
  })
})

describe('memoryStore sweep', () => {
  it('deletes only the records whose lifetime is over when sweep() runs', async () => {
    const { store, clock } = clocked()
    const completed = await hold(store, { key: 'k:completed' })
    await store.complete(completed, Buffer.from('r'), { ...TIMES, replayWindowMs: 100 })
    const failed = await hold(store, { key: 'k:failed' })
    await store.markFailed(failed, FailureKind.UNKNOWN, { ...TIMES, failureRetentionMs: 200 })
    await hold(store, { key: 'k:running', leaseMs: 10_000 })

    clock.now = T0 + 200
    const deleted = store.sweep()

    expect(deleted).toBe(2)
    expect(store.size).toBe(1)
    expect(await store.inspect('k:running', newOwnerToken())).toMatchObject({ kind: InspectReply.EXECUTING })
    await store.close()
  })

  it('keeps an EXECUTING record whose lease ran out until lease plus retention', async () => {
    const { store, clock } = clocked()
    await hold(store)

    clock.now = T0 + 1_000
    const atLeaseEnd = store.sweep()
    clock.now = T0 + 4_000
    const atLifetimeEnd = store.sweep()

    expect(atLeaseEnd).toBe(0)
    expect(atLifetimeEnd).toBe(1)
    expect(store.size).toBe(0)
    await store.close()
  })

  it('deletes expired records on its timer when the interval passes', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] })
    const { store, clock } = clocked({ sweepIntervalMs: 50 })
    const ref = await hold(store)
    await store.complete(ref, Buffer.from('r'), { ...TIMES, replayWindowMs: 10 })
    clock.now = T0 + 10

    expect(store.size).toBe(1)
    vi.advanceTimersByTime(50)

    expect(store.size).toBe(0)
    await store.close()
  })

  it('keeps its timer running when the clock throws during a timed sweep', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] })
    const store = memoryStore({
      sweepIntervalMs: 10,
      clock: () => {
        throw new Error('clock fault')
      },
    })

    expect(() => vi.advanceTimersByTime(30)).not.toThrow()
    expect(vi.getTimerCount()).toBe(1)
    await expect(store.inspect('k', newOwnerToken())).rejects.toThrow('clock fault')
    await store.close()
  })

  it('deletes a CLAIMED record at once when it is released', async () => {
    const { store } = clocked()
    const ref = await hold(store, { start: false })

    expect(await store.release(ref)).toEqual({ kind: TransitionReply.OK, rev: 0 })
    expect(store.size).toBe(0)
    await store.close()
  })
})

describe('memoryStore close', () => {
  it('stops the sweep timer when it closes', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] })
    const store = memoryStore({ sweepIntervalMs: 10 })
    expect(vi.getTimerCount()).toBe(1)

    await store.close()

    expect(vi.getTimerCount()).toBe(0)
  })

  it('rejects every call with StoreUnavailableError when the store is closed', async () => {
    const { store } = clocked()
    const ref = await hold(store)
    await store.close()

    const calls = [
      () => store.claim(request()),
      () => store.start(ref, TIMES),
      () => store.complete(ref, Buffer.from('x'), TIMES),
      () => store.markFailed(ref, FailureKind.RETRYABLE, TIMES),
      () => store.release(ref),
      () => store.renew(ref, TIMES),
      () => store.inspect(ref.key, ref.owner),
    ]

    for (const call of calls) {
      await expect(call()).rejects.toBeInstanceOf(StoreUnavailableError)
    }
    await expect(store.claim(request())).rejects.toMatchObject({ code: 'ERR_IDEM_STORE_UNAVAILABLE' })
    expect(() => store.sweep()).toThrow(StoreUnavailableError)
  })

  it('drops its records and resolves again when closed twice', async () => {
    const { store } = clocked()
    await hold(store)

    await store.close()
    await store.close()

    expect(store.size).toBe(0)
  })
})

describe('memoryStore replies', () => {
  it('returns copies when a caller mutates a claim or inspect reply', async () => {
    const { store } = clocked()
    const ref = await hold(store)
    const inspected = (await store.inspect(ref.key, ref.owner)) as unknown as Record<string, unknown>
    const replayed = (await store.claim(request({ owner: ref.owner }))) as unknown as Record<string, unknown>

    inspected.rev = 99
    inspected.leaseUntil = 0
    replayed.attempt = 7
    replayed.state = RecordState.COMPLETED

    expect(await store.inspect(ref.key, ref.owner)).toMatchObject({
      kind: InspectReply.EXECUTING,
      rev: 1,
      attempt: 1,
      leaseUntil: T0 + 1_000,
    })
    await store.close()
  })

  it('returns copies when a caller mutates a completed record\u2019s replies', async () => {
    const { store } = clocked()
    const ref = await hold(store)
    await store.complete(ref, Buffer.from('original'), TIMES)
    const first = (await store.claim(request())) as unknown as Record<string, unknown>
    const seen = (await store.inspect(ref.key, ref.owner)) as unknown as Record<string, unknown>

    first.response = 'tampered'
    first.replayUntil = 0
    seen.response = 'tampered'
    seen.codec = 'other'

    expect(await store.claim(request())).toMatchObject({
      kind: ClaimReply.COMPLETED_REPLAY,
      response: Buffer.from('original'),
      codec: 'json-1',
      replayUntil: T0 + 5_000,
    })
    await store.close()
  })

  it('keeps what was claimed when the caller mutates its request afterwards', async () => {
    const { store } = clocked()
    const claim = { ...request(), legacyFingerprints: ['fp-old'] }
    await store.claim(claim)

    const mutable = claim as { -readonly [K in keyof typeof claim]: (typeof claim)[K] }
    mutable.fingerprint = 'fp-changed'
    mutable.operation = 'DELETE /everything'

    expect(await store.inspect(claim.key, claim.owner)).toMatchObject({
      fingerprint: 'fp-a',
      operation: 'POST /orders',
    })
    await store.close()
  })
})

describe('memoryStore arguments', () => {
  const bad: readonly [string, Partial<Record<keyof ClaimRequest, unknown>>][] = [
    ['an empty key', { key: '' }],
    ['an uppercase owner token', { owner: 'A'.repeat(64) }],
    ['a short owner token', { owner: 'ab' }],
    ['an empty fingerprint', { fingerprint: '' }],
    ['an empty operation', { operation: '' }],
    ['a missing codec', { codec: undefined }],
    ['an empty policy', { policy: '' }],
    ['a start that is not a boolean', { start: 'yes' }],
    ['an unknown expiredExecution', { expiredExecution: 'retry' }],
    ['a fractional lease', { leaseMs: 1.5 }],
    ['a negative retention', { failureRetentionMs: -1 }],
    ['a lease past 15 digits', { leaseMs: 1e15 }],
    ['legacy fingerprints that are not an array', { legacyFingerprints: 'fp-a' }],
    ['an empty legacy fingerprint', { legacyFingerprints: [''] }],
  ]

  it.each(bad)('rejects a claim with %s before writing anything', async (_name, overrides) => {
    const { store } = clocked()

    const call = store.claim(request(overrides as Partial<ClaimRequest>))

    await expect(call).rejects.toMatchObject({ code: 'ERR_IDEM_INVALID_ARGUMENT' })
    expect(store.size).toBe(0)
    await store.close()
  })

  it('rejects a malformed claim and leaves a record that could be taken over unchanged', async () => {
    const { store, clock } = clocked()
    await hold(store, { start: false })
    clock.now = T0 + 1_000
    const before = await store.inspect(request().key, newOwnerToken())

    const call = store.claim(request({ expiredExecution: 'later' as ClaimRequest['expiredExecution'] }))

    await expect(call).rejects.toMatchObject({ code: 'ERR_IDEM_INVALID_ARGUMENT' })
    expect(await store.inspect(request().key, newOwnerToken())).toEqual(before)
  })

  it('rejects malformed transitions before changing the record', async () => {
    const { store } = clocked()
    const ref = await hold(store)
    const kind = 'maybe' as FailureKind
    const response = 'x' as unknown as Buffer

    await expect(store.complete({ ...ref, rev: 0 }, Buffer.from('x'), TIMES)).rejects.toMatchObject({
      code: 'ERR_IDEM_INVALID_ARGUMENT',
    })
    await expect(store.complete({ ...ref, attempt: 1.5 }, Buffer.from('x'), TIMES)).rejects.toMatchObject({
      code: 'ERR_IDEM_INVALID_ARGUMENT',
    })
    await expect(store.complete(ref, response, TIMES)).rejects.toMatchObject({ code: 'ERR_IDEM_INVALID_ARGUMENT' })
    await expect(store.complete(ref, Buffer.from('x'), { ...TIMES, replayWindowMs: 0 })).rejects.toMatchObject({
      code: 'ERR_IDEM_INVALID_ARGUMENT',
    })
    await expect(store.markFailed(ref, kind, TIMES)).rejects.toMatchObject({ code: 'ERR_IDEM_INVALID_ARGUMENT' })
    await expect(store.renew(ref, { ...TIMES, leaseMs: -1 })).rejects.toMatchObject({
      code: 'ERR_IDEM_INVALID_ARGUMENT',
    })
    await expect(store.release({ ...ref, owner: 'x' })).rejects.toMatchObject({ code: 'ERR_IDEM_INVALID_ARGUMENT' })
    await expect(store.inspect('', ref.owner)).rejects.toMatchObject({ code: 'ERR_IDEM_INVALID_ARGUMENT' })
    expect(await store.inspect(ref.key, ref.owner)).toMatchObject({ kind: InspectReply.EXECUTING, rev: 1 })
    await store.close()
  })

  it('accepts an empty response when it completes, as the Redis store does', async () => {
    const { store } = clocked()
    const ref = await hold(store)

    expect(await store.complete(ref, Buffer.from(''), TIMES)).toEqual({ kind: TransitionReply.OK, rev: 2 })
    expect(await store.claim(request())).toMatchObject({ kind: ClaimReply.COMPLETED_REPLAY, response: Buffer.from('') })
    await store.close()
  })

  it('ignores the rev when it renews, as the Redis store does', async () => {
    const { store } = clocked()
    const ref = await hold(store)

    const renewed = await store.renew({ ...ref, rev: 0 }, TIMES)

    expect(renewed.kind).toBe(TransitionReply.OK)
    expect(await store.inspect(ref.key, ref.owner)).toMatchObject({ rev: 1 })
    await store.close()
  })
})
