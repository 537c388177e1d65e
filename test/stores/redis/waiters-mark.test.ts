/**
 * Publish only when someone waits (docs/waiting.md, docs/design.md "Waiting duplicates"): the
 * Redis scripts that end an execution (complete, markFailed, release) SPUBLISH only when a
 * claim that will wait (`wait: true`, `inFlight: { waitMs }`) found the execution in progress and
 * marked the record. Counted on a real redis-server: `INFO commandstats` (cmdstat_spublish,
 * cmdstat_setrange) and a subscriber on the key's shard channel, which must see nothing but the
 * test's own closing message when nobody waits.
 */
import { randomBytes } from 'node:crypto'
import type { Redis } from 'ioredis'
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { commandCalls } from '../../../scripts/redis-server.js'
import { ClaimReply, FailureKind, RecordState, TransitionReply } from '../../../src/core/record.js'
import type { ClaimRequest, ClaimResult, IdempotencyStore, OwnerRef } from '../../../src/core/store.js'
import { encodeRecord } from '../../../src/stores/record-layout.js'
import { type RedisStore, redisStore } from '../../../src/stores/redis/index.js'
import { claimRequest } from '../../../src/testing/index.js'
import { countingStore } from '../../helpers/counting-store.js'
import { gate, harness, sleep } from '../../helpers/executor-harness.js'
import { redisFixture } from './fixture.js'

const TIMES = { leaseMs: 10_000, replayWindowMs: 60_000, failureRetentionMs: 30_000 } as const
/** The byte offset of the waiters' mark in a record (the replayUntil double). */
const MARK_AT = 26

const server = redisFixture({ flush: 'data' })
let client: Redis
let subscriber: Redis
let store: RedisStore
/** The messages the subscriber received, as `channel message`, in order. */
let messages: string[] = []
let closing: (() => void) | undefined

beforeAll(async () => {
  client = server.client()
  subscriber = server.client()
  subscriber.on('smessage', (channel: string, message: string) => {
    messages.push(`${channel} ${message}`)
    if (message === 'closing') closing?.()
  })
  await client.ping()
})

beforeEach(() => {
  store = redisStore({ redis: client, keyPrefix: 'mark' })
  messages = []
})

afterEach(async () => {
  await store.close()
  // Valkey 8 answers NOSUB to an SUNSUBSCRIBE with nothing subscribed; Redis 7.0 answers it.
  await subscriber.sunsubscribe().catch((error: unknown) => {
    if (!String(error).includes('NOSUB')) throw error
  })
})

const owner = () => randomBytes(32).toString('hex')
const newKey = () => `mark:idem:1:d1:op:${randomBytes(8).toString('hex')}`

function request(key: string, overrides: Partial<ClaimRequest> = {}): ClaimRequest {
  return claimRequest(key, TIMES, { fingerprint: 'f1:aa', ...overrides })
}

/** Claims and expects to hold: the hold's reference. */
async function hold(s: IdempotencyStore, claim: ClaimRequest): Promise<OwnerRef> {
  const result: ClaimResult = await s.claim(claim)
  if (result.kind !== ClaimReply.ACQUIRED && result.kind !== ClaimReply.TAKEN_OVER) throw new Error(result.kind)
  return { key: claim.key, owner: claim.owner, attempt: result.attempt, rev: result.rev }
}

/** The waiters' mark as stored: the double at MARK_AT. */
async function markOf(key: string): Promise<number> {
  const bytes = await server.admin.getBuffer(key)
  if (bytes === null) throw new Error(`no record under ${key}`)
  return bytes.readDoubleBE(MARK_AT)
}

/**
 * Every message the subscriber got on `keys`, up to a closing message the test publishes itself
 * on the last key: SPUBLISH from one server reaches one subscriber connection in order, so what
 * the scripts published came before it.
 */
async function received(keys: readonly string[]): Promise<string[]> {
  const last = keys.at(-1) as string
  const done = new Promise<void>((resolve) => {
    closing = resolve
  })
  await server.admin.call('SPUBLISH', last, 'closing')
  await done
  return messages.filter((message) => message !== `${last} closing`)
}

describe('the Redis store publishes only when a waiting claim marked the record', () => {
  it('a completion, a failure mark and a release that nobody waits for send no SPUBLISH', async () => {
    const [completed, failed, released] = [newKey(), newKey(), newKey()]
    await subscriber.ssubscribe(completed, failed, released)
    await server.admin.config('RESETSTAT')

    const first = await hold(store, request(completed))
    // A duplicate that does not wait (409 at once) marks nothing.
    expect((await store.claim(request(completed))).kind).toBe(ClaimReply.IN_PROGRESS)
    expect(await markOf(completed)).toBe(0)
    expect((await store.complete(first, Buffer.from('{"n":1}'), TIMES)).kind).toBe(TransitionReply.OK)

    const second = await hold(store, request(failed))
    expect((await store.markFailed(second, FailureKind.RETRYABLE, TIMES)).kind).toBe(TransitionReply.OK)

    const third = await hold(store, request(released, { start: false }))
    expect((await store.release(third)).kind).toBe(TransitionReply.OK)

    const calls = await commandCalls(server.admin)
    // Three claims of new keys and the duplicate's (plain SETs: the duplicate is answered from the
    // record its SET hands back, test/stores/redis/fast-in-progress.test.ts), the three ends: scripts.
    expect(calls.set ?? 0).toBeGreaterThanOrEqual(4)
    expect((calls.evalsha ?? 0) + (calls.eval ?? 0) + (calls.fcall ?? 0)).toBeGreaterThanOrEqual(3)
    expect(calls.spublish ?? 0).toBe(0)
    expect(calls.setrange ?? 0).toBe(0)
    expect(await received([completed, failed, released])).toEqual([])
  })

  it('a claim that will wait marks the record in place, once; the completion then publishes to its subscriber', async () => {
    const key = newKey()
    await subscriber.ssubscribe(key)
    const first = await hold(store, request(key))
    const before = (await server.admin.getBuffer(key)) as Buffer
    const expiry = await server.admin.call('PEXPIRETIME', key)
    await server.admin.config('RESETSTAT')

    expect((await store.claim(request(key, { wait: true }))).kind).toBe(ClaimReply.IN_PROGRESS)
    expect((await store.claim(request(key, { wait: true }))).kind).toBe(ClaimReply.IN_PROGRESS)
    const after = (await server.admin.getBuffer(key)) as Buffer
    // Only the mark changed: the same bytes around it, the same key expiry; one SETRANGE for two waiters.
    expect(after.readDoubleBE(MARK_AT)).toBe(1)
    expect(Buffer.concat([after.subarray(0, MARK_AT), after.subarray(MARK_AT + 8)])).toEqual(
      Buffer.concat([before.subarray(0, MARK_AT), before.subarray(MARK_AT + 8)]),
    )
    expect(await server.admin.call('PEXPIRETIME', key)).toBe(expiry)
    expect((await commandCalls(server.admin)).setrange).toBe(1)

    // What the store shows of it is unchanged: replayUntil 0 while it runs.
    expect((await store.read(key)).record).toMatchObject({ state: RecordState.EXECUTING, replayUntil: 0 })
    expect(await store.inspect(key, owner())).toMatchObject({ kind: RecordState.EXECUTING })

    expect((await store.complete(first, Buffer.from('{"n":1}'), TIMES)).kind).toBe(TransitionReply.OK)
    expect((await commandCalls(server.admin)).spublish).toBe(1)
    expect(await received([key])).toEqual([`${key} COMPLETED`])
    // The completion wrote the real replayUntil in the mark's place.
    const read = await store.read(key)
    expect(read.record?.replayUntil).toBeGreaterThan(read.now)
  })

  it('keeps the mark through start, renew and a takeover; a marked failure and a marked release publish', async () => {
    const key = newKey()
    const releasedKey = newKey()
    await subscriber.ssubscribe(key, releasedKey)

    // CLAIMED, marked by a waiter, then started and renewed by its holder.
    const claimed = await hold(store, request(key, { start: false }))
    expect((await store.claim(request(key, { wait: true }))).kind).toBe(ClaimReply.IN_PROGRESS)
    const started = await store.start(claimed, TIMES)
    if (started.kind !== TransitionReply.OK) throw new Error(started.kind)
    expect(await markOf(key)).toBe(1)
    expect((await store.renew(claimed, TIMES)).kind).toBe(TransitionReply.OK)
    expect(await markOf(key)).toBe(1)
    const executing = { ...claimed, rev: started.rev }
    expect((await store.markFailed(executing, FailureKind.RETRYABLE, TIMES)).kind).toBe(TransitionReply.OK)

    // The next attempt takes it over and keeps the mark: the waiters wait for it as well.
    const next = await hold(store, request(key))
    expect(next.attempt).toBe(2)
    expect(await markOf(key)).toBe(1)
    expect((await store.complete(next, Buffer.from('{"n":2}'), TIMES)).kind).toBe(TransitionReply.OK)

    const toRelease = await hold(store, request(releasedKey, { start: false }))
    expect((await store.claim(request(releasedKey, { wait: true }))).kind).toBe(ClaimReply.IN_PROGRESS)
    expect((await store.release(toRelease)).kind).toBe(TransitionReply.OK)

    expect(await received([key, releasedKey])).toEqual([
      `${key} FAILED_RETRYABLE`,
      `${key} COMPLETED`,
      `${releasedKey} released`,
    ])
  })

  it('replaces a marked record from what read() showed (the mark is not a change)', async () => {
    const key = newKey()
    await hold(store, request(key))
    expect((await store.claim(request(key, { wait: true }))).kind).toBe(ClaimReply.IN_PROGRESS)
    const { record, now } = await store.read(key)
    if (record === undefined) throw new Error('no record')
    const next = { ...record, state: RecordState.FAILED_RETRYABLE, rev: record.rev + 1, expiresAt: now + 30_000 }
    expect(await store.replace(key, record, next)).toBe(true)
    expect((await store.read(key)).record).toMatchObject({ state: RecordState.FAILED_RETRYABLE })
  })

  it('a running record written without a mark (an earlier version) publishes once a waiting claim marks it', async () => {
    const [unmarked, marked] = [newKey(), newKey()]
    await subscriber.ssubscribe(unmarked, marked)
    const [seconds] = await server.admin.time()
    const now = Number(seconds) * 1000
    const holder = owner()
    for (const key of [unmarked, marked]) {
      const record = encodeRecord({
        state: RecordState.EXECUTING,
        owner: holder,
        attempt: 1,
        rev: 2,
        leaseUntil: now + 10_000,
        replayUntil: 0,
        expiresAt: now + 40_000,
        createdAt: now,
        updatedAt: now,
        fp: 'f1:aa',
        codec: 'json-1',
        policy: '1',
        op: 'POST /orders',
        response: Buffer.alloc(0),
      })
      await server.admin.set(key, record, 'PXAT', now + 40_000)
    }
    expect((await store.claim(request(marked, { wait: true }))).kind).toBe(ClaimReply.IN_PROGRESS)
    for (const key of [unmarked, marked]) {
      const ref = { key, owner: holder, attempt: 1, rev: 2 }
      expect((await store.complete(ref, Buffer.from('{"n":1}'), TIMES)).kind).toBe(TransitionReply.OK)
    }
    expect(await received([unmarked, marked])).toEqual([`${marked} COMPLETED`])
  })
})

describe('a waiting duplicate through the executor, on the Redis store', () => {
  /** Runs a first request held open, and a duplicate with waitMs 450; opens the first once the duplicate's watch inspected. */
  async function waitFor(s: IdempotencyStore) {
    const counting = countingStore(s)
    const scope = harness(counting.store)
    const open = gate()
    const first = scope.run({ action: () => open.promise.then(() => ({ done: true })) })
    await sleep(50)
    const sent = performance.now()
    // waitMs 450: the watch's first inspect follows its subscription, the next poll comes 500 ms
    // after that, past this waiter's deadline. Only the notification can wake it in time.
    const waiter = scope.run({ inFlightWaitMs: 450 })
    for (let i = 0; i < 400 && (counting.counts.inspect ?? 0) === 0; i++) await sleep(5)
    await server.admin.config('RESETSTAT')
    const completedAt = performance.now()
    open.open()
    const answer = await waiter
    const answeredAt = performance.now()
    expect(await first).toMatchObject({ kind: 'EXECUTED' })
    return {
      answer,
      runs: scope.runs(),
      publishes: (await commandCalls(server.admin)).spublish ?? 0,
      afterCompletionMs: Math.round(answeredAt - completedAt),
      sinceSentMs: Math.round(answeredAt - sent),
      retry: () => scope.run(),
    }
  }

  it('is woken by the completion’s publish: it replays before the next poll', async () => {
    const waited = await waitFor(store)
    console.log(
      `[waiters-mark] woken by the publish: ${waited.answer.kind} ${waited.afterCompletionMs} ms after the ` +
        `completion was let go, ${waited.sinceSentMs} ms after it was sent; SPUBLISH ${waited.publishes}`,
    )
    expect(waited.answer).toMatchObject({ kind: 'REPLAYED', value: { done: true } })
    expect(waited.publishes).toBe(1)
    expect(waited.runs).toBe(1)
  })

  it('a waiter that does not mark (a version before the mark) is not notified: 409 at its deadline, the retry replays', async () => {
    // The store as a waiter of an earlier version calls it: its claims carry no `wait`.
    const unmarking = new Proxy(store, {
      get(target, name, receiver) {
        const value = Reflect.get(target, name, receiver)
        if (name === 'claim') return (claim: ClaimRequest) => target.claim({ ...claim, wait: false })
        return typeof value === 'function' ? value.bind(target) : value
      },
    }) as IdempotencyStore
    const waited = await waitFor(unmarking)
    console.log(
      `[waiters-mark] not marked: ${waited.answer.kind} ${waited.sinceSentMs} ms after it was sent; SPUBLISH ${waited.publishes}`,
    )
    expect(waited.answer).toMatchObject({ kind: 'IN_PROGRESS' })
    expect(waited.publishes).toBe(0)
    expect(await waited.retry()).toMatchObject({ kind: 'REPLAYED', value: { done: true } })
    expect(waited.runs).toBe(1)
  })
})
