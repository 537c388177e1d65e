/**
 * The store contract (docs/design.md §3 and §6), for vitest: every store this package ships
 * passes it unchanged, and a store of your own proves itself with the same suite.
 * Short lease and window tests wait on real time: a store must use its own clock, never ours.
 */
import { randomBytes } from 'node:crypto'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { newOwnerToken } from '../core/attempt.js'
import { ClaimReply, FailureKind, InspectReply, RecordState, TransitionReply } from '../core/record.js'
import type { ClaimRequest, ClaimResult, IdempotencyStore, OwnerRef, RecordTimes } from '../core/store.js'
import { storeFront } from '../core/store-front.js'

/** A store under test with its own teardown (stop a server, drop a table), when `close()` is not enough. */
export interface StoreHarness {
  readonly store: IdempotencyStore
  teardown(): Promise<void>
}

/** Settings of the suite. */
export interface StoreContractOptions {
  /** Named in the suite's title, `store contract: <name>`. @default 'store' */
  readonly name?: string
}

const LONG: RecordTimes = { leaseMs: 30_000, replayWindowMs: 60_000, failureRetentionMs: 60_000 }
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
const token = () => randomBytes(32).toString('hex')

/**
 * A claim request as the suite sends it: a new owner token, fingerprint `fp-a`, operation
 * `POST /orders`, codec `json-1`, policy `1`, with start, `expiredExecution: 'recover'`, and the
 * given times; `overrides` replace any of these. For a store's own tests beside the suite.
 */
export function claimRequest(key: string, times: RecordTimes, overrides: Partial<ClaimRequest> = {}): ClaimRequest {
  return {
    key,
    owner: newOwnerToken(),
    fingerprint: 'fp-a',
    operation: 'POST /orders',
    codec: 'json-1',
    policy: '1',
    start: true,
    expiredExecution: 'recover',
    ...times,
    ...overrides,
  }
}

/**
 * Registers the contract suite (a vitest `describe` with about 70 cases) for one store.
 * `makeStore` runs before every test and returns a fresh store, or a harness with its own
 * teardown; a bare store is closed (`store.close()`) after each test. Records of one test must
 * not be seen by the next: use a new key prefix, or empty the store, in `makeStore`.
 */
export function describeStoreContract(
  makeStore: () => IdempotencyStore | StoreHarness | Promise<IdempotencyStore | StoreHarness>,
  options: StoreContractOptions = {},
): void {
  const setup = async (): Promise<StoreHarness> => {
    const made = await makeStore()
    if ('teardown' in made && typeof made.teardown === 'function') return made
    const store = made as IdempotencyStore
    return { store, teardown: () => store.close() }
  }
  describe(`store contract: ${options.name ?? 'store'}`, () => {
    let harness: StoreHarness
    let store: IdempotencyStore
    let key: string

    beforeEach(async () => {
      harness = await setup()
      // As the layer calls it: through the front, which checks every call's arguments once.
      store = storeFront(harness.store)
      key = `${store.keyPrefix}:idem:1:d1:op1:${randomBytes(32).toString('hex')}`
    })

    afterEach(async () => {
      await harness.teardown()
    })

    function request(overrides: Partial<ClaimRequest> = {}): ClaimRequest {
      return claimRequest(key, LONG, overrides)
    }

    async function held(overrides: Partial<ClaimRequest> = {}): Promise<OwnerRef & { request: ClaimRequest }> {
      const claim = request(overrides)
      const result = await store.claim(claim)
      if (result.kind !== ClaimReply.ACQUIRED && result.kind !== ClaimReply.TAKEN_OVER) {
        throw new Error(`expected to hold the record, got ${result.kind}`)
      }
      return { key: claim.key, owner: claim.owner, attempt: result.attempt, rev: result.rev, request: claim }
    }

    async function completed(response = '{"ok":true}', overrides: Partial<ClaimRequest> = {}) {
      const ref = await held(overrides)
      const times = { ...LONG, ...overrides }
      expect(await store.complete(ref, Buffer.from(response, 'utf8'), times)).toEqual({
        kind: TransitionReply.OK,
        rev: ref.rev + 1,
      })
      return ref
    }

    async function failed(kind: FailureKind, overrides: Partial<ClaimRequest> = {}) {
      const ref = await held(overrides)
      const times = { ...LONG, ...overrides }
      expect(await store.markFailed(ref, kind, times)).toEqual({ kind: TransitionReply.OK, rev: ref.rev + 1 })
      return ref
    }

    /** The record as another caller sees it, without the lease countdown (it moves with time). */
    async function snapshot() {
      const found = await store.inspect(key, token())
      if ('leaseRemainingMs' in found) {
        const { leaseRemainingMs: _moving, ...rest } = found
        return rest
      }
      return found
    }

    describe('claim step 1: absent or expired', () => {
      it('acquires a new record in EXECUTING when the claim asks to start', async () => {
        const result = await store.claim(request())

        expect(result).toMatchObject({ kind: ClaimReply.ACQUIRED, state: RecordState.EXECUTING, attempt: 1, rev: 1 })
      })

      it('acquires a new record in CLAIMED when the claim does not start', async () => {
        const result = await store.claim(request({ start: false }))

        expect(result).toMatchObject({ kind: ClaimReply.ACQUIRED, state: RecordState.CLAIMED, attempt: 1, rev: 1 })
      })

      it('sets the lease from the store clock when it acquires', async () => {
        const before = Date.now()

        const result = await store.claim(request({ leaseMs: 5_000 }))

        if (result.kind !== ClaimReply.ACQUIRED) throw new Error(result.kind)
        expect(result.leaseUntil).toBeGreaterThanOrEqual(before + 5_000 - 1_000)
        expect(result.leaseUntil).toBeLessThanOrEqual(Date.now() + 5_000 + 1_000)
      })

      it('acquires afresh with attempt 1 when a COMPLETED record is past its replay window', async () => {
        await completed('old', { replayWindowMs: 60 })
        await sleep(120)

        const result = await store.claim(request())

        expect(result).toMatchObject({ kind: ClaimReply.ACQUIRED, attempt: 1, rev: 1 })
      })

      it('acquires afresh when a FAILED_RETRYABLE record is past the failure retention', async () => {
        await failed(FailureKind.RETRYABLE, { failureRetentionMs: 60 })
        await sleep(120)

        expect(await store.claim(request())).toMatchObject({ kind: ClaimReply.ACQUIRED, attempt: 1 })
      })

      it('acquires afresh when an ABANDONED record is past the failure retention', async () => {
        await failed(FailureKind.UNKNOWN, { failureRetentionMs: 60 })
        await sleep(120)

        expect(await store.claim(request())).toMatchObject({ kind: ClaimReply.ACQUIRED, attempt: 1 })
      })

      it('acquires afresh when an EXECUTING record is past its lease plus the failure retention', async () => {
        await held({ leaseMs: 40, failureRetentionMs: 40 })
        await sleep(140)

        expect(await store.claim(request())).toMatchObject({ kind: ClaimReply.ACQUIRED, attempt: 1 })
      })
    })

    describe('claim step 2: fingerprint mismatch before any mutation', () => {
      const states = [
        ['CLAIMED', async () => held({ start: false })],
        ['EXECUTING', async () => held()],
        ['COMPLETED', async () => completed()],
        ['FAILED_RETRYABLE', async () => failed(FailureKind.RETRYABLE)],
        ['ABANDONED', async () => failed(FailureKind.UNKNOWN)],
      ] as const

      for (const [state, arrange] of states) {
        it(`answers FINGERPRINT_MISMATCH and changes nothing when the record is ${state}`, async () => {
          await arrange()
          const before = await snapshot()

          const result = await store.claim(request({ fingerprint: 'fp-b' }))

          expect(result).toEqual({ kind: ClaimReply.FINGERPRINT_MISMATCH })
          expect(await snapshot()).toEqual(before)
        })
      }

      it('answers FINGERPRINT_MISMATCH even to the owner of the record', async () => {
        const ref = await held()

        const result = await store.claim(request({ owner: ref.owner, fingerprint: 'fp-b' }))

        expect(result).toEqual({ kind: ClaimReply.FINGERPRINT_MISMATCH })
      })

      it('answers FINGERPRINT_MISMATCH when the lease has run out', async () => {
        await held({ start: false, leaseMs: 30 })
        await sleep(80)

        expect(await store.claim(request({ fingerprint: 'fp-b' }))).toEqual({ kind: ClaimReply.FINGERPRINT_MISMATCH })
      })

      it('accepts a stored fingerprint that equals a legacy fingerprint of the request', async () => {
        await completed('{"v":1}', { fingerprint: 'fp-v1' })

        const result = await store.claim(request({ fingerprint: 'fp-v2', legacyFingerprints: ['fp-v0', 'fp-v1'] }))

        expect(result).toMatchObject({ kind: ClaimReply.COMPLETED_REPLAY, response: Buffer.from('{"v":1}') })
      })
    })

    describe('claim step 3: completed replay', () => {
      it('replays the stored response, codec and policy when the record is COMPLETED', async () => {
        await completed('{"id":42}', { codec: 'json-7', policy: 'p3' })

        const result = await store.claim(request({ codec: 'json-8', policy: 'p4' }))

        expect(result).toMatchObject({
          kind: ClaimReply.COMPLETED_REPLAY,
          response: Buffer.from('{"id":42}'),
          codec: 'json-7',
          policy: 'p3',
        })
      })

      it('keeps the response byte for byte when it holds unicode, control characters and 200 KiB', async () => {
        const response = `héllo ✓ \u0000\u0001\r\n"quoted" ${'x'.repeat(200 * 1024)}`
        await completed(response)

        const result = await store.claim(request())

        expect(
          result.kind === ClaimReply.COMPLETED_REPLAY && result.response.equals(Buffer.from(response, 'utf8')),
        ).toBe(true)
      })

      it('replays with a replayUntil one replay window after completion', async () => {
        const before = Date.now()
        await completed('r', { replayWindowMs: 10_000 })

        const result = await store.claim(request())

        if (result.kind !== ClaimReply.COMPLETED_REPLAY) throw new Error(result.kind)
        expect(result.replayUntil).toBeGreaterThanOrEqual(before + 10_000 - 1_000)
        expect(result.replayUntil).toBeLessThanOrEqual(Date.now() + 10_000 + 1_000)
      })
    })

    describe('claim step 4: abandoned', () => {
      it('answers RECOVERY_REQUIRED when the record is ABANDONED, even to its own owner', async () => {
        const ref = await failed(FailureKind.UNKNOWN)

        expect(await store.claim(request())).toEqual({ kind: ClaimReply.RECOVERY_REQUIRED, reason: 'ABANDONED' })
        expect(await store.claim(request({ owner: ref.owner }))).toEqual({
          kind: ClaimReply.RECOVERY_REQUIRED,
          reason: 'ABANDONED',
        })
      })
    })

    describe('claim step 5: the caller\u2019s own claim landed', () => {
      it('answers REPLAYED_ACQUIRE with the current EXECUTING state and changes nothing', async () => {
        const ref = await held()
        const before = await snapshot()

        const result = await store.claim(ref.request)

        expect(result).toMatchObject({
          kind: ClaimReply.REPLAYED_ACQUIRE,
          state: RecordState.EXECUTING,
          attempt: 1,
          rev: 1,
        })
        expect(await snapshot()).toEqual(before)
      })

      it('answers REPLAYED_ACQUIRE with the CLAIMED state when the claim did not start', async () => {
        const ref = await held({ start: false })

        const result = await store.claim(ref.request)

        expect(result).toMatchObject({ kind: ClaimReply.REPLAYED_ACQUIRE, state: RecordState.CLAIMED })
      })

      it('answers REPLAYED_ACQUIRE after a takeover for the new owner', async () => {
        await failed(FailureKind.RETRYABLE)
        const second = await held()

        const result = await store.claim(second.request)

        expect(result).toMatchObject({ kind: ClaimReply.REPLAYED_ACQUIRE, attempt: 2, rev: second.rev })
      })
    })

    describe('claim step 6: takeover', () => {
      it('takes over a FAILED_RETRYABLE record with attempt + 1 and rev + 1', async () => {
        const first = await failed(FailureKind.RETRYABLE)

        const result = await store.claim(request())

        expect(result).toMatchObject({
          kind: ClaimReply.TAKEN_OVER,
          state: RecordState.EXECUTING,
          attempt: 2,
          rev: first.rev + 2,
        })
      })

      it('takes over a CLAIMED record whose lease has run out', async () => {
        await held({ start: false, leaseMs: 40 })
        await sleep(90)

        const result = await store.claim(request({ start: false }))

        expect(result).toMatchObject({ kind: ClaimReply.TAKEN_OVER, state: RecordState.CLAIMED, attempt: 2, rev: 2 })
      })

      it('stores the new codec and policy when it takes over', async () => {
        await failed(FailureKind.RETRYABLE, { codec: 'old', policy: 'p1' })
        const second = await held({ codec: 'new', policy: 'p2' })
        await store.complete(second, Buffer.from('again'), LONG)

        const result = await store.claim(request())

        expect(result).toMatchObject({
          kind: ClaimReply.COMPLETED_REPLAY,
          codec: 'new',
          policy: 'p2',
          response: Buffer.from('again'),
        })
      })

      it('refuses every transition of the previous owner after a takeover', async () => {
        const first = await held({ start: false, leaseMs: 40 })
        await sleep(90)
        await held({ start: false })

        expect(await store.start(first, LONG)).toEqual({ kind: TransitionReply.NOT_OWNER })
        expect(await store.release(first)).toEqual({ kind: TransitionReply.NOT_OWNER })
      })
    })

    describe('claim step 7: expired execution', () => {
      it('answers RECOVERY_REQUIRED for an EXECUTING record past its lease by default', async () => {
        await held({ leaseMs: 40 })
        await sleep(90)

        expect(await store.claim(request())).toEqual({
          kind: ClaimReply.RECOVERY_REQUIRED,
          reason: 'EXPIRED_EXECUTION',
        })
      })

      it('takes over an EXECUTING record past its lease when the policy says takeover', async () => {
        const first = await held({ leaseMs: 40 })
        await sleep(90)

        const result = await store.claim(request({ expiredExecution: 'takeover' }))

        expect(result).toMatchObject({ kind: ClaimReply.TAKEN_OVER, state: RecordState.EXECUTING, attempt: 2 })
        expect(await store.complete(first, Buffer.from('stale'), LONG)).toEqual({ kind: TransitionReply.NOT_OWNER })
      })
    })

    describe("claim steps 4 and 7 with expiredExecution 'resume'", () => {
      const resume = (overrides: Partial<ClaimRequest> = {}) => request({ expiredExecution: 'resume', ...overrides })

      it('takes over an ABANDONED record with attempt + 1 and rev + 1, and fences its previous owner', async () => {
        const first = await failed(FailureKind.UNKNOWN)
        const claim = resume()

        const result = await store.claim(claim)

        expect(result).toMatchObject({ kind: ClaimReply.TAKEN_OVER, state: RecordState.EXECUTING, attempt: 2, rev: 3 })
        expect(await store.claim(claim)).toMatchObject({ kind: ClaimReply.REPLAYED_ACQUIRE, attempt: 2, rev: 3 })
        expect(await store.claim(resume())).toMatchObject({ kind: ClaimReply.IN_PROGRESS })
        expect(await store.complete({ ...first, rev: 2 }, Buffer.from('stale'), LONG)).toEqual({
          kind: TransitionReply.NOT_OWNER,
        })
      })

      it('takes over an ABANDONED record in CLAIMED when the claim does not start', async () => {
        await failed(FailureKind.UNKNOWN)

        expect(await store.claim(resume({ start: false }))).toMatchObject({
          kind: ClaimReply.TAKEN_OVER,
          state: RecordState.CLAIMED,
          attempt: 2,
        })
      })

      it('takes over an EXECUTING record past its lease', async () => {
        const first = await held({ leaseMs: 40 })
        await sleep(90)

        const result = await store.claim(resume())

        expect(result).toMatchObject({ kind: ClaimReply.TAKEN_OVER, state: RecordState.EXECUTING, attempt: 2, rev: 2 })
        expect(await store.complete(first, Buffer.from('stale'), LONG)).toEqual({ kind: TransitionReply.NOT_OWNER })
      })

      it('still refuses another fingerprint and replays a COMPLETED record', async () => {
        await failed(FailureKind.UNKNOWN)
        expect(await store.claim(resume({ fingerprint: 'fp-b' }))).toEqual({ kind: ClaimReply.FINGERPRINT_MISMATCH })
        const second = await held({ expiredExecution: 'resume' })
        await store.complete(second, Buffer.from('resumed'), LONG)

        expect(await store.claim(resume())).toMatchObject({
          kind: ClaimReply.COMPLETED_REPLAY,
          response: Buffer.from('resumed'),
        })
      })
    })

    describe('claim step 8: in progress', () => {
      it('answers IN_PROGRESS with the time left on the lease when another owner holds it', async () => {
        await held({ leaseMs: 10_000 })

        const result = await store.claim(request())

        expect(result.kind).toBe(ClaimReply.IN_PROGRESS)
        if (result.kind !== ClaimReply.IN_PROGRESS) return
        expect(result.retryAfterMs).toBeGreaterThan(8_000)
        expect(result.retryAfterMs).toBeLessThanOrEqual(10_000)
      })

      it('answers IN_PROGRESS for a CLAIMED record whose lease is still running', async () => {
        await held({ start: false })

        expect((await store.claim(request())).kind).toBe(ClaimReply.IN_PROGRESS)
      })

      it('lets exactly one of 25 concurrent claims acquire one scope', async () => {
        const results: ClaimResult[] = await Promise.all(Array.from({ length: 25 }, () => store.claim(request())))

        const kinds = results.map((result) => result.kind)
        expect(kinds.filter((kind) => kind === ClaimReply.ACQUIRED)).toHaveLength(1)
        expect(kinds.filter((kind) => kind === ClaimReply.IN_PROGRESS)).toHaveLength(24)
      })

      it('keeps two keys independent', async () => {
        await held()

        const other = await store.claim(request({ key: `${key}-other` }))

        expect(other.kind).toBe(ClaimReply.ACQUIRED)
      })
    })

    describe('start', () => {
      it('moves CLAIMED to EXECUTING with rev + 1', async () => {
        const ref = await held({ start: false })

        expect(await store.start(ref, LONG)).toEqual({ kind: TransitionReply.OK, rev: 2 })
        expect(await store.inspect(key, ref.owner)).toMatchObject({ kind: InspectReply.EXECUTING, mine: true, rev: 2 })
      })

      it('answers ALREADY when a start is re-sent after it landed', async () => {
        const ref = await held({ start: false })
        await store.start(ref, LONG)

        expect(await store.start(ref, LONG)).toEqual({ kind: TransitionReply.ALREADY, rev: 2 })
      })

      it('answers WRONG_STATE when the record is EXECUTING at the sender\u2019s own rev', async () => {
        const ref = await held()

        expect(await store.start(ref, LONG)).toEqual({
          kind: TransitionReply.WRONG_STATE,
          state: RecordState.EXECUTING,
        })
      })

      it('answers NOT_OWNER for another owner token or another attempt', async () => {
        const ref = await held({ start: false })

        expect(await store.start({ ...ref, owner: token() }, LONG)).toEqual({ kind: TransitionReply.NOT_OWNER })
        expect(await store.start({ ...ref, attempt: 2 }, LONG)).toEqual({ kind: TransitionReply.NOT_OWNER })
      })

      it('answers WRONG_STATE for a stale rev', async () => {
        const ref = await held({ start: false })

        expect(await store.start({ ...ref, rev: 7 }, LONG)).toEqual({
          kind: TransitionReply.WRONG_STATE,
          state: RecordState.CLAIMED,
        })
      })

      it('answers NOT_FOUND when there is no record', async () => {
        expect(await store.start({ key, owner: token(), attempt: 1, rev: 1 }, LONG)).toEqual({
          kind: TransitionReply.NOT_FOUND,
        })
      })
    })

    describe('complete', () => {
      it('moves EXECUTING to COMPLETED and replays the response', async () => {
        const ref = await held()

        expect(await store.complete(ref, Buffer.from('answer'), LONG)).toEqual({ kind: TransitionReply.OK, rev: 2 })
        expect(await store.inspect(key, ref.owner)).toMatchObject({
          kind: InspectReply.COMPLETED,
          mine: true,
          response: Buffer.from('answer'),
        })
      })

      it('answers ALREADY when a completion is re-sent after it landed', async () => {
        const ref = await held()
        await store.complete(ref, Buffer.from('answer'), LONG)

        expect(await store.complete(ref, Buffer.from('answer'), LONG)).toEqual({
          kind: TransitionReply.ALREADY,
          rev: 2,
        })
      })

      it('refuses to complete a CLAIMED record', async () => {
        const ref = await held({ start: false })

        expect(await store.complete(ref, Buffer.from('x'), LONG)).toEqual({
          kind: TransitionReply.WRONG_STATE,
          state: RecordState.CLAIMED,
        })
      })

      it('refuses a completion from another owner', async () => {
        const ref = await held()

        expect(await store.complete({ ...ref, owner: token() }, Buffer.from('x'), LONG)).toEqual({
          kind: TransitionReply.NOT_OWNER,
        })
        expect(await store.inspect(key, ref.owner)).toMatchObject({ kind: InspectReply.EXECUTING })
      })

      it('refuses a second completion with a stale rev after the first one', async () => {
        const ref = await held()
        await store.complete(ref, Buffer.from('first'), LONG)

        expect(await store.complete({ ...ref, rev: ref.rev + 1 }, Buffer.from('second'), LONG)).toEqual({
          kind: TransitionReply.WRONG_STATE,
          state: RecordState.COMPLETED,
        })
        expect(await store.inspect(key, ref.owner)).toMatchObject({ response: Buffer.from('first') })
      })
    })

    describe('markFailed', () => {
      it('moves EXECUTING to FAILED_RETRYABLE for a retryable failure', async () => {
        const ref = await held()

        expect(await store.markFailed(ref, FailureKind.RETRYABLE, LONG)).toEqual({ kind: TransitionReply.OK, rev: 2 })
        expect(await snapshot()).toMatchObject({ kind: InspectReply.FAILED_RETRYABLE, attempt: 1 })
      })

      it('moves EXECUTING to ABANDONED for an unknown effect', async () => {
        const ref = await held()

        expect(await store.markFailed(ref, FailureKind.UNKNOWN, LONG)).toEqual({ kind: TransitionReply.OK, rev: 2 })
        expect(await snapshot()).toMatchObject({ kind: InspectReply.ABANDONED })
      })

      it('answers ALREADY when a markFailed is re-sent after it landed', async () => {
        const ref = await held()
        await store.markFailed(ref, FailureKind.UNKNOWN, LONG)

        expect(await store.markFailed(ref, FailureKind.UNKNOWN, LONG)).toEqual({
          kind: TransitionReply.ALREADY,
          rev: 2,
        })
      })

      it('answers WRONG_STATE when re-sent with the other failure kind', async () => {
        const ref = await held()
        await store.markFailed(ref, FailureKind.RETRYABLE, LONG)

        expect(await store.markFailed(ref, FailureKind.UNKNOWN, LONG)).toEqual({
          kind: TransitionReply.WRONG_STATE,
          state: RecordState.FAILED_RETRYABLE,
        })
      })

      it('refuses to mark a CLAIMED record failed', async () => {
        const ref = await held({ start: false })

        expect(await store.markFailed(ref, FailureKind.RETRYABLE, LONG)).toEqual({
          kind: TransitionReply.WRONG_STATE,
          state: RecordState.CLAIMED,
        })
      })

      it('refuses a markFailed from another attempt', async () => {
        const ref = await held()

        expect(await store.markFailed({ ...ref, attempt: 9 }, FailureKind.UNKNOWN, LONG)).toEqual({
          kind: TransitionReply.NOT_OWNER,
        })
      })
    })

    describe('release', () => {
      it('deletes a CLAIMED record held by the caller', async () => {
        const ref = await held({ start: false })

        expect(await store.release(ref)).toEqual({ kind: TransitionReply.OK, rev: 0 })
        expect(await snapshot()).toEqual({ kind: InspectReply.ABSENT })
        expect(await store.claim(request())).toMatchObject({ kind: ClaimReply.ACQUIRED, attempt: 1 })
      })

      it('never deletes an EXECUTING record', async () => {
        const ref = await held()

        expect(await store.release(ref)).toEqual({ kind: TransitionReply.WRONG_STATE, state: RecordState.EXECUTING })
        expect(await snapshot()).toMatchObject({ kind: InspectReply.EXECUTING })
      })

      it('never deletes a COMPLETED record', async () => {
        const ref = await completed()

        expect(await store.release({ ...ref, rev: ref.rev + 1 })).toEqual({
          kind: TransitionReply.WRONG_STATE,
          state: RecordState.COMPLETED,
        })
        expect(await snapshot()).toMatchObject({ kind: InspectReply.COMPLETED })
      })

      it('refuses another owner and answers NOT_FOUND when re-sent after it landed', async () => {
        const ref = await held({ start: false })

        expect(await store.release({ ...ref, owner: token() })).toEqual({ kind: TransitionReply.NOT_OWNER })
        await store.release(ref)
        expect(await store.release(ref)).toEqual({ kind: TransitionReply.NOT_FOUND })
      })
    })

    describe('renew', () => {
      it('really moves leaseUntil forward and never answers ALREADY', async () => {
        const ref = await held({ leaseMs: 10_000 })
        const before = await store.inspect(key, ref.owner)
        await sleep(30)

        const first = await store.renew(ref, { ...LONG, leaseMs: 10_000 })
        await sleep(30)
        const second = await store.renew(ref, { ...LONG, leaseMs: 10_000 })

        if (before.kind !== InspectReply.EXECUTING || first.kind !== 'OK' || second.kind !== 'OK') {
          throw new Error(`unexpected ${before.kind} ${first.kind} ${second.kind}`)
        }
        expect(first.leaseUntil).toBeGreaterThan(before.leaseUntil)
        expect(second.leaseUntil).toBeGreaterThan(first.leaseUntil)
        expect(await store.inspect(key, ref.owner)).toMatchObject({ leaseUntil: second.leaseUntil, rev: ref.rev })
      })

      it('keeps a record in progress past its original lease', async () => {
        const ref = await held({ leaseMs: 100 })

        for (let i = 0; i < 4; i++) {
          await sleep(50)
          expect((await store.renew(ref, { ...LONG, leaseMs: 100 })).kind).toBe(TransitionReply.OK)
        }

        expect((await store.claim(request())).kind).toBe(ClaimReply.IN_PROGRESS)
      })

      it('keeps the record alive past lease plus retention while it is renewed', async () => {
        // Six renewals 200 ms apart outlast lease plus retention (600 ms) twice over; each comes
        // a third of a lease before the lease would run out, with room for a loaded machine.
        const times = { leaseMs: 300, replayWindowMs: 60_000, failureRetentionMs: 300 }
        const ref = await held(times)

        for (let i = 0; i < 6; i++) {
          await sleep(200)
          expect((await store.renew(ref, times)).kind).toBe(TransitionReply.OK)
        }

        expect(await store.inspect(key, ref.owner)).toMatchObject({ kind: InspectReply.EXECUTING, mine: true })
      })

      it('refuses a CLAIMED record, another owner, another attempt, a finished record and no record', async () => {
        const claimed = await held({ start: false })
        expect(await store.renew(claimed, LONG)).toEqual({
          kind: TransitionReply.WRONG_STATE,
          state: RecordState.CLAIMED,
        })
        await store.release(claimed)
        expect(await store.renew(claimed, LONG)).toEqual({ kind: TransitionReply.NOT_FOUND })

        const running = await held()
        expect(await store.renew({ ...running, owner: token() }, LONG)).toEqual({ kind: TransitionReply.NOT_OWNER })
        expect(await store.renew({ ...running, attempt: 2 }, LONG)).toEqual({ kind: TransitionReply.NOT_OWNER })
        await store.complete(running, Buffer.from('done'), LONG)
        expect(await store.renew(running, LONG)).toEqual({
          kind: TransitionReply.WRONG_STATE,
          state: RecordState.COMPLETED,
        })
      })
    })

    describe('arguments', () => {
      it('rejects a malformed owner token before touching anything', async () => {
        const call = store.claim(request({ owner: 'not-a-token' }))

        await expect(call).rejects.toMatchObject({ code: 'ERR_IDEM_INVALID_ARGUMENT' })
        await expect(store.inspect(key, 'NOT-HEX'.repeat(9).slice(0, 64))).rejects.toMatchObject({
          code: 'ERR_IDEM_INVALID_ARGUMENT',
        })
        expect(await snapshot()).toEqual({ kind: InspectReply.ABSENT })
      })

      it('rejects a non-positive lease before touching anything', async () => {
        await expect(store.claim(request({ leaseMs: 0 }))).rejects.toMatchObject({ code: 'ERR_IDEM_INVALID_ARGUMENT' })
        expect(await snapshot()).toEqual({ kind: InspectReply.ABSENT })
      })
    })

    describe('inspect', () => {
      it('answers ABSENT when there is no record', async () => {
        expect(await snapshot()).toEqual({ kind: InspectReply.ABSENT })
      })

      it('tells the owner from another caller and shows the lease', async () => {
        const ref = await held({ start: false, fingerprint: 'fp-z', operation: 'POST /x' })

        const mine = await store.inspect(key, ref.owner)
        const theirs = await snapshot()

        expect(mine).toMatchObject({
          kind: InspectReply.CLAIMED,
          mine: true,
          attempt: 1,
          rev: 1,
          fingerprint: 'fp-z',
          operation: 'POST /x',
        })
        expect(theirs).toMatchObject({ kind: InspectReply.CLAIMED, mine: false })
        if (mine.kind !== InspectReply.CLAIMED) return
        expect(mine.leaseRemainingMs).toBeGreaterThan(20_000)
      })

      it('shows a lease of 0 remaining once it has run out, as claim sees it', async () => {
        await held({ leaseMs: 30 })
        await sleep(80)

        expect(await store.inspect(key, token())).toMatchObject({ kind: InspectReply.EXECUTING, leaseRemainingMs: 0 })
        expect((await store.claim(request())).kind).toBe(ClaimReply.RECOVERY_REQUIRED)
      })

      it('shows failed records and their attempt', async () => {
        await failed(FailureKind.RETRYABLE)
        expect(await snapshot()).toMatchObject({ kind: InspectReply.FAILED_RETRYABLE, attempt: 1, mine: false })
      })

      it('changes nothing however often it is called', async () => {
        const ref = await held()
        const before = await snapshot()

        for (let i = 0; i < 5; i++) await store.inspect(key, ref.owner)

        expect(await snapshot()).toEqual(before)
        expect(await store.complete(ref, Buffer.from('ok'), LONG)).toEqual({ kind: TransitionReply.OK, rev: 2 })
      })

      it('agrees with claim before and after the replay window', async () => {
        const ref = await completed('kept', { replayWindowMs: 150 })

        expect(await store.inspect(key, ref.owner)).toMatchObject({
          kind: InspectReply.COMPLETED,
          response: Buffer.from('kept'),
        })
        expect(await store.claim(request())).toMatchObject({
          kind: ClaimReply.COMPLETED_REPLAY,
          response: Buffer.from('kept'),
        })

        await sleep(220)

        expect(await store.inspect(key, ref.owner)).toEqual({ kind: InspectReply.ABSENT })
        expect(await store.claim(request())).toMatchObject({ kind: ClaimReply.ACQUIRED, attempt: 1 })
      })

      it('agrees with claim after the failure retention', async () => {
        await failed(FailureKind.UNKNOWN, { failureRetentionMs: 60 })
        expect(await snapshot()).toMatchObject({ kind: InspectReply.ABANDONED })

        await sleep(120)

        expect(await snapshot()).toEqual({ kind: InspectReply.ABSENT })
        expect((await store.claim(request())).kind).toBe(ClaimReply.ACQUIRED)
      })

      it('shows the stored codec and policy of a completed record', async () => {
        await completed('c', { codec: 'json-3', policy: 'p9' })

        expect(await snapshot()).toMatchObject({ kind: InspectReply.COMPLETED, codec: 'json-3', policy: 'p9' })
      })
    })
  })
}
