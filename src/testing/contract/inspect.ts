/** What a call's arguments must be, and inspect: the record as another caller sees it. */
import { beforeEach, describe, expect, it } from 'vitest'
import { ClaimReply, FailureKind, InspectReply, TransitionReply } from '../../core/record.js'
import type { IdempotencyStore } from '../../core/store.js'
import { type ContractContext, LONG, sleep, token } from './context.js'

export function inspectCases(t: ContractContext): void {
  let store: IdempotencyStore
  let key: string
  beforeEach(() => {
    ;({ store, key } = t.current())
  })
  const { request, held, completed, failed, snapshot } = t

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
}
