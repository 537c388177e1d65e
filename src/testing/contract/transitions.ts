/** The transitions of a held record: start, complete, markFailed, release and renew, each fenced by owner, attempt and revision. */
import { describe, expect, it } from 'vitest'
import { ClaimReply, FailureKind, InspectReply, RecordState, TransitionReply } from '../../core/record.js'
import { type ContractContext, LONG, sleep, token } from './context.js'

export function transitionCases(t: ContractContext): void {
  const { request, held, completed, snapshot } = t

  describe('start', () => {
    it('moves CLAIMED to EXECUTING with rev + 1', async () => {
      const ref = await held({ start: false })

      expect(await t.store.start(ref, LONG)).toEqual({ kind: TransitionReply.OK, rev: 2 })
      expect(await t.store.inspect(t.key, ref.owner)).toMatchObject({
        kind: InspectReply.EXECUTING,
        mine: true,
        rev: 2,
      })
    })

    it('answers ALREADY when a start is re-sent after it landed', async () => {
      const ref = await held({ start: false })
      await t.store.start(ref, LONG)

      expect(await t.store.start(ref, LONG)).toEqual({ kind: TransitionReply.ALREADY, rev: 2 })
    })

    it('answers WRONG_STATE when the record is EXECUTING at the sender\u2019s own rev', async () => {
      const ref = await held()

      expect(await t.store.start(ref, LONG)).toEqual({
        kind: TransitionReply.WRONG_STATE,
        state: RecordState.EXECUTING,
      })
    })

    it('answers NOT_OWNER for another owner token or another attempt', async () => {
      const ref = await held({ start: false })

      expect(await t.store.start({ ...ref, owner: token() }, LONG)).toEqual({ kind: TransitionReply.NOT_OWNER })
      expect(await t.store.start({ ...ref, attempt: 2 }, LONG)).toEqual({ kind: TransitionReply.NOT_OWNER })
    })

    it('answers WRONG_STATE for a stale rev', async () => {
      const ref = await held({ start: false })

      expect(await t.store.start({ ...ref, rev: 7 }, LONG)).toEqual({
        kind: TransitionReply.WRONG_STATE,
        state: RecordState.CLAIMED,
      })
    })

    it('answers NOT_FOUND when there is no record', async () => {
      expect(await t.store.start({ key: t.key, owner: token(), attempt: 1, rev: 1 }, LONG)).toEqual({
        kind: TransitionReply.NOT_FOUND,
      })
    })
  })

  describe('complete', () => {
    it('moves EXECUTING to COMPLETED and replays the response', async () => {
      const ref = await held()

      expect(await t.store.complete(ref, Buffer.from('answer'), LONG)).toEqual({ kind: TransitionReply.OK, rev: 2 })
      expect(await t.store.inspect(t.key, ref.owner)).toMatchObject({
        kind: InspectReply.COMPLETED,
        mine: true,
        response: Buffer.from('answer'),
      })
    })

    it('answers ALREADY when a completion is re-sent after it landed', async () => {
      const ref = await held()
      await t.store.complete(ref, Buffer.from('answer'), LONG)

      expect(await t.store.complete(ref, Buffer.from('answer'), LONG)).toEqual({
        kind: TransitionReply.ALREADY,
        rev: 2,
      })
    })

    it('refuses to complete a CLAIMED record', async () => {
      const ref = await held({ start: false })

      expect(await t.store.complete(ref, Buffer.from('x'), LONG)).toEqual({
        kind: TransitionReply.WRONG_STATE,
        state: RecordState.CLAIMED,
      })
    })

    it('refuses a completion from another owner', async () => {
      const ref = await held()

      expect(await t.store.complete({ ...ref, owner: token() }, Buffer.from('x'), LONG)).toEqual({
        kind: TransitionReply.NOT_OWNER,
      })
      expect(await t.store.inspect(t.key, ref.owner)).toMatchObject({ kind: InspectReply.EXECUTING })
    })

    it('refuses a second completion with a stale rev after the first one', async () => {
      const ref = await held()
      await t.store.complete(ref, Buffer.from('first'), LONG)

      expect(await t.store.complete({ ...ref, rev: ref.rev + 1 }, Buffer.from('second'), LONG)).toEqual({
        kind: TransitionReply.WRONG_STATE,
        state: RecordState.COMPLETED,
      })
      expect(await t.store.inspect(t.key, ref.owner)).toMatchObject({ response: Buffer.from('first') })
    })
  })

  describe('markFailed', () => {
    it('moves EXECUTING to FAILED_RETRYABLE for a retryable failure', async () => {
      const ref = await held()

      expect(await t.store.markFailed(ref, FailureKind.RETRYABLE, LONG)).toEqual({ kind: TransitionReply.OK, rev: 2 })
      expect(await snapshot()).toMatchObject({ kind: InspectReply.FAILED_RETRYABLE, attempt: 1 })
    })

    it('moves EXECUTING to ABANDONED for an unknown effect', async () => {
      const ref = await held()

      expect(await t.store.markFailed(ref, FailureKind.UNKNOWN, LONG)).toEqual({ kind: TransitionReply.OK, rev: 2 })
      expect(await snapshot()).toMatchObject({ kind: InspectReply.ABANDONED })
    })

    it('answers ALREADY when a markFailed is re-sent after it landed', async () => {
      const ref = await held()
      await t.store.markFailed(ref, FailureKind.UNKNOWN, LONG)

      expect(await t.store.markFailed(ref, FailureKind.UNKNOWN, LONG)).toEqual({
        kind: TransitionReply.ALREADY,
        rev: 2,
      })
    })

    it('answers WRONG_STATE when re-sent with the other failure kind', async () => {
      const ref = await held()
      await t.store.markFailed(ref, FailureKind.RETRYABLE, LONG)

      expect(await t.store.markFailed(ref, FailureKind.UNKNOWN, LONG)).toEqual({
        kind: TransitionReply.WRONG_STATE,
        state: RecordState.FAILED_RETRYABLE,
      })
    })

    it('refuses to mark a CLAIMED record failed', async () => {
      const ref = await held({ start: false })

      expect(await t.store.markFailed(ref, FailureKind.RETRYABLE, LONG)).toEqual({
        kind: TransitionReply.WRONG_STATE,
        state: RecordState.CLAIMED,
      })
    })

    it('refuses a markFailed from another attempt', async () => {
      const ref = await held()

      expect(await t.store.markFailed({ ...ref, attempt: 9 }, FailureKind.UNKNOWN, LONG)).toEqual({
        kind: TransitionReply.NOT_OWNER,
      })
    })
  })

  describe('release', () => {
    it('deletes a CLAIMED record held by the caller', async () => {
      const ref = await held({ start: false })

      expect(await t.store.release(ref)).toEqual({ kind: TransitionReply.OK, rev: 0 })
      expect(await snapshot()).toEqual({ kind: InspectReply.ABSENT })
      expect(await t.store.claim(request())).toMatchObject({ kind: ClaimReply.ACQUIRED, attempt: 1 })
    })

    it('never deletes an EXECUTING record', async () => {
      const ref = await held()

      expect(await t.store.release(ref)).toEqual({ kind: TransitionReply.WRONG_STATE, state: RecordState.EXECUTING })
      expect(await snapshot()).toMatchObject({ kind: InspectReply.EXECUTING })
    })

    it('never deletes a COMPLETED record', async () => {
      const ref = await completed()

      expect(await t.store.release({ ...ref, rev: ref.rev + 1 })).toEqual({
        kind: TransitionReply.WRONG_STATE,
        state: RecordState.COMPLETED,
      })
      expect(await snapshot()).toMatchObject({ kind: InspectReply.COMPLETED })
    })

    it('refuses another owner and answers NOT_FOUND when re-sent after it landed', async () => {
      const ref = await held({ start: false })

      expect(await t.store.release({ ...ref, owner: token() })).toEqual({ kind: TransitionReply.NOT_OWNER })
      await t.store.release(ref)
      expect(await t.store.release(ref)).toEqual({ kind: TransitionReply.NOT_FOUND })
    })
  })

  describe('renew', () => {
    it('really moves leaseUntil forward and never answers ALREADY', async () => {
      const ref = await held({ leaseMs: 10_000 })
      const before = await t.store.inspect(t.key, ref.owner)
      await sleep(30)

      const first = await t.store.renew(ref, { ...LONG, leaseMs: 10_000 })
      await sleep(30)
      const second = await t.store.renew(ref, { ...LONG, leaseMs: 10_000 })

      if (before.kind !== InspectReply.EXECUTING || first.kind !== 'OK' || second.kind !== 'OK') {
        throw new Error(`unexpected ${before.kind} ${first.kind} ${second.kind}`)
      }
      expect(first.leaseUntil).toBeGreaterThan(before.leaseUntil)
      expect(second.leaseUntil).toBeGreaterThan(first.leaseUntil)
      expect(await t.store.inspect(t.key, ref.owner)).toMatchObject({ leaseUntil: second.leaseUntil, rev: ref.rev })
    })

    it('keeps a record in progress past its original lease', async () => {
      const ref = await held({ leaseMs: 100 })

      // Each renewal leaves seconds to the next, so a loaded machine's late timer changes nothing.
      for (let i = 0; i < 4; i++) {
        await sleep(50)
        expect((await t.store.renew(ref, { ...LONG, leaseMs: 5_000 })).kind).toBe(TransitionReply.OK)
      }

      expect((await t.store.claim(request())).kind).toBe(ClaimReply.IN_PROGRESS)
    })

    it('keeps the record alive past lease plus retention while it is renewed', async () => {
      // Six renewals 200 ms apart outlast lease plus retention (600 ms) twice over; each comes
      // a third of a lease before the lease would run out, with room for a loaded machine.
      const times = { leaseMs: 300, replayWindowMs: 60_000, failureRetentionMs: 300 }
      const ref = await held(times)

      for (let i = 0; i < 6; i++) {
        await sleep(200)
        expect((await t.store.renew(ref, times)).kind).toBe(TransitionReply.OK)
      }

      expect(await t.store.inspect(t.key, ref.owner)).toMatchObject({ kind: InspectReply.EXECUTING, mine: true })
    })

    it('refuses a CLAIMED record, another owner, another attempt, a finished record and no record', async () => {
      const claimed = await held({ start: false })
      expect(await t.store.renew(claimed, LONG)).toEqual({
        kind: TransitionReply.WRONG_STATE,
        state: RecordState.CLAIMED,
      })
      await t.store.release(claimed)
      expect(await t.store.renew(claimed, LONG)).toEqual({ kind: TransitionReply.NOT_FOUND })

      const running = await held()
      expect(await t.store.renew({ ...running, owner: token() }, LONG)).toEqual({ kind: TransitionReply.NOT_OWNER })
      expect(await t.store.renew({ ...running, attempt: 2 }, LONG)).toEqual({ kind: TransitionReply.NOT_OWNER })
      await t.store.complete(running, Buffer.from('done'), LONG)
      expect(await t.store.renew(running, LONG)).toEqual({
        kind: TransitionReply.WRONG_STATE,
        state: RecordState.COMPLETED,
      })
    })
  })
}
