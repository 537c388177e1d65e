/**
 * The store calls of a run (src/core/run/calls.ts), every call × every kind of answer, on a real
 * memory store wrapped to answer a chosen way per call (test/helpers/faulty-store.ts):
 *
 * - answered: the store's reply, whatever it is;
 * - not sent: the call certainly did not reach the store (StoreUnavailableError);
 * - lost: it was applied and its reply lost, or dropped before the store (both a
 *   StoreIndeterminateError): the record, inspected with the run's token, decides;
 * - spent: no decision within the call's budget (reconcileRounds, or recordRetryMs);
 * - refused: a malformed argument (a programmer error).
 *
 * The transaction's commit runs against a transaction whose commit is the memory store's
 * complete, so that every answer can be had (the PostgreSQL transaction itself is exercised in
 * test/stores/postgres/transaction.test.ts).
 */
import { afterEach, describe, expect, it } from 'vitest'
import { newOwnerToken } from '../../src/core/attempt.js'
import { ErrorCode, StoreUnavailableError } from '../../src/core/errors.js'
import { type ExecutorEvent, UnrecordedReason } from '../../src/core/outcomes.js'
import { resolvePolicy } from '../../src/core/policy.js'
import { ExpiredExecution, FailureKind, RecordState } from '../../src/core/record.js'
import { calls } from '../../src/core/run/calls.js'
import { RunEvents } from '../../src/core/run/events.js'
import { type CallScope, type Hold, settle } from '../../src/core/run/settle.js'
import type { ClaimRequest, IdempotencyStore } from '../../src/core/store.js'
import type { StoreTransaction } from '../../src/core/store-transaction.js'
import { memoryStore } from '../../src/stores/memory/index.js'
import { type FaultyStore, faultyStore } from '../helpers/faulty-store.js'

const LEASE_MS = 5_000

interface Setup {
  readonly store: FaultyStore
  readonly inner: IdempotencyStore
  readonly events: ExecutorEvent[]
  /** A new invocation's scope on the shared key (a fresh owner token). */
  invocation(overrides?: Partial<ClaimRequest>): CallScope
}

const opened: IdempotencyStore[] = []

function setup(): Setup {
  const inner = memoryStore({ keyPrefix: 'test' })
  opened.push(inner)
  const store = faultyStore(inner, 50)
  const policy = resolvePolicy({ leaseMs: LEASE_MS })
  const key = `test:idem:1:d1:op:${newOwnerToken()}`
  const events: ExecutorEvent[] = []
  return {
    store,
    inner,
    events,
    invocation(overrides = {}) {
      const request: ClaimRequest = {
        key,
        owner: newOwnerToken(),
        fingerprint: 'f1:aa',
        operation: 'op',
        codec: 'json',
        policy: policy.revision,
        leaseMs: policy.leaseMs,
        replayWindowMs: policy.replayWindowMs,
        failureRetentionMs: policy.failureRetentionMs,
        start: true,
        expiredExecution: ExpiredExecution.RECOVER,
        ...overrides,
      }
      const targets = {
        operation: 'op',
        store: store.name,
        labels: undefined,
        onEvent: (e: ExecutorEvent) => events.push(e),
        types: undefined,
      }
      return {
        store,
        policy,
        request,
        limits: { rounds: 2, recordRetryMs: 100, storeCallTimeoutMs: 1_000, unavailableRetryAfterMs: 1_000 },
        events: new RunEvents(targets, key, undefined, false, true, true),
        deadline: undefined,
      }
    },
  }
}

afterEach(async () => {
  for (const store of opened.splice(0)) await store.close()
})

/** The scope held by `scope` (claimed, with or without start). */
async function hold(scope: CallScope): Promise<Hold> {
  const verdict = await settle(scope, calls.claim, scope.request)
  if (verdict.kind !== 'HELD') throw new Error(`expected HELD, got ${verdict.kind}`)
  return verdict.hold
}

/** Another invocation takes the scope over from `held` (failed retryably, then claimed again). */
async function takeOver(t: Setup, scope: CallScope, held: Hold): Promise<void> {
  if (held.state === RecordState.CLAIMED) await t.inner.release(held)
  else await t.inner.markFailed(held, FailureKind.RETRYABLE, scope.policy)
  await hold(t.invocation())
}

const BYTES = Buffer.from('{"n":1}')
const OTHER = Buffer.from('{"n":2}')

/** A transaction whose commit is the store's complete: the commit's every answer, on a real record. */
function transactionOf(store: IdempotencyStore): StoreTransaction {
  return {
    db: { query: async () => ({ rows: [] }) } as unknown as StoreTransaction['db'],
    commit: (ref, response, times) => store.complete(ref, response, times),
    rollback: async () => {},
  }
}

interface Row {
  readonly call: keyof typeof calls
  readonly answer: string
  readonly leadsTo: string
  readonly run: (t: Setup) => Promise<void>
}

const TABLE: readonly Row[] = [
  // claim
  {
    call: 'claim',
    answer: 'answered ACQUIRED',
    leadsTo: 'held, attempt 1, EXECUTING',
    run: async (t) => {
      const scope = t.invocation()
      expect(await settle(scope, calls.claim, scope.request)).toMatchObject({
        kind: 'HELD',
        hold: { key: scope.request.key, owner: scope.request.owner, state: RecordState.EXECUTING, attempt: 1, rev: 1 },
      })
      expect(t.events).toContainEqual({ type: 'claim', result: 'ACQUIRED', attempt: 1 })
    },
  },
  {
    call: 'claim',
    answer: 'answered COMPLETED_REPLAY',
    leadsTo: 'the stored answer, to be decoded',
    run: async (t) => {
      const first = t.invocation()
      await settle(first, calls.complete, { hold: await hold(first), encoded: BYTES })
      const scope = t.invocation()
      expect(await settle(scope, calls.claim, scope.request)).toEqual({
        kind: 'STORED',
        response: BYTES,
        codec: 'json',
        policy: scope.request.policy,
      })
    },
  },
  {
    call: 'claim',
    answer: 'answered FINGERPRINT_MISMATCH',
    leadsTo: 'FINGERPRINT_MISMATCH',
    run: async (t) => {
      await hold(t.invocation())
      const scope = t.invocation({ fingerprint: 'f1:bb' })
      expect(await settle(scope, calls.claim, scope.request)).toEqual({ kind: 'FINGERPRINT_MISMATCH' })
    },
  },
  {
    call: 'claim',
    answer: 'answered RECOVERY_REQUIRED',
    leadsTo: 'RECOVERY_REQUIRED with the reason',
    run: async (t) => {
      const first = t.invocation()
      await settle(first, calls.markFailed, { hold: await hold(first), failure: FailureKind.UNKNOWN })
      const scope = t.invocation()
      expect(await settle(scope, calls.claim, scope.request)).toEqual({
        kind: 'RECOVERY_REQUIRED',
        reason: 'ABANDONED',
      })
    },
  },
  {
    call: 'claim',
    answer: 'answered IN_PROGRESS',
    leadsTo: 'IN_PROGRESS with the lease left',
    run: async (t) => {
      await hold(t.invocation())
      const scope = t.invocation()
      const verdict = await settle(scope, calls.claim, scope.request)
      expect(verdict).toMatchObject({ kind: 'IN_PROGRESS' })
      expect(verdict.kind === 'IN_PROGRESS' && verdict.retryAfterMs).toBeGreaterThan(LEASE_MS - 1_000)
    },
  },
  {
    call: 'claim',
    answer: 'not sent, the first time',
    leadsTo: 'STORE_UNAVAILABLE at once, no re-send',
    run: async (t) => {
      const scope = t.invocation()
      t.store.inject('claim', 'not-sent')
      const verdict = await settle(scope, calls.claim, scope.request)
      expect(verdict).toMatchObject({ kind: 'STORE_UNAVAILABLE', retryAfterMs: 1_000 })
      expect(verdict.kind === 'STORE_UNAVAILABLE' && verdict.cause).toBeInstanceOf(StoreUnavailableError)
      expect(t.store.applied.claim).toBe(0)
    },
  },
  {
    call: 'claim',
    answer: 'not sent, after a send that may have landed',
    leadsTo: 're-sent',
    run: async (t) => {
      const scope = t.invocation()
      t.store.inject('claim', 'dropped', 'not-sent')
      t.store.inject('inspect', 'not-sent')
      expect(await settle(scope, calls.claim, scope.request)).toMatchObject({ kind: 'HELD' })
      expect(t.store.applied.claim).toBe(1)
    },
  },
  {
    call: 'claim',
    answer: 'lost; inspect: ours EXECUTING',
    leadsTo: 'held (our claim landed), not re-sent',
    run: async (t) => {
      const scope = t.invocation()
      t.store.inject('claim', 'lost-reply')
      expect(await settle(scope, calls.claim, scope.request)).toMatchObject({ kind: 'HELD', hold: { attempt: 1 } })
      expect(t.store.applied.claim).toBe(1)
      expect(t.events).toContainEqual({ type: 'reconcile', call: 'claim', found: 'EXECUTING' })
    },
  },
  {
    call: 'claim',
    answer: 'lost; inspect: absent',
    leadsTo: 're-sent',
    run: async (t) => {
      const scope = t.invocation()
      t.store.inject('claim', 'dropped')
      expect(await settle(scope, calls.claim, scope.request)).toMatchObject({ kind: 'HELD' })
      expect(t.store.applied).toMatchObject({ claim: 1, inspect: 1 })
    },
  },
  {
    call: 'claim',
    answer: 'lost; inspect fails too',
    leadsTo: 're-sent (the store answers REPLAYED_ACQUIRE: held)',
    run: async (t) => {
      const scope = t.invocation()
      t.store.inject('claim', 'lost-reply')
      t.store.inject('inspect', 'not-sent')
      expect(await settle(scope, calls.claim, scope.request)).toMatchObject({ kind: 'HELD', hold: { attempt: 1 } })
      expect(t.events).toContainEqual({ type: 'claim', result: 'REPLAYED_ACQUIRE', attempt: 1 })
    },
  },
  {
    call: 'claim',
    answer: 'spent (every send lost)',
    leadsTo: 'STORE_UNAVAILABLE; the claim is settled in the background',
    run: async (t) => {
      const scope = t.invocation()
      t.store.block('claim', 'dropped')
      t.store.block('inspect', 'not-sent')
      const verdict = await settle(scope, calls.claim, scope.request)
      expect(verdict).toMatchObject({ kind: 'STORE_UNAVAILABLE' })
      expect(t.store.applied.claim).toBe(0)
    },
  },
  {
    call: 'claim',
    answer: 'refused (a malformed request)',
    leadsTo: 'thrown to the caller',
    run: async (t) => {
      const scope = t.invocation({ owner: 'not-a-token' })
      await expect(settle(scope, calls.claim, scope.request)).rejects.toMatchObject({
        code: ErrorCode.INVALID_ARGUMENT,
      })
    },
  },
  // start
  {
    call: 'start',
    answer: 'answered OK',
    leadsTo: 'held EXECUTING at the next rev',
    run: async (t) => {
      const scope = t.invocation({ start: false })
      const claimed = await hold(scope)
      expect(claimed.state).toBe(RecordState.CLAIMED)
      expect(await settle(scope, calls.start, claimed)).toEqual({
        kind: 'HELD',
        hold: { ...claimed, state: RecordState.EXECUTING, rev: claimed.rev + 1 },
      })
    },
  },
  {
    call: 'start',
    answer: 'answered ALREADY (a re-send of a start that landed)',
    leadsTo: 'held EXECUTING',
    run: async (t) => {
      const scope = t.invocation({ start: false })
      const claimed = await hold(scope)
      await t.inner.start(claimed, scope.policy)
      expect(await settle(scope, calls.start, claimed)).toMatchObject({
        kind: 'HELD',
        hold: { state: RecordState.EXECUTING },
      })
    },
  },
  {
    call: 'start',
    answer: 'answered refused (WRONG_STATE, NOT_OWNER)',
    leadsTo: 'LOST: claim again',
    run: async (t) => {
      const scope = t.invocation({ start: false })
      const claimed = await hold(scope)
      expect(await settle(scope, calls.start, { ...claimed, owner: newOwnerToken() })).toEqual({ kind: 'LOST' })
      expect(await settle(scope, calls.start, { ...claimed, rev: claimed.rev + 5 })).toEqual({ kind: 'LOST' })
    },
  },
  {
    call: 'start',
    answer: 'not sent',
    leadsTo: 're-sent',
    run: async (t) => {
      const scope = t.invocation({ start: false })
      const claimed = await hold(scope)
      t.store.inject('start', 'not-sent')
      expect(await settle(scope, calls.start, claimed)).toMatchObject({ kind: 'HELD' })
      expect(t.store.applied.start).toBe(1)
    },
  },
  {
    call: 'start',
    answer: 'lost; inspect: ours EXECUTING',
    leadsTo: 'held, not re-sent',
    run: async (t) => {
      const scope = t.invocation({ start: false })
      const claimed = await hold(scope)
      t.store.inject('start', 'lost-reply')
      expect(await settle(scope, calls.start, claimed)).toMatchObject({
        kind: 'HELD',
        hold: { state: RecordState.EXECUTING },
      })
      expect(t.store.applied.start).toBe(1)
    },
  },
  {
    call: 'start',
    answer: 'lost; inspect: ours CLAIMED',
    leadsTo: 're-sent',
    run: async (t) => {
      const scope = t.invocation({ start: false })
      const claimed = await hold(scope)
      t.store.inject('start', 'dropped')
      expect(await settle(scope, calls.start, claimed)).toMatchObject({
        kind: 'HELD',
        hold: { state: RecordState.EXECUTING },
      })
      expect(t.store.applied.start).toBe(1)
    },
  },
  {
    call: 'start',
    answer: 'lost; inspect: not ours',
    leadsTo: 'LOST: claim again',
    run: async (t) => {
      const scope = t.invocation({ start: false })
      const claimed = await hold(scope)
      await takeOver(t, scope, claimed)
      t.store.inject('start', 'dropped')
      expect(await settle(scope, calls.start, claimed)).toEqual({ kind: 'LOST' })
      expect(t.store.applied.start).toBe(0)
    },
  },
  {
    call: 'start',
    answer: 'spent',
    leadsTo: 'STORE_UNAVAILABLE; settled in the background',
    run: async (t) => {
      const scope = t.invocation({ start: false })
      const claimed = await hold(scope)
      t.store.block('start', 'dropped')
      t.store.block('inspect', 'not-sent')
      expect(await settle(scope, calls.start, claimed)).toMatchObject({ kind: 'STORE_UNAVAILABLE' })
    },
  },
  {
    call: 'start',
    answer: 'refused (a malformed reference)',
    leadsTo: 'thrown to the caller',
    run: async (t) => {
      const scope = t.invocation({ start: false })
      const claimed = await hold(scope)
      await expect(settle(scope, calls.start, { ...claimed, rev: 0 })).rejects.toMatchObject({
        code: ErrorCode.INVALID_ARGUMENT,
      })
    },
  },
  // complete
  {
    call: 'complete',
    answer: 'answered OK',
    leadsTo: 'recorded',
    run: async (t) => {
      const scope = t.invocation()
      expect(await settle(scope, calls.complete, { hold: await hold(scope), encoded: BYTES })).toEqual({
        kind: 'RECORDED',
      })
    },
  },
  {
    call: 'complete',
    answer: 'answered ALREADY',
    leadsTo: 'recorded',
    run: async (t) => {
      const scope = t.invocation()
      const held = await hold(scope)
      await t.inner.complete(held, BYTES, scope.policy)
      expect(await settle(scope, calls.complete, { hold: held, encoded: BYTES })).toEqual({ kind: 'RECORDED' })
    },
  },
  {
    call: 'complete',
    answer: 'answered refused',
    leadsTo: 'UNRECORDED, LOST_OWNERSHIP',
    run: async (t) => {
      const scope = t.invocation()
      const held = await hold(scope)
      expect(
        await settle(scope, calls.complete, { hold: { ...held, owner: newOwnerToken() }, encoded: BYTES }),
      ).toEqual({
        kind: 'UNRECORDED',
        reason: UnrecordedReason.LOST_OWNERSHIP,
      })
    },
  },
  {
    call: 'complete',
    answer: 'not sent',
    leadsTo: 're-sent',
    run: async (t) => {
      const scope = t.invocation()
      const held = await hold(scope)
      t.store.inject('complete', 'not-sent', 'not-sent')
      expect(await settle(scope, calls.complete, { hold: held, encoded: BYTES })).toEqual({ kind: 'RECORDED' })
      expect(t.store.applied.complete).toBe(1)
    },
  },
  {
    call: 'complete',
    answer: 'lost; inspect: ours COMPLETED with our bytes',
    leadsTo: 'recorded, not re-sent',
    run: async (t) => {
      const scope = t.invocation()
      const held = await hold(scope)
      t.store.inject('complete', 'lost-reply')
      expect(await settle(scope, calls.complete, { hold: held, encoded: BYTES })).toEqual({ kind: 'RECORDED' })
      expect(t.store.applied.complete).toBe(1)
    },
  },
  {
    call: 'complete',
    answer: 'lost; inspect: ours COMPLETED with other bytes',
    leadsTo: 'UNRECORDED, CONFLICT',
    run: async (t) => {
      const scope = t.invocation()
      const held = await hold(scope)
      await t.inner.complete(held, OTHER, scope.policy)
      t.store.inject('complete', 'dropped')
      expect(await settle(scope, calls.complete, { hold: held, encoded: BYTES })).toEqual({
        kind: 'UNRECORDED',
        reason: UnrecordedReason.CONFLICT,
      })
    },
  },
  {
    call: 'complete',
    answer: 'lost; inspect: ours EXECUTING at our rev',
    leadsTo: 're-sent',
    run: async (t) => {
      const scope = t.invocation()
      const held = await hold(scope)
      t.store.inject('complete', 'dropped')
      expect(await settle(scope, calls.complete, { hold: held, encoded: BYTES })).toEqual({ kind: 'RECORDED' })
      expect(t.store.applied.complete).toBe(1)
    },
  },
  {
    call: 'complete',
    answer: 'lost; inspect: not ours',
    leadsTo: 'UNRECORDED, LOST_OWNERSHIP',
    run: async (t) => {
      const scope = t.invocation()
      const held = await hold(scope)
      t.store.inject('complete', 'dropped')
      expect(
        await settle(scope, calls.complete, { hold: { ...held, owner: newOwnerToken() }, encoded: BYTES }),
      ).toEqual({
        kind: 'UNRECORDED',
        reason: UnrecordedReason.LOST_OWNERSHIP,
      })
    },
  },
  {
    call: 'complete',
    answer: 'spent',
    leadsTo: 'UNRECORDED, STORE_UNAVAILABLE, with the last error',
    run: async (t) => {
      const scope = t.invocation()
      const held = await hold(scope)
      t.store.block('complete', 'not-sent')
      const verdict = await settle(scope, calls.complete, { hold: held, encoded: BYTES })
      expect(verdict).toMatchObject({ kind: 'UNRECORDED', reason: UnrecordedReason.STORE_UNAVAILABLE })
      expect(verdict.kind === 'UNRECORDED' && verdict.cause).toBeInstanceOf(StoreUnavailableError)
      expect(t.events.filter((e) => e.type === 'store-error' && e.call === 'complete').length).toBeGreaterThan(2)
    },
  },
  {
    call: 'complete',
    answer: 'refused (a malformed reference)',
    leadsTo: 'UNRECORDED, STORE_UNAVAILABLE, not re-sent',
    run: async (t) => {
      const scope = t.invocation()
      const held = await hold(scope)
      const verdict = await settle(scope, calls.complete, { hold: { ...held, rev: 0 }, encoded: BYTES })
      expect(verdict).toMatchObject({ kind: 'UNRECORDED', reason: UnrecordedReason.STORE_UNAVAILABLE })
      expect(verdict.kind === 'UNRECORDED' && verdict.cause).toMatchObject({ code: ErrorCode.INVALID_ARGUMENT })
    },
  },
  // markFailed
  {
    call: 'markFailed',
    answer: 'answered OK',
    leadsTo: 'recorded (FAILED_RETRYABLE or ABANDONED)',
    run: async (t) => {
      for (const failure of [FailureKind.RETRYABLE, FailureKind.UNKNOWN]) {
        const scope = t.invocation({ key: `test:idem:1:d1:op:${newOwnerToken()}` })
        expect(await settle(scope, calls.markFailed, { hold: await hold(scope), failure })).toBe(true)
      }
      expect(t.events.filter((e) => e.type === 'recorded').map((e) => e.type === 'recorded' && e.state)).toEqual([
        RecordState.FAILED_RETRYABLE,
        RecordState.ABANDONED,
      ])
    },
  },
  {
    call: 'markFailed',
    answer: 'answered refused',
    leadsTo: 'not recorded',
    run: async (t) => {
      const scope = t.invocation()
      const held = await hold(scope)
      expect(
        await settle(scope, calls.markFailed, {
          hold: { ...held, owner: newOwnerToken() },
          failure: FailureKind.UNKNOWN,
        }),
      ).toBe(false)
    },
  },
  {
    call: 'markFailed',
    answer: 'not sent',
    leadsTo: 're-sent',
    run: async (t) => {
      const scope = t.invocation()
      const held = await hold(scope)
      t.store.inject('markFailed', 'not-sent')
      expect(await settle(scope, calls.markFailed, { hold: held, failure: FailureKind.RETRYABLE })).toBe(true)
      expect(t.store.applied.markFailed).toBe(1)
    },
  },
  {
    call: 'markFailed',
    answer: 'lost; inspect: ours in the target state',
    leadsTo: 'recorded, not re-sent',
    run: async (t) => {
      const scope = t.invocation()
      const held = await hold(scope)
      t.store.inject('markFailed', 'lost-reply')
      expect(await settle(scope, calls.markFailed, { hold: held, failure: FailureKind.UNKNOWN })).toBe(true)
      expect(t.store.applied.markFailed).toBe(1)
    },
  },
  {
    call: 'markFailed',
    answer: 'lost; inspect: ours EXECUTING at our rev',
    leadsTo: 're-sent',
    run: async (t) => {
      const scope = t.invocation()
      const held = await hold(scope)
      t.store.inject('markFailed', 'dropped')
      expect(await settle(scope, calls.markFailed, { hold: held, failure: FailureKind.RETRYABLE })).toBe(true)
      expect(t.store.applied.markFailed).toBe(1)
    },
  },
  {
    call: 'markFailed',
    answer: 'lost; inspect: anything else',
    leadsTo: 'not recorded',
    run: async (t) => {
      const scope = t.invocation()
      const held = await hold(scope)
      await t.inner.complete(held, BYTES, scope.policy)
      t.store.inject('markFailed', 'dropped')
      expect(await settle(scope, calls.markFailed, { hold: held, failure: FailureKind.RETRYABLE })).toBe(false)
    },
  },
  {
    call: 'markFailed',
    answer: 'spent',
    leadsTo: 'not recorded',
    run: async (t) => {
      const scope = t.invocation()
      const held = await hold(scope)
      t.store.block('markFailed', 'not-sent')
      expect(await settle(scope, calls.markFailed, { hold: held, failure: FailureKind.RETRYABLE })).toBe(false)
    },
  },
  {
    call: 'markFailed',
    answer: 'refused (a malformed reference)',
    leadsTo: 'not recorded, not re-sent',
    run: async (t) => {
      const scope = t.invocation()
      const held = await hold(scope)
      expect(await settle(scope, calls.markFailed, { hold: { ...held, rev: 0 }, failure: FailureKind.RETRYABLE })).toBe(
        false,
      )
      expect(t.store.applied.markFailed).toBe(0)
    },
  },
  // commit
  {
    call: 'commit',
    answer: 'answered OK',
    leadsTo: 'recorded',
    run: async (t) => {
      const scope = t.invocation()
      const args = { transaction: transactionOf(t.store), hold: await hold(scope), encoded: BYTES }
      expect(await settle(scope, calls.commit, args)).toEqual({ kind: 'RECORDED' })
    },
  },
  {
    call: 'commit',
    answer: 'answered refused (ALREADY included: a commit is sent once)',
    leadsTo: 'UNRECORDED, LOST_OWNERSHIP',
    run: async (t) => {
      const scope = t.invocation()
      const held = await hold(scope)
      await t.inner.complete(held, BYTES, scope.policy)
      const args = { transaction: transactionOf(t.store), hold: held, encoded: BYTES }
      expect(await settle(scope, calls.commit, args)).toEqual({
        kind: 'UNRECORDED',
        reason: UnrecordedReason.LOST_OWNERSHIP,
      })
    },
  },
  {
    call: 'commit',
    answer: 'not sent (rolled back)',
    leadsTo: 'ROLLED_BACK, not re-sent',
    run: async (t) => {
      const scope = t.invocation()
      const args = { transaction: transactionOf(t.store), hold: await hold(scope), encoded: BYTES }
      t.store.inject('complete', 'not-sent')
      expect(await settle(scope, calls.commit, args)).toMatchObject({ kind: 'ROLLED_BACK' })
      expect(t.store.applied.complete).toBe(0)
    },
  },
  {
    call: 'commit',
    answer: 'refused (the transaction was ended by the action)',
    leadsTo: 'ENDED: its writes may have committed',
    run: async (t) => {
      const scope = t.invocation()
      const held = await hold(scope)
      const ended = new Error('the action committed the transaction itself')
      const transaction = { ...transactionOf(t.store), commit: () => Promise.reject(ended) }
      expect(await settle(scope, calls.commit, { transaction, hold: held, encoded: BYTES })).toEqual({
        kind: 'ENDED',
        cause: ended,
      })
    },
  },
  {
    call: 'commit',
    answer: 'lost; inspect: ours COMPLETED with our bytes, or other bytes',
    leadsTo: 'recorded, or UNRECORDED CONFLICT',
    run: async (t) => {
      const scope = t.invocation()
      t.store.inject('complete', 'lost-reply')
      const args = { transaction: transactionOf(t.store), hold: await hold(scope), encoded: BYTES }
      expect(await settle(scope, calls.commit, args)).toEqual({ kind: 'RECORDED' })
      t.store.inject('complete', 'lost-reply')
      const other = t.invocation({ key: `test:idem:1:d1:op:${newOwnerToken()}` })
      const otherArgs = { transaction: transactionOf(t.store), hold: await hold(other), encoded: OTHER }
      await t.inner.complete(otherArgs.hold, BYTES, other.policy)
      t.store.inject('complete', 'dropped')
      expect(await settle(other, calls.commit, otherArgs)).toEqual({
        kind: 'UNRECORDED',
        reason: UnrecordedReason.CONFLICT,
      })
    },
  },
  {
    call: 'commit',
    answer: 'lost; inspect: ours EXECUTING at our attempt',
    leadsTo: 'UNRECORDED, STORE_UNAVAILABLE at once (undecided: never re-sent)',
    run: async (t) => {
      const scope = t.invocation()
      const args = { transaction: transactionOf(t.store), hold: await hold(scope), encoded: BYTES }
      t.store.inject('complete', 'dropped')
      expect(await settle(scope, calls.commit, args)).toMatchObject({
        kind: 'UNRECORDED',
        reason: UnrecordedReason.STORE_UNAVAILABLE,
      })
      expect(t.store.applied).toMatchObject({ complete: 0, inspect: 1 })
    },
  },
  {
    call: 'commit',
    answer: 'lost; inspect: not ours',
    leadsTo: 'UNRECORDED, LOST_OWNERSHIP',
    run: async (t) => {
      const scope = t.invocation()
      const held = await hold(scope)
      await takeOver(t, scope, held)
      const args = { transaction: transactionOf(t.store), hold: held, encoded: BYTES }
      t.store.inject('complete', 'dropped')
      expect(await settle(scope, calls.commit, args)).toEqual({
        kind: 'UNRECORDED',
        reason: UnrecordedReason.LOST_OWNERSHIP,
      })
    },
  },
  {
    call: 'commit',
    answer: 'spent (lost, and no inspect answers)',
    leadsTo: 'UNRECORDED, STORE_UNAVAILABLE; inspected again, never re-sent',
    run: async (t) => {
      const scope = t.invocation()
      const args = { transaction: transactionOf(t.store), hold: await hold(scope), encoded: BYTES }
      t.store.inject('complete', 'dropped')
      t.store.block('inspect', 'not-sent')
      expect(await settle(scope, calls.commit, args)).toMatchObject({
        kind: 'UNRECORDED',
        reason: UnrecordedReason.STORE_UNAVAILABLE,
      })
      expect(t.events.filter((e) => e.type === 'store-error' && e.call === 'complete')).toHaveLength(1)
      expect(t.events.filter((e) => e.type === 'store-error' && e.call === 'inspect').length).toBeGreaterThan(2)
    },
  },
]

describe('the store calls of a run: every call × every kind of answer', () => {
  it.each(TABLE)('$call | $answer → $leadsTo', async (row) => {
    await row.run(setup())
  })

  it('has a row for every call', () => {
    expect(new Set(TABLE.map((row) => row.call))).toEqual(new Set(Object.keys(calls)))
  })
})
