/**
 * complete.lua's lean path (docs/design.md §6 "A lean completion") against its full path, on
 * the suite's redis-server. The full path is the same resolved script with the lean call taken
 * out: each case copies one record (bytes and the key's expiry) to two keys and completes one
 * with each script. A completion the record allows must write the bytes the full path writes
 * (times shifted by the clock's progress between the two calls, nothing else), with the same
 * reply, key expiry and notification; every other case must answer, and leave the key, exactly
 * as the full path does, and be seen to go through it (a second GET, counted by Redis).
 */
import { randomBytes } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { commandCalls } from '../../../scripts/redis-server.js'
import {
  decodeRecord,
  encodeFreshClaim,
  encodeRecord,
  packClaimTexts,
  type StoredRecord,
} from '../../../src/stores/record-layout.js'
import { loadScripts } from '../../../src/stores/redis/script-loader.js'
import { redisFixture } from './fixture.js'

const LEASE_MS = 10_000
const RETENTION_MS = 30_000
const WINDOW_MS = 60_000
/** Byte offsets (0-based) of the doubles a completion sets from its clock reading. */
const REPLAY_UNTIL_AT = 26
const EXPIRES_AT = 34
const UPDATED_AT = 50

const LEAN = loadScripts().complete.lua
const LEAN_CALL = /\nlocal done = complete_lean\(KEYS\[1\], ARGV\[5\]\)\nif done then\n {2}return done\nend\n/
const FULL = LEAN.replace(LEAN_CALL, '\n')

const server = redisFixture({ flush: 'data' })

const newOwner = () => randomBytes(32).toString('hex')
const newKey = () => `lean:${randomBytes(8).toString('hex')}`

interface Completion {
  readonly owner: string
  readonly attempt: number
  readonly rev: number
  readonly response?: Buffer
}

type Outcome = { reply: unknown } | { error: string }

async function run(lua: string, key: string, c: Completion): Promise<Outcome> {
  try {
    const reply = await server.admin.eval(
      lua,
      1,
      key,
      c.owner,
      String(c.attempt),
      String(c.rev),
      String(WINDOW_MS),
      c.response ?? Buffer.from('{"ok":true}'),
    )
    return { reply }
  } catch (error) {
    // The same error but for the key's name and where in which script it was raised.
    const message = (error as Error).message.replaceAll(key, '<key>')
    return { error: message.replace(/ script: [0-9a-f]{40}, on @user_script:\d+\.$/, '') }
  }
}

/** The key's value (bytes, or a hash's fields) and its expiry. */
async function snapshot(key: string): Promise<{ value: unknown; expiry: number }> {
  const type = await server.admin.type(key)
  const value = type === 'hash' ? await server.admin.hgetallBuffer(key) : await server.admin.getBuffer(key)
  return { value, expiry: await server.admin.pexpiretime(key) }
}

/** Copies `from` (a string record) to a new key with the same expiry. */
async function copy(from: string): Promise<string> {
  const to = newKey()
  await server.admin.copy(from, to)
  return to
}

/** A layout-3 record as the store's claim without a script writes it (`SET ... NX PX`). */
async function freshClaim(key: string, owner: string, start = true, fingerprint = 'f1:aa'): Promise<void> {
  const bytes = encodeFreshClaim(
    { owner, fingerprint, start, leaseMs: LEASE_MS, failureRetentionMs: RETENTION_MS },
    packClaimTexts('json-1', '1', 'POST /orders/ü'),
  )
  await server.admin.set(key, bytes, 'PX', LEASE_MS + RETENTION_MS - 1)
}

/** A layout-2 record written by a script: a fresh CLAIMED record started by start.lua (rev 2). */
async function startedClaim(key: string, owner: string): Promise<void> {
  await freshClaim(key, owner, false)
  const reply = await server.admin.eval(
    loadScripts().start.lua,
    1,
    key,
    owner,
    '1',
    '1',
    String(LEASE_MS),
    String(RETENTION_MS),
  )
  expect(reply).toEqual(['OK', 2])
}

/** The commands `send` had Redis run (a script's own among them), by name, from Redis's counts. */
async function callsIn(send: () => Promise<unknown>): Promise<Record<string, number>> {
  await server.admin.config('RESETSTAT')
  await send()
  const calls = await commandCalls(server.admin)
  // The INFO that reads them is not the script's.
  delete calls.info
  return calls
}

interface Runs {
  readonly full: Record<string, number>
  readonly lean: Record<string, number>
}

/** The full path's bytes with the times it set from its clock moved by `delta` ms. */
function shifted(bytes: Buffer, delta: number): Buffer {
  const out = Buffer.from(bytes)
  for (const at of [REPLAY_UNTIL_AT, EXPIRES_AT, UPDATED_AT]) out.writeDoubleBE(out.readDoubleBE(at) + delta, at)
  return out
}

/**
 * Completes copies of the record under `key` with both scripts, the full one first: the lean
 * path must write the full path's record, with times later by exactly the clock's progress.
 */
async function expectSameCompletion(key: string, c: Completion): Promise<Runs> {
  const before = decodeRecord((await server.admin.getBuffer(key)) as Buffer, await server.admin.pexpiretime(key))
  const fullKey = await copy(key)
  const leanKey = await copy(key)

  let full: Outcome | undefined
  let lean: Outcome | undefined
  const fullCalls = await callsIn(async () => {
    full = await run(FULL, fullKey, c)
  })
  const leanCalls = await callsIn(async () => {
    lean = await run(LEAN, leanKey, c)
  })

  expect(leanCalls.get, 'the lean path reads the record once and does not fall through').toBe(1)
  expect(leanCalls.time).toBe(1)
  expect(full).toEqual({ reply: ['OK', c.rev + 1] })
  expect(lean).toEqual(full)
  const fullBytes = (await server.admin.getBuffer(fullKey)) as Buffer
  const leanBytes = (await server.admin.getBuffer(leanKey)) as Buffer
  const fullRecord = decodeRecord(fullBytes)
  const leanRecord = decodeRecord(leanBytes)
  const delta = leanRecord.updatedAt - fullRecord.updatedAt
  expect(delta).toBeGreaterThanOrEqual(0)
  expect(delta).toBeLessThan(1_000)
  expect(leanRecord).toEqual({
    ...fullRecord,
    replayUntil: fullRecord.replayUntil + delta,
    expiresAt: fullRecord.expiresAt + delta,
    updatedAt: fullRecord.updatedAt + delta,
  })
  expect(leanBytes.equals(shifted(fullBytes, delta)), 'the lean bytes are the full bytes').toBe(true)
  expect(leanBytes[0]).toBe(2)
  expect(await server.admin.pexpiretime(leanKey)).toBe(leanRecord.expiresAt - 1)
  expect(await server.admin.pexpiretime(fullKey)).toBe(fullRecord.expiresAt - 1)
  // What the completion keeps and sets, against the record it completed.
  expect(leanRecord).toMatchObject({
    state: 'COMPLETED',
    rev: c.rev + 1,
    attempt: before.attempt,
    owner: before.owner,
    leaseUntil: before.leaseUntil,
    createdAt: before.createdAt,
    fp: before.fp,
    codec: before.codec,
    policy: before.policy,
    op: before.op,
    replayUntil: leanRecord.updatedAt + WINDOW_MS,
    expiresAt: leanRecord.updatedAt + WINDOW_MS,
  })
  expect(leanRecord.response.equals(c.response ?? Buffer.from('{"ok":true}'))).toBe(true)
  return { full: fullCalls, lean: leanCalls }
}

describe('complete.lua: the lean path writes what the full path writes', () => {
  it('takes the lean call out of the full script', () => {
    expect(FULL).not.toBe(LEAN)
    expect(FULL).not.toMatch(/complete_lean\(KEYS/)
  })

  it('completes a fresh claim (layout 3, times from the key expiry) as the full path does', async () => {
    const key = newKey()
    const owner = newOwner()
    await freshClaim(key, owner)

    await expectSameCompletion(key, { owner, attempt: 1, rev: 1 })
  })

  it('completes a record a script rewrote (layout 2) as the full path does', async () => {
    const key = newKey()
    const owner = newOwner()
    await startedClaim(key, owner)

    await expectSameCompletion(key, { owner, attempt: 1, rev: 2 })
  })

  it('completes a taken-over record of a later attempt with a binary response and an empty one', async () => {
    const key = newKey()
    const owner = newOwner()
    const now = Date.now()
    const record: StoredRecord = {
      state: 'EXECUTING',
      owner,
      attempt: 3,
      rev: 7,
      leaseUntil: now + LEASE_MS,
      replayUntil: 0,
      expiresAt: now + LEASE_MS + RETENTION_MS,
      createdAt: now - 5_000,
      updatedAt: now - 1_000,
      fp: 'f1:bb',
      codec: 'http-1',
      policy: '2',
      op: 'PUT /x',
      response: Buffer.alloc(0),
    }
    await server.admin.set(key, encodeRecord(record), 'PXAT', record.expiresAt - 1)

    await expectSameCompletion(key, { owner, attempt: 3, rev: 7, response: Buffer.from([0, 255, 10, 0, 68]) })
    await expectSameCompletion(key, { owner, attempt: 3, rev: 7, response: Buffer.alloc(0) })
  })

  it.each([
    ['a fresh claim', 3],
    ['a started claim', 2],
  ])('publishes to the waiters of a marked record, and only then, on %s', async (_name, layout) => {
    for (const marked of [false, true]) {
      const key = newKey()
      const owner = newOwner()
      if (layout === 3) await freshClaim(key, owner)
      else await startedClaim(key, owner)
      if (marked) await server.admin.setrange(key, REPLAY_UNTIL_AT, Buffer.from([0x3f, 0xf0, 0, 0, 0, 0, 0, 0]))
      const rev = layout === 3 ? 1 : 2

      const runs = await expectSameCompletion(key, { owner, attempt: 1, rev })

      expect(runs.lean.spublish ?? 0).toBe(marked ? 1 : 0)
      expect(runs.full.spublish ?? 0).toBe(marked ? 1 : 0)
    }
  })
})

describe('complete.lua: every other case goes through the full path', () => {
  /**
   * Runs `c` with each script on a copy of `key`'s record (or on a missing key): the same reply
   * or error, the same key afterwards, and a second GET (the full path's) in the lean script.
   */
  async function expectFullPath(key: string | undefined, c: Completion): Promise<Outcome> {
    const fullKey = key === undefined ? newKey() : await copy(key)
    const leanKey = key === undefined ? newKey() : await copy(key)
    const before = await snapshot(leanKey)

    const full = await run(FULL, fullKey, c)
    let lean: Outcome | undefined
    const calls = await callsIn(async () => {
      lean = await run(LEAN, leanKey, c)
    })

    expect(lean).toEqual(full)
    expect(calls.get, 'the full path read the record again').toBe(2)
    expect(await snapshot(leanKey)).toEqual(before)
    expect(await snapshot(fullKey)).toEqual(before)
    return full
  }

  it('answers NOT_FOUND for a missing record', async () => {
    expect(await expectFullPath(undefined, { owner: newOwner(), attempt: 1, rev: 1 })).toEqual({
      reply: ['NOT_FOUND'],
    })
  })

  it('answers NOT_FOUND for a record whose expiresAt has passed while its key lives', async () => {
    const key = newKey()
    const owner = newOwner()
    const now = Date.now()
    const record = encodeRecord({
      state: 'EXECUTING',
      owner,
      attempt: 1,
      rev: 2,
      leaseUntil: now - 2_000,
      replayUntil: 0,
      expiresAt: now - 1_000,
      createdAt: now - 9_000,
      updatedAt: now - 9_000,
      fp: 'f',
      codec: 'c',
      policy: 'p',
      op: 'o',
      response: Buffer.alloc(0),
    })
    await server.admin.set(key, record, 'PX', 60_000)

    expect(await expectFullPath(key, { owner, attempt: 1, rev: 2 })).toEqual({ reply: ['NOT_FOUND'] })
  })

  it('answers NOT_OWNER for another owner or another attempt, on both layouts', async () => {
    const owner = newOwner()
    const fresh = newKey()
    const started = newKey()
    await freshClaim(fresh, owner)
    await startedClaim(started, owner)

    for (const [key, rev] of [
      [fresh, 1],
      [started, 2],
    ] as const) {
      expect(await expectFullPath(key, { owner: newOwner(), attempt: 1, rev })).toEqual({ reply: ['NOT_OWNER'] })
      expect(await expectFullPath(key, { owner, attempt: 2, rev })).toEqual({ reply: ['NOT_OWNER'] })
    }
  })

  it('answers WRONG_STATE for another rev or a record not EXECUTING', async () => {
    const owner = newOwner()
    const started = newKey()
    const claimed = newKey()
    await startedClaim(started, owner)
    await freshClaim(claimed, owner, false)

    expect(await expectFullPath(started, { owner, attempt: 1, rev: 1 })).toEqual({
      reply: ['WRONG_STATE', 'EXECUTING'],
    })
    expect(await expectFullPath(started, { owner, attempt: 1, rev: 3 })).toEqual({
      reply: ['WRONG_STATE', 'EXECUTING'],
    })
    expect(await expectFullPath(claimed, { owner, attempt: 1, rev: 1 })).toEqual({
      reply: ['WRONG_STATE', 'CLAIMED'],
    })
  })

  it('answers ALREADY for a repeated completion, and WRONG_STATE for a stale one', async () => {
    const key = newKey()
    const owner = newOwner()
    await freshClaim(key, owner)
    expect(await run(LEAN, key, { owner, attempt: 1, rev: 1 })).toEqual({ reply: ['OK', 2] })

    expect(await expectFullPath(key, { owner, attempt: 1, rev: 1 })).toEqual({ reply: ['ALREADY', 2] })
    expect(await expectFullPath(key, { owner, attempt: 1, rev: 2 })).toEqual({
      reply: ['WRONG_STATE', 'COMPLETED'],
    })
  })

  it('answers IDEMKIT_CORRUPT for bytes that are no record: a short string, texts past the end, layout 5, a layout-3 record without an expiry', async () => {
    const owner = newOwner()
    const good = newKey()
    await freshClaim(good, owner)
    const bytes = (await server.admin.getBuffer(good)) as Buffer
    const pastEnd = Buffer.from(bytes)
    pastEnd.writeUInt16BE(pastEnd.readUInt16BE(122) + 1, 122)
    const layout5 = Buffer.from(bytes)
    layout5[0] = 5
    const cases: [Buffer, boolean][] = [
      [Buffer.from('hello'), true],
      [pastEnd, true],
      [layout5, true],
      [bytes, false],
    ]
    for (const [value, expiring] of cases) {
      const key = newKey()
      if (expiring) await server.admin.set(key, value, 'PX', 60_000)
      else await server.admin.set(key, value)

      const outcome = await expectFullPath(key, { owner, attempt: 1, rev: 1 })

      expect(outcome).toMatchObject({ error: expect.stringContaining('IDEMKIT_CORRUPT') })
    }
  })

  it('completes a layout-1 hash through the full path (GET answers WRONGTYPE)', async () => {
    const key = newKey()
    const owner = newOwner()
    const now = Date.now()
    await server.admin.hset(key, {
      state: 'EXECUTING',
      owner,
      attempt: 1,
      rev: 2,
      op: 'POST /orders',
      fp: 'fp-1',
      codec: 'http-1',
      policy: '1',
      leaseUntil: now + 30_000,
      expiresAt: now + 60_000,
      createdAt: now,
      updatedAt: now,
    })
    await server.admin.pexpireat(key, now + 60_000)
    const fullKey = await copy(key)

    const full = await run(FULL, fullKey, { owner, attempt: 1, rev: 2 })
    let lean: Outcome | undefined
    const calls = await callsIn(async () => {
      lean = await run(LEAN, key, { owner, attempt: 1, rev: 2 })
    })

    expect(full).toEqual({ reply: ['OK', 3] })
    expect(lean).toEqual(full)
    // The full path reads the hash's fields (lib/record read_legacy).
    expect(calls.hmget).toBe(1)
    const leanRecord = decodeRecord((await server.admin.getBuffer(key)) as Buffer)
    const fullRecord = decodeRecord((await server.admin.getBuffer(fullKey)) as Buffer)
    const delta = leanRecord.updatedAt - fullRecord.updatedAt
    expect(leanRecord).toEqual({
      ...fullRecord,
      replayUntil: fullRecord.replayUntil + delta,
      expiresAt: fullRecord.expiresAt + delta,
      updatedAt: fullRecord.updatedAt + delta,
    })
  })
})
