/**
 * The one-command completion (`oneCommandCompletion`, src/stores/redis/one-command.ts): an
 * execution the store claimed without a script is completed with `SET ... IFEQ <the claim's
 * bytes> PX` where the server has IFEQ (Valkey 8.1, in CI's Valkey run), compare-and-set.lua
 * elsewhere (Redis 7.0, Valkey 8.0), in record layout 4; anything else goes to complete.lua. On
 * the suite's redis-server: every reader reads what it wrote, a record its claim no longer holds
 * as written is completed by complete.lua as before, and a store without the option shares the
 * Redis with one that has it without a second execution.
 */
import { randomBytes } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { commandCalls } from '../../../scripts/redis-server.js'
import type { ClaimRequest, ClaimResult } from '../../../src/core/store.js'
import { decodeRecord, RECORD_LAYOUT, RELATIVE_LAYOUT } from '../../../src/stores/record-layout.js'
import { redisStore } from '../../../src/stores/redis/index.js'
import { claimRequest as contractClaim } from '../../../src/testing/index.js'
import { sleep } from '../../helpers/sleep.js'
import { ORDER_CLAIM, ORDER_TIMES, serverNow } from '../../helpers/stores.js'
import { redisFixture } from './fixture.js'

const server = redisFixture({ flush: 'data-and-scripts' })

const owner = () => randomBytes(32).toString('hex')
const keyOf = (name: string) => `oc:idem:1:d1:op:${name}-${randomBytes(4).toString('hex')}`
const claimRequest = (key: string, who: string, overrides: Partial<ClaimRequest> = {}) =>
  contractClaim(key, ORDER_TIMES, { ...ORDER_CLAIM, owner: who, start: true, ...overrides })
const ref = (key: string, who: string) => ({ key, owner: who, attempt: 1, rev: 1 })
const body = (text: string) => Buffer.from(text)
const replayed = (result: ClaimResult) =>
  result.kind === 'COMPLETED_REPLAY' ? Buffer.from(result.response).toString() : result.kind

/** Whether the server runs SET ... IFEQ (Valkey 8.1, Redis 8.4): asked on a key of its own. */
async function hasIfEqual(): Promise<boolean> {
  try {
    await server.admin.set(keyOf('probe'), 'v', 'IFEQ' as never, 'x' as never)
    return true
  } catch (error) {
    if (/syntax error/i.test((error as Error).message)) return false
    throw error
  }
}

/**
 * A store on the suite's server, its scripts loaded and, with the option, its first completion
 * done: on a server without IFEQ that one finds it out (complete.lua writes it) and the next
 * ones send compare-and-set.lua.
 */
async function store(oneCommandCompletion: boolean) {
  const redis = server.client()
  await redis.ping()
  const s = redisStore({ redis, keyPrefix: 'oc', oneCommandCompletion })
  const key = keyOf('warm')
  const holder = owner()
  expect((await s.claim(claimRequest(key, holder))).kind).toBe('ACQUIRED')
  expect(await s.complete(ref(key, holder), body('{}'), ORDER_TIMES)).toEqual({ kind: 'OK', rev: 2 })
  const first = await server.admin.getBuffer(key)
  return { s, first: first?.[0] }
}

/** The record under `key` as Redis holds it: its layout byte and the record read with the key's expiry. */
async function stored(key: string) {
  const [raw, expireTime] = await Promise.all([server.admin.getBuffer(key), server.admin.pexpiretime(key)])
  return { layout: raw?.[0], record: decodeRecord(raw as Buffer, expireTime), expireTime }
}

/**
 * The commands Redis ran for `send`: SETs (a script's own included), script calls, and TIMEs
 * (complete.lua reads the clock; compare-and-set.lua does not).
 */
async function callsIn(send: () => Promise<unknown>): Promise<{ set: number; scripts: number; time: number }> {
  const before = await commandCalls(server.admin)
  await send()
  const after = await commandCalls(server.admin)
  const count = (command: string) => (after[command] ?? 0) - (before[command] ?? 0)
  return { set: count('set'), scripts: count('evalsha') + count('eval') + count('fcall'), time: count('time') }
}

describe('the one-command completion on Redis', () => {
  it('completes a claim with one command in layout 4, and every reader reads the record it wrote', async () => {
    const ifeq = await hasIfEqual()
    const { s, first } = await store(true)
    // The first completion finds out whether the server has IFEQ: complete.lua wrote it where not.
    expect(first).toBe(ifeq ? RELATIVE_LAYOUT : RECORD_LAYOUT)
    const key = keyOf('completed')
    const holder = owner()
    const before = await serverNow(server.admin)
    expect((await s.claim(claimRequest(key, holder))).kind).toBe('ACQUIRED')
    await sleep(30)

    let done: unknown
    const calls = await callsIn(async () => (done = await s.complete(ref(key, holder), body('{"id":1}'), ORDER_TIMES)))
    expect(done).toEqual({ kind: 'OK', rev: 2 })
    expect(calls).toEqual({ set: 1, scripts: ifeq ? 0 : 1, time: 0 })
    const after = await serverNow(server.admin)

    const { layout, record, expireTime } = await stored(key)
    expect(layout).toBe(RELATIVE_LAYOUT)
    expect(record).toMatchObject({ state: 'COMPLETED', attempt: 1, rev: 2, owner: holder, fp: ORDER_CLAIM.fingerprint })
    expect(Buffer.from(record.response).toString()).toBe('{"id":1}')
    // The window, and the record, end 1 ms after the key, set by Redis from the PX.
    expect(record.replayUntil).toBe(expireTime + 1)
    expect(record.expiresAt).toBe(expireTime + 1)
    expect(record.updatedAt).toBe(record.expiresAt - ORDER_TIMES.replayWindowMs)
    expect(record.updatedAt).toBeGreaterThanOrEqual(before)
    expect(record.updatedAt).toBeLessThanOrEqual(after)
    // createdAt: the claim, dated by the store's own clock within a round trip; the lease from it.
    expect(record.createdAt).toBeGreaterThanOrEqual(before - 25)
    expect(record.createdAt).toBeLessThanOrEqual(record.updatedAt - 25)
    expect(record.leaseUntil).toBe(record.createdAt + ORDER_TIMES.leaseMs)

    // The claim without a script replays it, and refuses another body; claim.lua (a claim that
    // brings an old fingerprint goes to it) replays it too; inspect and the operators' read see it.
    expect(replayed(await s.claim(claimRequest(key, owner())))).toBe('{"id":1}')
    expect((await s.claim(claimRequest(key, owner(), { fingerprint: 'fp-2' }))).kind).toBe('FINGERPRINT_MISMATCH')
    const legacy = await s.claim(claimRequest(key, owner(), { fingerprint: 'fp-new', legacyFingerprints: ['fp-1'] }))
    expect(legacy).toMatchObject({ kind: 'COMPLETED_REPLAY', replayUntil: record.replayUntil })
    expect(await s.inspect(key, holder)).toMatchObject({ kind: 'COMPLETED', mine: true, rev: 2 })
    expect((await s.read(key)).record).toEqual(record)
    // The completion sent again (a reply lost): already done, by complete.lua, nothing written.
    expect(await s.complete(ref(key, holder), body('{"id":1}'), ORDER_TIMES)).toEqual({ kind: 'ALREADY', rev: 2 })
    expect((await stored(key)).layout).toBe(RELATIVE_LAYOUT)
    await s.close()
  })

  it('leaves a record its claim no longer holds as written to complete.lua: a waiter marked it, a heartbeat renewed it, another holder took it over', async () => {
    const { s } = await store(true)

    // A duplicate that will wait marks the record in claim.lua; complete.lua writes the
    // completion and wakes the waiter.
    const marked = keyOf('marked')
    const holder = owner()
    expect((await s.claim(claimRequest(marked, holder))).kind).toBe('ACQUIRED')
    const woken = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the waiter was not woken')), 5_000)
      const ready = () => {
        void s.claim(claimRequest(marked, owner(), { wait: true })).then((waited) => {
          expect(waited.kind).toBe('IN_PROGRESS')
          void s.complete(ref(marked, holder), body('{"marked":1}'), ORDER_TIMES)
        }, reject)
      }
      s.watch(
        marked,
        () => {
          clearTimeout(timer)
          resolve()
        },
        ready,
      )
    })
    await woken
    expect((await stored(marked)).layout).toBe(RECORD_LAYOUT)
    expect(replayed(await s.claim(claimRequest(marked, owner())))).toBe('{"marked":1}')

    // Renewed by the heartbeat: written again in layout 2, completed by complete.lua.
    const renewed = keyOf('renewed')
    const renewer = owner()
    expect((await s.claim(claimRequest(renewed, renewer))).kind).toBe('ACQUIRED')
    expect((await s.renew(ref(renewed, renewer), ORDER_TIMES)).kind).toBe('OK')
    expect(await s.complete(ref(renewed, renewer), body('{"renewed":1}'), ORDER_TIMES)).toEqual({ kind: 'OK', rev: 2 })
    expect((await stored(renewed)).layout).toBe(RECORD_LAYOUT)

    // Run out and claimed by another holder: the first holder's completion is refused as
    // complete.lua refuses it, and the other's record is left as it was.
    const taken = keyOf('taken')
    const late = owner()
    const short = { leaseMs: 100, replayWindowMs: 60_000, failureRetentionMs: 100 }
    expect((await s.claim(contractClaim(taken, short, { ...ORDER_CLAIM, owner: late, start: true }))).kind).toBe(
      'ACQUIRED',
    )
    await sleep(300)
    const other = redisStore({ redis: await server.ready(), keyPrefix: 'oc' })
    expect((await other.claim(claimRequest(taken, owner()))).kind).toBe('ACQUIRED')
    const theirs = await server.admin.getBuffer(taken)
    expect(await s.complete(ref(taken, late), body('{"late":1}'), short)).toEqual({ kind: 'NOT_OWNER' })
    expect(await server.admin.getBuffer(taken)).toEqual(theirs)
    await other.close()
    await s.close()
  })

  it('shares one Redis with a store without the option: each replays what the other completed, and no key runs twice', async () => {
    const { s: without } = await store(false)
    const { s: withIt } = await store(true)
    const stores = [without, withIt]
    const keys = Array.from({ length: 40 }, (_, index) => keyOf(`shared-${index}`))
    const executions = new Map<string, number>()

    // Both claim every key at once; the one that acquires completes it through its own store.
    // The claims of one turn leave in one write per store, the first store's first: so each half
    // of the keys is claimed in a turn of its own, the other store first in the second.
    const claimAll = (batch: string[], order: typeof stores) =>
      Promise.all(
        batch.flatMap((key) =>
          order.map(async (s) => {
            const who = owner()
            const claim = await s.claim(claimRequest(key, who))
            if (claim.kind !== 'ACQUIRED') return
            executions.set(key, (executions.get(key) ?? 0) + 1)
            const by = stores.indexOf(s)
            expect(await s.complete(ref(key, who), body(`{"key":"${key}","by":${by}}`), ORDER_TIMES)).toMatchObject({
              kind: 'OK',
            })
          }),
        ),
      )
    await claimAll(keys.slice(0, 20), stores)
    await claimAll(keys.slice(20), [withIt, without])
    expect([...executions.values()]).toEqual(keys.map(() => 1))
    const layouts = new Set<number | undefined>()
    for (const key of keys) {
      layouts.add((await stored(key)).layout)
      // Every store, the one that completed it or not, replays the one answer: by the claim
      // without a script, and by claim.lua.
      const answers = new Set<string>()
      for (const s of stores) {
        answers.add(replayed(await s.claim(claimRequest(key, owner()))))
        answers.add(replayed(await s.claim(claimRequest(key, owner(), { wait: true }))))
      }
      expect(answers.size).toBe(1)
      expect([...answers][0]).toContain(key)
    }
    // Both writers were at work: layout 4 from the store with the option, 2 from the other.
    expect(layouts).toEqual(new Set([RECORD_LAYOUT, RELATIVE_LAYOUT]))
    await without.close()
    await withIt.close()
  })

  it('refuses an oneCommandCompletion that is not a boolean', () => {
    expect(() => redisStore({ redis: server.client(), oneCommandCompletion: 'yes' as never })).toThrow(
      /oneCommandCompletion/,
    )
  })
})
