import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { jsonCodec } from '../../src/core/codec.js'
import { InspectReply } from '../../src/core/record.js'
import { gate, type Harness, harness, sleep } from '../helpers/executor-harness.js'
import { type FaultyStore, faultyStore } from '../helpers/faulty-store.js'
import { STORES, type TestStore } from '../helpers/stores.js'

describe.each(STORES)('execute() on the %s store', (_name, create) => {
  let backing: TestStore
  let store: FaultyStore
  let h: Harness

  beforeEach(async () => {
    backing = await create()
    store = faultyStore(backing.store)
    h = harness(store)
  })

  afterEach(async () => {
    await backing.teardown()
  })

  describe('first run and replay', () => {
    it('runs the action once, stores its result and replays it', async () => {
      const first = await h.run()
      const second = await h.run()

      expect(first).toEqual({ kind: 'EXECUTED', value: { n: 1 }, attempt: 1 })
      expect(second).toEqual({ kind: 'REPLAYED', value: { n: 1 } })
      expect(h.runs()).toBe(1)
    })

    it('answers FINGERPRINT_MISMATCH and does not run for a different request', async () => {
      await h.run()

      const result = await h.run({ fingerprint: 'f1:bb' })

      expect(result).toEqual({ kind: 'FINGERPRINT_MISMATCH' })
      expect(h.runs()).toBe(1)
    })

    it('gives the action the attempt number as fencing token and a live signal', async () => {
      let seen: { token: number; aborted: boolean } | undefined

      await h.run({
        action: ({ fencingToken, signal }) => {
          seen = { token: fencingToken, aborted: signal.aborted }
          return 'ok'
        },
      })

      expect(seen).toEqual({ token: 1, aborted: false })
    })
  })

  describe('concurrency', () => {
    it('answers IN_PROGRESS to a second invocation while the first runs', async () => {
      const hold = gate()
      const first = h.run({ action: () => hold.promise.then(() => 'first') })
      await sleep(20)

      const second = await h.run()
      hold.open()

      expect(second.kind).toBe('IN_PROGRESS')
      expect(await first).toMatchObject({ kind: 'EXECUTED', value: 'first' })
      expect(h.runs()).toBe(1)
    })

    it('runs once among 20 concurrent invocations of one scope', async () => {
      // The action is held open until the 19 others have answered, however the store queues them.
      const hold = gate()
      let answered = 0
      const outcomes = await Promise.all(
        Array.from({ length: 20 }, () =>
          h.run({ action: () => hold.promise.then(() => 'done') }).then((outcome) => {
            if (++answered === 19) hold.open()
            return outcome
          }),
        ),
      )

      expect(h.runs()).toBe(1)
      expect(outcomes.filter((outcome) => outcome.kind === 'EXECUTED')).toHaveLength(1)
      expect(outcomes.filter((outcome) => outcome.kind === 'IN_PROGRESS')).toHaveLength(19)
    })
  })

  describe('lost replies and unsent calls', () => {
    it('runs once when the claim landed and its reply was lost', async () => {
      store.inject('claim', 'lost-reply')

      const result = await h.run()

      expect(result).toMatchObject({ kind: 'EXECUTED', attempt: 1 })
      expect(h.runs()).toBe(1)
      expect(await h.run()).toMatchObject({ kind: 'REPLAYED' })
    })

    it('runs once when both the claim and its re-send lost their replies', async () => {
      store.inject('claim', 'lost-reply', 'lost-reply')
      store.inject('inspect', 'dropped')

      const result = await h.run()

      expect(result).toMatchObject({ kind: 'EXECUTED' })
      expect(h.runs()).toBe(1)
    })

    it('re-sends the claim when it was dropped before reaching the store', async () => {
      store.inject('claim', 'dropped')

      expect(await h.run()).toMatchObject({ kind: 'EXECUTED' })
      expect(store.applied.claim).toBe(1)
      expect(h.runs()).toBe(1)
    })

    it('answers STORE_UNAVAILABLE without running when the claim was not sent', async () => {
      store.inject('claim', 'not-sent')

      const result = await h.run()

      expect(result).toMatchObject({ kind: 'STORE_UNAVAILABLE', retryAfterMs: 1000 })
      expect(h.runs()).toBe(0)
      expect(await store.inspect(h.key, '0'.repeat(64))).toEqual({ kind: InspectReply.ABSENT })
    })

    it('gives up without running and frees the scope when the claim stays undecided', async () => {
      store.block('claim', 'lost-reply')
      store.inject('inspect', 'dropped', 'dropped', 'dropped')

      const result = await h.run()
      store.block('claim', undefined)
      await sleep(400)

      expect(result.kind).toBe('STORE_UNAVAILABLE')
      expect(h.runs()).toBe(0)
      expect(await store.inspect(h.key, '0'.repeat(64))).toMatchObject({ kind: InspectReply.FAILED_RETRYABLE })
      expect(await h.run()).toMatchObject({ kind: 'EXECUTED', attempt: 2 })
    })

    it('starts once when the start reply was lost', async () => {
      store.inject('start', 'lost-reply')

      const result = await h.run({ startSeparately: true })

      expect(result).toMatchObject({ kind: 'EXECUTED' })
      expect(store.applied.start).toBe(1)
      expect(h.runs()).toBe(1)
    })

    it('confirms a completion whose reply was lost', async () => {
      store.inject('complete', 'lost-reply')

      const result = await h.run()

      expect(result).toEqual({ kind: 'EXECUTED', value: { n: 1 }, attempt: 1 })
      expect(store.applied.complete).toBe(1)
      expect(await h.run()).toEqual({ kind: 'REPLAYED', value: { n: 1 } })
    })

    it('re-sends a completion that was not sent', async () => {
      store.inject('complete', 'not-sent', 'dropped')

      expect(await h.run()).toMatchObject({ kind: 'EXECUTED' })
      expect(await h.run()).toEqual({ kind: 'REPLAYED', value: { n: 1 } })
    })

    it('reports UNRECORDED when the completion never reaches the store within recordRetryMs', async () => {
      store.block('complete', 'not-sent')

      const result = await h.run({ recordRetryMs: 300 })

      expect(result).toMatchObject({ kind: 'UNRECORDED', reason: 'STORE_UNAVAILABLE', value: { n: 1 } })
      expect(h.runs()).toBe(1)
    })

    it('records the completion when the store comes back within recordRetryMs', async () => {
      store.block('complete', 'not-sent')
      setTimeout(() => store.block('complete', undefined), 400).unref()

      const result = await h.run({ recordRetryMs: 3_000 })

      expect(result).toEqual({ kind: 'EXECUTED', value: { n: 1 }, attempt: 1 })
      expect(await h.run()).toEqual({ kind: 'REPLAYED', value: { n: 1 } })
      expect(h.runs()).toBe(1)
    })

    it('confirms a markFailed whose reply was lost, so a retry takes over', async () => {
      store.inject('markFailed', 'lost-reply')

      const result = await h.run({
        action: () => Promise.reject(Object.assign(new Error('busy'), { retryable: true })),
      })

      expect(result).toMatchObject({ kind: 'FAILED', classification: 'retryable', recorded: true })
      expect(await h.run()).toMatchObject({ kind: 'EXECUTED', attempt: 2 })
    })

    it('re-sends a markFailed that was dropped, so the record is ABANDONED', async () => {
      store.inject('markFailed', 'dropped')

      const result = await h.run({ action: () => Promise.reject(new Error('boom')) })

      expect(result).toMatchObject({ kind: 'FAILED', classification: 'unknown', recorded: true })
      expect(await h.run()).toEqual({ kind: 'RECOVERY_REQUIRED', reason: 'ABANDONED' })
    })
  })

  describe('the claim deadline (claimTimeoutMs)', () => {
    it('answers STORE_UNAVAILABLE at the deadline, before the stalled claim times out, and runs nothing', async () => {
      const stalling = faultyStore(backing.store, 2_000)
      stalling.block('claim', 'stalled')
      const h2 = harness(stalling)

      const started = performance.now()
      const result = await h2.run({ claimTimeoutMs: 300 })
      const elapsed = performance.now() - started

      expect(result).toMatchObject({ kind: 'STORE_UNAVAILABLE', retryAfterMs: 1_000 })
      expect(elapsed).toBeLessThan(2_000)
      expect(h2.runs()).toBe(0)
    })

    it('gives the scope back when the claim lands after the answer, so a retry runs', async () => {
      const stalling = faultyStore(backing.store, 100)
      stalling.block('claim', 'stalled')
      const h2 = harness(stalling)

      const result = await h2.run({ claimTimeoutMs: 50, policy: h2.policy({ leaseMs: 600 }) })
      stalling.block('claim', undefined)
      await stalling.resumeStalled()
      await sleep(600)

      expect(result.kind).toBe('STORE_UNAVAILABLE')
      expect(stalling.applied.claim).toBeGreaterThanOrEqual(1)
      expect(await backing.store.inspect(h2.key, '0'.repeat(64))).toMatchObject({ kind: InspectReply.FAILED_RETRYABLE })
      expect(await h2.run()).toMatchObject({ kind: 'EXECUTED', attempt: 2 })
      expect(h2.runs()).toBe(1)
    })

    it('gives back a hold the claim wins after the deadline, so a retry runs', async () => {
      const slow = faultyStore(backing.store, 200)
      slow.inject('claim', 'slow')
      const h2 = harness(slow)

      const result = await h2.run({ claimTimeoutMs: 50 })
      await sleep(400)

      expect(result.kind).toBe('STORE_UNAVAILABLE')
      expect(h2.runs()).toBe(0)
      expect(await backing.store.inspect(h2.key, '0'.repeat(64))).toMatchObject({ kind: InspectReply.FAILED_RETRYABLE })
      expect(await h2.run()).toMatchObject({ kind: 'EXECUTED', attempt: 2 })
    })

    it('does not run on a hold whose claim was answered after its lease, when another took the scope over and answered meanwhile', async () => {
      const policy = h.policy({ leaseMs: 200, expiredExecution: 'takeover' })
      const late = faultyStore(backing.store, 700)
      late.inject('claim', 'late-reply')
      const h2 = harness(late)

      const first = h2.run({ policy })
      await sleep(400)
      const second = await h2.run({ policy, store: backing.store })

      expect(second).toMatchObject({ kind: 'EXECUTED', attempt: 2 })
      const stale = await first
      expect(stale.kind).toBe('STORE_UNAVAILABLE')
      expect(stale.kind === 'STORE_UNAVAILABLE' && String(stale.cause)).toMatch(
        /past its lease .* taken over meanwhile/,
      )
      expect(h2.runs()).toBe(1)
      expect(await h2.run({ policy, store: backing.store })).toMatchObject({ kind: 'REPLAYED', value: { n: 1 } })
    })

    it('runs a hold whose claim was answered after its lease once a renewal confirms the scope is still its own', async () => {
      const policy = h.policy({ leaseMs: 200 })
      const late = faultyStore(backing.store, 300)
      late.inject('claim', 'late-reply')
      const h2 = harness(late)

      const result = await h2.run({ policy })

      expect(result).toMatchObject({ kind: 'EXECUTED', attempt: 1 })
      expect(late.applied.renew).toBeGreaterThanOrEqual(1)
      expect(h2.runs()).toBe(1)
    })

    it.each([
      ['fails', 'not-sent', /past its lease .* and its renewal failed/],
      ['is answered late too', 'late-reply', /past its lease .* and so was its renewal/],
    ] as const)(
      'gives back a hold whose claim was answered after its lease when its renewal %s, so a retry runs',
      async (_how, fault, why) => {
        const policy = h.policy({ leaseMs: 200 })
        const late = faultyStore(backing.store, 300)
        late.inject('claim', 'late-reply')
        late.inject('renew', fault)
        const h2 = harness(late)

        const result = await h2.run({ policy })
        await sleep(300)

        expect(result.kind).toBe('STORE_UNAVAILABLE')
        expect(result.kind === 'STORE_UNAVAILABLE' && String(result.cause)).toMatch(why)
        expect(h2.events.some((event) => event.type === 'renewed')).toBe(false)
        expect(h2.runs()).toBe(0)
        expect(await backing.store.inspect(h2.key, '0'.repeat(64))).toMatchObject({
          kind: InspectReply.FAILED_RETRYABLE,
        })
        expect((await backing.store.read?.(h2.key))?.record?.cause).toMatchObject({ class: 'late-claim' })
        expect(await h2.run({ policy })).toMatchObject({ kind: 'EXECUTED', attempt: 2 })
      },
    )

    it('uses a Retry-After at least as long as the deadline', async () => {
      const stalling = faultyStore(backing.store, 2_000)
      stalling.block('claim', 'stalled')

      const result = await harness(stalling).run({ claimTimeoutMs: 1_500, unavailableRetryAfterMs: 1_000 })

      expect(result).toMatchObject({ kind: 'STORE_UNAVAILABLE', retryAfterMs: 1_500 })
    })
  })

  describe('classification', () => {
    it('records FAILED_RETRYABLE for an error marked retryable and runs again on retry', async () => {
      const result = await h.run({ action: () => Promise.reject(Object.assign(new Error('x'), { retryable: true })) })

      expect(result).toMatchObject({ kind: 'FAILED', classification: 'retryable', recorded: true, attempt: 1 })
      expect(await h.run()).toMatchObject({ kind: 'EXECUTED', attempt: 2 })
      expect(h.runs()).toBe(2)
    })

    it('records ABANDONED for an unclassified throw and never runs again', async () => {
      const error = new Error('unknown effect')

      const result = await h.run({ action: () => Promise.reject(error) })

      expect(result).toMatchObject({ kind: 'FAILED', classification: 'unknown', settled: { ok: false, error } })
      expect(await h.run()).toEqual({ kind: 'RECOVERY_REQUIRED', reason: 'ABANDONED' })
      expect(h.runs()).toBe(1)
    })

    it('follows a custom classify, and treats a throwing classify as unknown', async () => {
      const retryable = await h.run({ action: () => ({ status: 503 }), classify: () => 'retryable' })
      const unknown = await h.run({
        action: () => 'x',
        classify: () => {
          throw new Error('classifier bug')
        },
      })

      expect(retryable).toMatchObject({ kind: 'FAILED', classification: 'retryable', settled: { ok: true } })
      expect(unknown).toMatchObject({ kind: 'FAILED', classification: 'unknown', attempt: 2 })
    })

    it('records an unknown effect when the result cannot be encoded', async () => {
      const circular: Record<string, unknown> = {}
      circular.self = circular

      const result = await h.run({ action: () => circular })

      expect(result).toMatchObject({ kind: 'FAILED', classification: 'unknown', recorded: true })
      expect(await h.run()).toEqual({ kind: 'RECOVERY_REQUIRED', reason: 'ABANDONED' })
    })
  })

  describe('codec and policy on replay', () => {
    it('answers RECOVERY_REQUIRED when the stored codec cannot be read', async () => {
      await h.run()

      const result = await h.run({ codec: jsonCodec('json-2') })

      expect(result).toEqual({ kind: 'RECOVERY_REQUIRED', reason: 'CODEC_MISMATCH' })
    })

    it('replays a record of an older codec the current codec reads', async () => {
      await h.run()

      const result = await h.run({ codec: { ...jsonCodec('json-2'), reads: ['json-1'] } })

      expect(result).toEqual({ kind: 'REPLAYED', value: { n: 1 } })
    })

    it('answers RECOVERY_REQUIRED when the stored data does not decode', async () => {
      await h.run({ codec: { id: 'text-1', encode: () => Buffer.from('not json'), decode: (data) => data } })

      const result = await h.run({ codec: { ...jsonCodec('json-1'), reads: ['text-1'] } })

      expect(result).toEqual({ kind: 'RECOVERY_REQUIRED', reason: 'CODEC_MISMATCH' })
    })

    it('answers RECOVERY_REQUIRED when the policy revision differs', async () => {
      await h.run()

      const result = await h.run({ policy: h.policy({ revision: '2' }) })

      expect(result).toEqual({ kind: 'RECOVERY_REQUIRED', reason: 'POLICY_MISMATCH' })
      expect(h.runs()).toBe(1)
    })
  })

  describe('lease', () => {
    it('keeps a long action\u2019s lease alive past the lease length', async () => {
      const policy = h.policy({ leaseMs: 150 })
      const hold = gate()
      const first = h.run({ policy, action: () => hold.promise.then(() => 'long') })

      await sleep(500)
      const during = await h.run({ policy })
      hold.open()

      expect(during.kind).toBe('IN_PROGRESS')
      expect(await first).toMatchObject({ kind: 'EXECUTED', value: 'long' })
      expect(h.events.filter((event) => event.type === 'renewed').length).toBeGreaterThanOrEqual(3)
    })

    it('fires the action\u2019s signal when a renewal is answered only a lease after it was sent', async () => {
      const policy = h.policy({ leaseMs: 300 })
      const late = faultyStore(backing.store, 400)
      const h2 = harness(late)
      let ended: string | undefined
      let reason: unknown
      await h2.run({
        policy,
        action: (context) => {
          late.inject('renew', 'late-reply')
          return new Promise<string>((resolve) => {
            context.signal.addEventListener('abort', () => {
              reason = context.signal.reason
              resolve('lost')
            })
            setTimeout(() => resolve('kept'), 2_000)
          }).then((how) => {
            ended = how
            return how
          })
        },
      })

      expect(ended).toBe('lost')
      expect(reason).toMatchObject({ code: 'ERR_IDEM_LEASE_LOST' })
      expect(late.applied.renew).toBeGreaterThanOrEqual(1)
    })

    it('fires the first action\u2019s signal and refuses its completion after a takeover', async () => {
      const policy = h.policy({ leaseMs: 90, expiredExecution: 'takeover' })
      const hold = gate()
      let signal: AbortSignal | undefined
      const first = h.run({
        policy,
        action: (context) => {
          // No renewal from the start of the action on: its lease runs out while it runs.
          store.block('renew', 'not-sent')
          signal = context.signal
          return hold.promise.then(() => 'stale')
        },
      })
      await sleep(200)

      const second = await h.run({ policy })
      store.block('renew', undefined)
      await sleep(100)
      hold.open()

      expect(second).toMatchObject({ kind: 'EXECUTED', attempt: 2 })
      expect(signal?.aborted).toBe(true)
      expect(await first).toMatchObject({ kind: 'UNRECORDED', reason: 'LOST_OWNERSHIP', attempt: 1 })
      expect(h.events.some((event) => event.type === 'renew-refused')).toBe(true)
      expect(await h.run({ policy })).toMatchObject({ kind: 'REPLAYED', value: { n: 2 } })
    })

    it('answers RECOVERY_REQUIRED after an expired execution by default', async () => {
      const policy = h.policy({ leaseMs: 60 })
      const hold = gate()
      const first = h.run({
        policy,
        action: () => {
          // No renewal from the start of the action on: its lease runs out while it runs.
          store.block('renew', 'not-sent')
          return hold.promise
        },
      })
      await sleep(150)

      const second = await h.run({ policy })
      hold.open()
      await first

      expect(second).toEqual({ kind: 'RECOVERY_REQUIRED', reason: 'EXPIRED_EXECUTION' })
      expect(h.runs()).toBe(1)
    })
  })
})
