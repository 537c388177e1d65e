/** The claim: each step of the rule (docs/design.md §3) on one record, as every store must decide it. */
import { describe, expect, it } from 'vitest'
import { ClaimReply, FailureKind, RecordState, TransitionReply } from '../../core/record.js'
import type { ClaimRequest, ClaimResult } from '../../core/store.js'
import { type ContractContext, LONG, sleep } from './context.js'

export function claimCases(t: ContractContext): void {
  const { request, held, completed, failed, snapshot } = t

  describe('claim step 1: absent or expired', () => {
    it('acquires a new record in EXECUTING when the claim asks to start', async () => {
      const result = await t.store.claim(request())

      expect(result).toMatchObject({ kind: ClaimReply.ACQUIRED, state: RecordState.EXECUTING, attempt: 1, rev: 1 })
    })

    it('acquires a new record in CLAIMED when the claim does not start', async () => {
      const result = await t.store.claim(request({ start: false }))

      expect(result).toMatchObject({ kind: ClaimReply.ACQUIRED, state: RecordState.CLAIMED, attempt: 1, rev: 1 })
    })

    it('sets the lease from the store clock when it acquires', async () => {
      const before = Date.now()

      const result = await t.store.claim(request({ leaseMs: 5_000 }))

      if (result.kind !== ClaimReply.ACQUIRED) throw new Error(result.kind)
      expect(result.leaseUntil).toBeGreaterThanOrEqual(before + 5_000 - 1_000)
      expect(result.leaseUntil).toBeLessThanOrEqual(Date.now() + 5_000 + 1_000)
    })

    it('acquires afresh with attempt 1 when a COMPLETED record is past its replay window', async () => {
      await completed('old', { replayWindowMs: 60 })
      await sleep(120)

      const result = await t.store.claim(request())

      expect(result).toMatchObject({ kind: ClaimReply.ACQUIRED, attempt: 1, rev: 1 })
    })

    it('acquires afresh when a FAILED_RETRYABLE record is past the failure retention', async () => {
      await failed(FailureKind.RETRYABLE, { failureRetentionMs: 60 })
      await sleep(120)

      expect(await t.store.claim(request())).toMatchObject({ kind: ClaimReply.ACQUIRED, attempt: 1 })
    })

    it('acquires afresh when an ABANDONED record is past the failure retention', async () => {
      await failed(FailureKind.UNKNOWN, { failureRetentionMs: 60 })
      await sleep(120)

      expect(await t.store.claim(request())).toMatchObject({ kind: ClaimReply.ACQUIRED, attempt: 1 })
    })

    it('acquires afresh when an EXECUTING record is past its lease plus the failure retention', async () => {
      await held({ leaseMs: 40, failureRetentionMs: 40 })
      await sleep(140)

      expect(await t.store.claim(request())).toMatchObject({ kind: ClaimReply.ACQUIRED, attempt: 1 })
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

        const result = await t.store.claim(request({ fingerprint: 'fp-b' }))

        expect(result).toEqual({ kind: ClaimReply.FINGERPRINT_MISMATCH })
        expect(await snapshot()).toEqual(before)
      })
    }

    it('answers FINGERPRINT_MISMATCH even to the owner of the record', async () => {
      const ref = await held()

      const result = await t.store.claim(request({ owner: ref.owner, fingerprint: 'fp-b' }))

      expect(result).toEqual({ kind: ClaimReply.FINGERPRINT_MISMATCH })
    })

    it('answers FINGERPRINT_MISMATCH when the lease has run out', async () => {
      await held({ start: false, leaseMs: 30 })
      await sleep(80)

      expect(await t.store.claim(request({ fingerprint: 'fp-b' }))).toEqual({ kind: ClaimReply.FINGERPRINT_MISMATCH })
    })

    it('accepts a stored fingerprint that equals a legacy fingerprint of the request', async () => {
      await completed('{"v":1}', { fingerprint: 'fp-v1' })

      const result = await t.store.claim(request({ fingerprint: 'fp-v2', legacyFingerprints: ['fp-v0', 'fp-v1'] }))

      expect(result).toMatchObject({ kind: ClaimReply.COMPLETED_REPLAY, response: Buffer.from('{"v":1}') })
    })
  })

  describe('claim step 3: completed replay', () => {
    it('replays the stored response, codec and policy when the record is COMPLETED', async () => {
      await completed('{"id":42}', { codec: 'json-7', policy: 'p3' })

      const result = await t.store.claim(request({ codec: 'json-8', policy: 'p4' }))

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

      const result = await t.store.claim(request())

      expect(result.kind === ClaimReply.COMPLETED_REPLAY && result.response.equals(Buffer.from(response, 'utf8'))).toBe(
        true,
      )
    })

    it('replays with a replayUntil one replay window after completion', async () => {
      const before = Date.now()
      await completed('r', { replayWindowMs: 10_000 })

      const result = await t.store.claim(request())

      if (result.kind !== ClaimReply.COMPLETED_REPLAY) throw new Error(result.kind)
      expect(result.replayUntil).toBeGreaterThanOrEqual(before + 10_000 - 1_000)
      expect(result.replayUntil).toBeLessThanOrEqual(Date.now() + 10_000 + 1_000)
    })
  })

  describe('claim step 4: abandoned', () => {
    it('answers RECOVERY_REQUIRED when the record is ABANDONED, even to its own owner', async () => {
      const ref = await failed(FailureKind.UNKNOWN)

      expect(await t.store.claim(request())).toEqual({ kind: ClaimReply.RECOVERY_REQUIRED, reason: 'ABANDONED' })
      expect(await t.store.claim(request({ owner: ref.owner }))).toEqual({
        kind: ClaimReply.RECOVERY_REQUIRED,
        reason: 'ABANDONED',
      })
    })
  })

  describe('claim step 5: the caller\u2019s own claim landed', () => {
    it('answers REPLAYED_ACQUIRE with the current EXECUTING state and changes nothing', async () => {
      const ref = await held()
      const before = await snapshot()

      const result = await t.store.claim(ref.request)

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

      const result = await t.store.claim(ref.request)

      expect(result).toMatchObject({ kind: ClaimReply.REPLAYED_ACQUIRE, state: RecordState.CLAIMED })
    })

    it('answers REPLAYED_ACQUIRE after a takeover for the new owner', async () => {
      await failed(FailureKind.RETRYABLE)
      const second = await held()

      const result = await t.store.claim(second.request)

      expect(result).toMatchObject({ kind: ClaimReply.REPLAYED_ACQUIRE, attempt: 2, rev: second.rev })
    })
  })

  describe('claim step 6: takeover', () => {
    it('takes over a FAILED_RETRYABLE record with attempt + 1 and rev + 1', async () => {
      const first = await failed(FailureKind.RETRYABLE)

      const result = await t.store.claim(request())

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

      const result = await t.store.claim(request({ start: false }))

      expect(result).toMatchObject({ kind: ClaimReply.TAKEN_OVER, state: RecordState.CLAIMED, attempt: 2, rev: 2 })
    })

    it('stores the new codec and policy when it takes over', async () => {
      await failed(FailureKind.RETRYABLE, { codec: 'old', policy: 'p1' })
      const second = await held({ codec: 'new', policy: 'p2' })
      await t.store.complete(second, Buffer.from('again'), LONG)

      const result = await t.store.claim(request())

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

      expect(await t.store.start(first, LONG)).toEqual({ kind: TransitionReply.NOT_OWNER })
      expect(await t.store.release(first)).toEqual({ kind: TransitionReply.NOT_OWNER })
    })
  })

  describe('claim step 7: expired execution', () => {
    it('answers RECOVERY_REQUIRED for an EXECUTING record past its lease by default', async () => {
      await held({ leaseMs: 40 })
      await sleep(90)

      expect(await t.store.claim(request())).toEqual({
        kind: ClaimReply.RECOVERY_REQUIRED,
        reason: 'EXPIRED_EXECUTION',
      })
    })

    it('takes over an EXECUTING record past its lease when the policy says takeover', async () => {
      const first = await held({ leaseMs: 40 })
      await sleep(90)

      const result = await t.store.claim(request({ expiredExecution: 'takeover' }))

      expect(result).toMatchObject({ kind: ClaimReply.TAKEN_OVER, state: RecordState.EXECUTING, attempt: 2 })
      expect(await t.store.complete(first, Buffer.from('stale'), LONG)).toEqual({ kind: TransitionReply.NOT_OWNER })
    })
  })

  describe("claim steps 4 and 7 with expiredExecution 'resume'", () => {
    const resume = (overrides: Partial<ClaimRequest> = {}) => request({ expiredExecution: 'resume', ...overrides })

    it('takes over an ABANDONED record with attempt + 1 and rev + 1, and fences its previous owner', async () => {
      const first = await failed(FailureKind.UNKNOWN)
      const claim = resume()

      const result = await t.store.claim(claim)

      expect(result).toMatchObject({ kind: ClaimReply.TAKEN_OVER, state: RecordState.EXECUTING, attempt: 2, rev: 3 })
      expect(await t.store.claim(claim)).toMatchObject({ kind: ClaimReply.REPLAYED_ACQUIRE, attempt: 2, rev: 3 })
      expect(await t.store.claim(resume())).toMatchObject({ kind: ClaimReply.IN_PROGRESS })
      expect(await t.store.complete({ ...first, rev: 2 }, Buffer.from('stale'), LONG)).toEqual({
        kind: TransitionReply.NOT_OWNER,
      })
    })

    it('takes over an ABANDONED record in CLAIMED when the claim does not start', async () => {
      await failed(FailureKind.UNKNOWN)

      expect(await t.store.claim(resume({ start: false }))).toMatchObject({
        kind: ClaimReply.TAKEN_OVER,
        state: RecordState.CLAIMED,
        attempt: 2,
      })
    })

    it('takes over an EXECUTING record past its lease', async () => {
      const first = await held({ leaseMs: 40 })
      await sleep(90)

      const result = await t.store.claim(resume())

      expect(result).toMatchObject({ kind: ClaimReply.TAKEN_OVER, state: RecordState.EXECUTING, attempt: 2, rev: 2 })
      expect(await t.store.complete(first, Buffer.from('stale'), LONG)).toEqual({ kind: TransitionReply.NOT_OWNER })
    })

    it('still refuses another fingerprint and replays a COMPLETED record', async () => {
      await failed(FailureKind.UNKNOWN)
      expect(await t.store.claim(resume({ fingerprint: 'fp-b' }))).toEqual({ kind: ClaimReply.FINGERPRINT_MISMATCH })
      const second = await held({ expiredExecution: 'resume' })
      await t.store.complete(second, Buffer.from('resumed'), LONG)

      expect(await t.store.claim(resume())).toMatchObject({
        kind: ClaimReply.COMPLETED_REPLAY,
        response: Buffer.from('resumed'),
      })
    })
  })

  describe('claim step 8: in progress', () => {
    it('answers IN_PROGRESS with the time left on the lease when another owner holds it', async () => {
      await held({ leaseMs: 10_000 })

      const result = await t.store.claim(request())

      expect(result.kind).toBe(ClaimReply.IN_PROGRESS)
      if (result.kind !== ClaimReply.IN_PROGRESS) return
      expect(result.retryAfterMs).toBeGreaterThan(8_000)
      expect(result.retryAfterMs).toBeLessThanOrEqual(10_000)
    })

    it('answers IN_PROGRESS for a CLAIMED record whose lease is still running', async () => {
      await held({ start: false })

      expect((await t.store.claim(request())).kind).toBe(ClaimReply.IN_PROGRESS)
    })

    it('lets exactly one of 25 concurrent claims acquire one scope', async () => {
      const results: ClaimResult[] = await Promise.all(Array.from({ length: 25 }, () => t.store.claim(request())))

      const kinds = results.map((result) => result.kind)
      expect(kinds.filter((kind) => kind === ClaimReply.ACQUIRED)).toHaveLength(1)
      expect(kinds.filter((kind) => kind === ClaimReply.IN_PROGRESS)).toHaveLength(24)
    })

    it('keeps two keys independent', async () => {
      await held()

      const other = await t.store.claim(request({ key: `${t.key}-other` }))

      expect(other.kind).toBe(ClaimReply.ACQUIRED)
    })
  })
}
