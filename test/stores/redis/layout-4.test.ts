/**
 * Record layout 4 (src/stores/record-layout.ts): a record whose times, replayUntil of a COMPLETED
 * one included, count from the key's expiry. No store writes it yet; this build reads it, so a
 * build that writes it can follow (docs/upgrading.md). Each case writes a layout-4 record to the
 * suite's redis-server as such a writer would (`SET ... PXAT expiresAt - 1`), then calls the
 * store: the claim without a script (which reads the key's expiry for it) and claim.lua,
 * inspect, complete, replace and the operators' read must see the record it was written from. A reader of layout 3 alone would take its
 * replayUntil for a time in the epoch, the record for run out, and claim the key again.
 */
import { randomBytes } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { commandCalls } from '../../../scripts/redis-server.js'
import type { ClaimRequest } from '../../../src/core/store.js'
import {
  decodeRecord,
  encodeRelativeRecord,
  packClaimTexts,
  type StoredRecord,
} from '../../../src/stores/record-layout.js'
import { redisStore } from '../../../src/stores/redis/index.js'
import { decodeClaimReply } from '../../../src/stores/redis/replies.js'
import { loadScripts } from '../../../src/stores/redis/script-loader.js'
import { claimRequest as contractClaim } from '../../../src/testing/index.js'
import { ORDER_CLAIM, ORDER_TIMES, serverNow } from '../../helpers/stores.js'
import { redisFixture } from './fixture.js'

const server = redisFixture({ flush: 'data-and-scripts' })

const owner = () => randomBytes(32).toString('hex')
const keyOf = (name: string) => `l4:idem:1:d1:op:${name}-${randomBytes(4).toString('hex')}`
const claimRequest = (key: string, who: string, overrides: Partial<ClaimRequest> = {}) =>
  contractClaim(key, ORDER_TIMES, { ...ORDER_CLAIM, owner: who, start: true, ...overrides })

async function store() {
  const redis = server.client()
  await redis.ping()
  const s = redisStore({ redis, keyPrefix: 'l4' })
  // Its scripts loaded, so a call counts only its own commands.
  await s.inspect(keyOf('warm'), owner())
  return s
}

/** The commands Redis ran for `send`: SETs, PEXPIRETIMEs and script calls. */
async function callsIn(send: () => Promise<unknown>): Promise<{ set: number; pexpiretime: number; scripts: number }> {
  const before = await commandCalls(server.admin)
  await send()
  const after = await commandCalls(server.admin)
  const count = (command: string) => (after[command] ?? 0) - (before[command] ?? 0)
  // The admin's own PEXPIRETIME calls are not in `send`.
  return {
    set: count('set'),
    pexpiretime: count('pexpiretime'),
    scripts: count('evalsha') + count('eval') + count('fcall'),
  }
}

/** A record of the order claims (ORDER_CLAIM's fingerprint, codec, policy and operation). */
function orderRecord(fields: Omit<StoredRecord, 'fp' | 'codec' | 'policy' | 'op'>): StoredRecord {
  const { fingerprint: fp, codec, policy, operation: op } = ORDER_CLAIM
  return { ...fields, fp, codec, policy, op }
}

/** A COMPLETED order record, completed at `now` and replaying (and kept) `windowMs` from then. */
function completedAt(
  now: number,
  windowMs: number,
  fields: Pick<StoredRecord, 'owner' | 'attempt' | 'rev' | 'leaseUntil' | 'createdAt' | 'response'>,
): StoredRecord {
  return orderRecord({
    state: 'COMPLETED',
    replayUntil: now + windowMs,
    expiresAt: now + windowMs,
    updatedAt: now,
    ...fields,
  })
}

/** Writes `record` in layout 4, its times counted from `at`, under a key expiring at expiresAt - 1. */
async function writeLayout4(key: string, record: StoredRecord, at: number): Promise<Buffer> {
  const bytes = encodeRelativeRecord(record, at)
  await server.admin.set(key, bytes, 'PXAT', record.expiresAt - 1)
  return bytes
}

describe('record layout 4 on Redis', () => {
  it('replays a COMPLETED record, refuses another body, inspects and reads it with its times, and writes nothing', async () => {
    const s = await store()
    const key = keyOf('completed')
    const now = await serverNow(server.admin)
    const holder = owner()
    // Completed at `now` after a 3 s run; replays for the window, as a completion writes it.
    const completed = completedAt(now, ORDER_TIMES.replayWindowMs, {
      owner: holder,
      attempt: 1,
      rev: 3,
      leaseUntil: now + 2_000,
      createdAt: now - 3_000,
      response: Buffer.from('{"id":"o-1"}'),
    })
    const bytes = await writeLayout4(key, completed, now)

    let replay: Awaited<ReturnType<typeof s.claim>> | undefined
    // The record SET hands back is read with the key's expiry, asked for after it this once.
    expect(await callsIn(async () => (replay = await s.claim(claimRequest(key, owner()))))).toEqual({
      set: 1,
      pexpiretime: 1,
      scripts: 0,
    })
    expect(replay).toMatchObject({ kind: 'COMPLETED_REPLAY', replayUntil: completed.replayUntil })
    expect(replay?.kind === 'COMPLETED_REPLAY' && Buffer.from(replay.response).toString()).toBe('{"id":"o-1"}')
    // The next claims send PEXPIRETIME behind their SET: the same answers, no script.
    let mismatch: Awaited<ReturnType<typeof s.claim>> | undefined
    expect(
      await callsIn(async () => (mismatch = await s.claim(claimRequest(key, owner(), { fingerprint: 'fp-2' })))),
    ).toEqual({ set: 1, pexpiretime: 1, scripts: 0 })
    expect(mismatch?.kind).toBe('FINGERPRINT_MISMATCH')
    const legacy = await s.claim(claimRequest(key, owner(), { fingerprint: 'fp-new', legacyFingerprints: ['fp-1'] }))
    expect(legacy).toMatchObject({ kind: 'COMPLETED_REPLAY', replayUntil: completed.replayUntil })
    expect(await s.inspect(key, holder)).toMatchObject({
      kind: 'COMPLETED',
      mine: true,
      attempt: 1,
      rev: 3,
      replayUntil: completed.replayUntil,
    })
    // claim.lua, where the claim without a script leaves a record to it, reads it the same way
    // and hands it back in layout 2.
    const texts = packClaimTexts(ORDER_CLAIM.codec, ORDER_CLAIM.policy, ORDER_CLAIM.operation)
    const args = [owner(), ORDER_CLAIM.fingerprint, '1', 'recover', '5000', '30000', texts, '0']
    const scripted = (await server.admin.callBuffer('EVAL', loadScripts().claim.lua, 1, key, ...args)) as [
      Buffer,
      Buffer,
    ]
    expect(scripted[0].toString()).toBe('COMPLETED_REPLAY')
    expect(decodeRecord(scripted[1])).toEqual(completed)
    expect(decodeClaimReply(scripted)).toMatchObject({ kind: 'COMPLETED_REPLAY', replayUntil: completed.replayUntil })
    // The holder's completion sent again: already done, at the record's rev.
    expect(await s.complete({ key, owner: holder, attempt: 1, rev: 2 }, Buffer.from('x'), ORDER_TIMES)).toEqual({
      kind: 'ALREADY',
      rev: 3,
    })
    expect((await s.read(key)).record).toEqual(completed)

    expect(await server.admin.getBuffer(key)).toEqual(bytes)
    expect(await server.admin.pexpiretime(key)).toBe(completed.expiresAt - 1)
    await s.close()
  })

  it("lets an operator's replace compare it as the record it reads as", async () => {
    const s = await store()
    const key = keyOf('replace')
    const now = await serverNow(server.admin)
    const completed = completedAt(now, 30_000, {
      owner: owner(),
      attempt: 2,
      rev: 5,
      leaseUntil: now - 1_000,
      createdAt: now - 9_000,
      response: Buffer.from('{"id":"o-2"}'),
    })
    await writeLayout4(key, completed, now)

    // Read as another rev: changed since, left alone.
    expect(await s.replace(key, { ...completed, rev: 4 }, undefined)).toBe(false)
    expect(await server.admin.exists(key)).toBe(1)
    // As read: deleted.
    const read = (await s.read(key)).record
    expect(read).toEqual(completed)
    expect(await s.replace(key, read as StoredRecord, undefined)).toBe(true)
    expect(await server.admin.exists(key)).toBe(0)
    await s.close()
  })

  it('answers a duplicate of a running record IN_PROGRESS and lets its holder complete it, in layout 2 from then on', async () => {
    const s = await store()
    const key = keyOf('running')
    const now = await serverNow(server.admin)
    const holder = owner()
    const running = orderRecord({
      state: 'EXECUTING',
      owner: holder,
      attempt: 1,
      rev: 2,
      leaseUntil: now + ORDER_TIMES.leaseMs,
      replayUntil: 0,
      expiresAt: now + ORDER_TIMES.leaseMs + ORDER_TIMES.failureRetentionMs,
      createdAt: now - 1_000,
      updatedAt: now - 500,
      response: Buffer.alloc(0),
    })
    await writeLayout4(key, running, now)

    const duplicate = await s.claim(claimRequest(key, owner()))
    expect(duplicate.kind).toBe('IN_PROGRESS')
    expect((await s.read(key)).record).toEqual(running)

    const done = await s.complete({ key, owner: holder, attempt: 1, rev: 2 }, Buffer.from('{"ok":1}'), ORDER_TIMES)
    expect(done).toEqual({ kind: 'OK', rev: 3 })
    expect(await server.admin.getrange(key, 0, 1)).toBe('\u0002D')
    const [raw, expireTime] = await Promise.all([server.admin.getBuffer(key), server.admin.pexpiretime(key)])
    const written = decodeRecord(raw as Buffer, expireTime)
    expect(written).toMatchObject({ state: 'COMPLETED', rev: 3, createdAt: running.createdAt, owner: holder })
    expect(written.replayUntil).toBe(written.expiresAt)
    expect(written.expiresAt).toBe(expireTime + 1)
    const replay = await s.claim(claimRequest(key, owner()))
    expect(replay.kind === 'COMPLETED_REPLAY' && Buffer.from(replay.response).toString()).toBe('{"ok":1}')
    await s.close()
  })
})
