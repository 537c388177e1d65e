/** What a call's arguments must be, and inspect: the record as another caller sees it. */
import { describe, expect, it } from 'vitest'
import { ClaimReply, FailureKind, InspectReply, TransitionReply } from '../../core/record.js'
import { type ContractContext, LONG, sleep, token } from './context.js'

export function inspectCases(t: ContractContext): void {
  const { request, held, completed, failed, snapshot } = t

  describe('arguments', () => {
    it('rejects a malformed owner token before touching anything', async () => {
      const call = t.store.claim(request({ owner: 'not-a-token' }))

      await expect(call).rejects.toMatchObject({ code: 'ERR_IDEM_INVALID_ARGUMENT' })
      await expect(t.store.inspect(t.key, 'NOT-HEX'.repeat(9).slice(0, 64))).rejects.toMatchObject({
        code: 'ERR_IDEM_INVALID_ARGUMENT',
      })
      expect(await snapshot()).toEqual({ kind: InspectReply.ABSENT })
    })

    it('rejects a non-positive lease before touching anything', async () => {
      await expect(t.store.claim(request({ leaseMs: 0 }))).rejects.toMatchObject({ code: 'ERR_IDEM_INVALID_ARGUMENT' })
      expect(await snapshot()).toEqual({ kind: InspectReply.ABSENT })
    })
  })

  describe('inspect', () => {
    it('answers ABSENT when there is no record', async () => {
      expect(await snapshot()).toEqual({ kind: InspectReply.ABSENT })
    })

    it('tells the owner from another caller and shows the lease', async () => {
      const ref = await held({ start: false, fingerprint: 'fp-z', operation: 'POST /x' })

      const mine = await t.store.inspect(t.key, ref.owner)
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

      expect(await t.store.inspect(t.key, token())).toMatchObject({ kind: InspectReply.EXECUTING, leaseRemainingMs: 0 })
      expect((await t.store.claim(request())).kind).toBe(ClaimReply.RECOVERY_REQUIRED)
    })

    it('shows failed records and their attempt', async () => {
      await failed(FailureKind.RETRYABLE)
      expect(await snapshot()).toMatchObject({ kind: InspectReply.FAILED_RETRYABLE, attempt: 1, mine: false })
    })

    it('changes nothing however often it is called', async () => {
      const ref = await held()
      const before = await snapshot()

      for (let i = 0; i < 5; i++) await t.store.inspect(t.key, ref.owner)

      expect(await snapshot()).toEqual(before)
      expect(await t.store.complete(ref, Buffer.from('ok'), LONG)).toEqual({ kind: TransitionReply.OK, rev: 2 })
    })

    it('agrees with claim before and after the replay window', async () => {
      const ref = await completed('kept', { replayWindowMs: 150 })

      expect(await t.store.inspect(t.key, ref.owner)).toMatchObject({
        kind: InspectReply.COMPLETED,
        response: Buffer.from('kept'),
      })
      expect(await t.store.claim(request())).toMatchObject({
        kind: ClaimReply.COMPLETED_REPLAY,
        response: Buffer.from('kept'),
      })

      await sleep(220)

      expect(await t.store.inspect(t.key, ref.owner)).toEqual({ kind: InspectReply.ABSENT })
      expect(await t.store.claim(request())).toMatchObject({ kind: ClaimReply.ACQUIRED, attempt: 1 })
    })

    it('agrees with claim after the failure retention', async () => {
      await failed(FailureKind.UNKNOWN, { failureRetentionMs: 60 })
      expect(await snapshot()).toMatchObject({ kind: InspectReply.ABANDONED })

      await sleep(120)

      expect(await snapshot()).toEqual({ kind: InspectReply.ABSENT })
      expect((await t.store.claim(request())).kind).toBe(ClaimReply.ACQUIRED)
    })

    it("keeps a failed execution's cause for read(): bounded, on one line, and gone with a takeover", async () => {
      // read() is optional (for operators); every built-in store has it.
      if (typeof t.store.read !== 'function') return
      const read = async () => (await t.store.read?.(t.key))?.record
      const ref = await held()
      const message = `line one\nline two ${'x'.repeat(300)}`
      expect(await t.store.markFailed(ref, FailureKind.UNKNOWN, LONG, { class: 'PaymentDeclined', message })).toEqual({
        kind: TransitionReply.OK,
        rev: ref.rev + 1,
      })

      const abandoned = await read()
      expect(abandoned).toMatchObject({ state: 'ABANDONED', response: Buffer.alloc(0) })
      expect(abandoned?.cause?.class).toBe('PaymentDeclined')
      expect(abandoned?.cause?.message).toMatch(/^line one line two x+…$/)
      expect(abandoned?.cause?.message).toHaveLength(200)
      expect(await snapshot()).toMatchObject({ kind: InspectReply.ABANDONED, attempt: 1 })

      // A resumed claim takes it over: the new attempt's record keeps nothing of the old cause.
      const owner = token()
      const next = await t.store.claim(request({ owner, expiredExecution: 'resume', start: true }))
      expect(next).toMatchObject({ kind: ClaimReply.TAKEN_OVER, attempt: 2, rev: ref.rev + 2 })
      expect((await read())?.cause).toBeUndefined()
      const taken = { key: t.key, owner, attempt: 2, rev: ref.rev + 2 }
      expect(await t.store.markFailed(taken, FailureKind.RETRYABLE, LONG)).toMatchObject({ kind: TransitionReply.OK })
      expect(await read()).toMatchObject({ state: 'FAILED_RETRYABLE', response: Buffer.alloc(0) })
      expect((await read())?.cause).toBeUndefined()
    })

    it('refuses a failure cause that is not { class, message? } before touching anything', async () => {
      const ref = await held({ start: true })
      const bad = { class: 5 } as unknown as { class: string }

      await expect(t.store.markFailed(ref, FailureKind.UNKNOWN, LONG, bad)).rejects.toMatchObject({
        code: 'ERR_IDEM_INVALID_ARGUMENT',
      })
      expect(await snapshot()).toMatchObject({ kind: InspectReply.EXECUTING })
    })

    it('shows the stored codec and policy of a completed record', async () => {
      await completed('c', { codec: 'json-3', policy: 'p9' })

      expect(await snapshot()).toMatchObject({ kind: InspectReply.COMPLETED, codec: 'json-3', policy: 'p9' })
    })
  })
}
