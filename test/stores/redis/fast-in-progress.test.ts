/**
 * A 409 without a script (docs/design.md §6, "A claim without a script"): a claim that finds
 * another holder's running record with its fingerprint answers IN_PROGRESS from the record
 * `SET ... NX GET` handed back, when an upper bound of Redis's clock (from the TIME the store
 * sends with a claim about once a second, src/stores/redis/redis-clock.ts) shows the lease
 * certainly live; everything else goes to claim.lua as before. On a real redis-server; scripts
 * counted with `INFO commandstats`.
 */
import { randomBytes } from 'node:crypto'
import type { Redis } from 'ioredis'
import { afterEach, beforeAll, describe, expect, it } from 'vitest'
import { commandCalls } from '../../../scripts/redis-server.js'
import type { ClaimRequest } from '../../../src/core/store.js'
import { encodeRecord, type StoredRecord } from '../../../src/stores/record-layout.js'
import { type RedisStore, redisStore } from '../../../src/stores/redis/index.js'
import { LIVE_LEASE_MARGIN_MS } from '../../../src/stores/redis/redis-clock.js'
import { claimRequest as contractClaim } from '../../../src/testing/index.js'
import { ORDER_CLAIM, ORDER_TIMES, serverNow } from '../../helpers/stores.js'
import { redisFixture } from './fixture.js'

/** The byte offset of the waiters' mark in a record (the replayUntil double). */
const MARK_AT = 26
/**
 * A loop of ARGV[1] rounds of arithmetic: it holds Redis's event loop, as a slow command of
 * another client would. Counted in rounds, not by TIME: from Redis 7.2 on (Valkey too) TIME
 * inside a script answers the same instant for the whole script; TIME around it does not.
 */
const BUSY = `
local x = 0
for i = 1, tonumber(ARGV[1]) do x = x + i % 7 end
return x > 0 and 1 or 0`

const server = redisFixture()
let blocker: Redis
/** The stores' clients of the running test, the newest last. */
let clients: Redis[] = []
let prefixes = 0
/** BUSY's rounds per millisecond on this machine and server (measured in beforeAll). */
let roundsPerMs = 0

/**
 * Holds Redis's event loop for about `ms` milliseconds, from `client`: the store's own client
 * puts it ahead of the store's next commands on their connection, so Redis runs it first
 * however late this process or Redis gets scheduled.
 */
function busyFor(ms: number, client: Redis = blocker): Promise<unknown> {
  return client.eval(BUSY, 0, Math.round(ms * roundsPerMs))
}

/** Redis's clock in an element of a pipeline's replies (TIME), ms. */
function timeOf(reply: [Error | null, unknown] | undefined): number {
  if (reply === undefined || reply[0] !== null) throw reply?.[0] ?? new Error('no reply to TIME')
  const [seconds, micros] = reply[1] as [string, string]
  return Number(seconds) * 1000 + Number(micros) / 1000
}

beforeAll(async () => {
  // No command timeout: a busy loop may hold Redis longer than a call's usual bound.
  blocker = server.client({ commandTimeout: undefined })
  // Rounds per millisecond of Redis's own time: TIME, the loop and TIME again, pipelined on one
  // connection, so neither this process's scheduling nor the round trip counts. The fastest of
  // three loops of at least 50 ms: a loop Redis was descheduled in reads slow, and a busy
  // sized by it would end early.
  let rounds = 100_000
  for (let measured = 0; measured < 3; ) {
    const replies = (await blocker.pipeline().time().eval(BUSY, 0, rounds).time().exec()) ?? []
    const ms = timeOf(replies[2]) - timeOf(replies[0])
    if (ms < 50) {
      rounds *= 4
      continue
    }
    roundsPerMs = Math.max(roundsPerMs, rounds / ms)
    measured++
  }
})

afterEach(() => {
  clients = []
})

function owner(): string {
  return randomBytes(32).toString('hex')
}

async function newStore(
  options: { refuseTime?: boolean } = {},
): Promise<{ store: RedisStore; key: (name: string) => string }> {
  const redis = server.client({ commandTimeout: 5_000 })
  if (options.refuseTime === true) {
    // As a proxy that does not know TIME: Redis's own reply to a command it does not know.
    ;(redis as unknown as { time: () => Promise<unknown> }).time = () => redis.call('idemkit-no-time')
  }
  clients.push(redis)
  await redis.ping()
  const prefix = `fast409-${++prefixes}`
  const store = redisStore({ redis, keyPrefix: prefix })
  // Loads the functions library, as at startup: a first FCALL would otherwise count twice
  // ("Function not found", then sent again), unless another file loaded it first.
  await store.describe()
  return { store, key: (name) => `${prefix}:idem:1:d1:op:${name}` }
}

/** A claim of `who` on `key` for the order records below, with their times (ORDER_TIMES). */
function claimRequest(key: string, who: string, overrides: Partial<ClaimRequest> = {}): ClaimRequest {
  return contractClaim(key, ORDER_TIMES, { ...ORDER_CLAIM, owner: who, ...overrides })
}

/** Writes a layout-2 record of another holder under `key`, its key expiring 1 ms before it. */
async function running(key: string, fields: Partial<StoredRecord>): Promise<Buffer> {
  const now = await serverNow(server.admin)
  const stored: StoredRecord = {
    state: 'EXECUTING',
    owner: owner(),
    attempt: 1,
    rev: 2,
    leaseUntil: now + 5_000,
    replayUntil: 0,
    expiresAt: now + 35_000,
    createdAt: now - 1_000,
    updatedAt: now - 1_000,
    fp: 'fp-1',
    codec: 'json@1',
    policy: 'p1',
    op: 'POST /orders',
    response: Buffer.alloc(0),
    ...fields,
  }
  const bytes = encodeRecord(stored)
  await server.admin.set(key, bytes, 'PXAT', stored.expiresAt - 1)
  return bytes
}

/** TIME calls Redis counted so far, outside scripts. */
async function timeCalls(): Promise<number> {
  const text = await server.admin.info('commandstats')
  return Number(/cmdstat_time:calls=(\d+)/.exec(text)?.[1] ?? 0)
}

/** Script calls Redis counted so far (EVAL, EVALSHA, FCALL). */
async function scripts(): Promise<number> {
  const counted = await commandCalls(server.admin)
  const count = (command: string) => counted[command] ?? 0
  return count('evalsha') + count('eval') + count('fcall')
}

/** The claim's answer and the scripts it sent. */
async function counted<T>(call: () => Promise<T>): Promise<{ answer: T; scripts: number }> {
  const before = await scripts()
  const answer = await call()
  return { answer, scripts: (await scripts()) - before }
}

/** Blocks this process's event loop: replies that arrive meanwhile wait unread. */
function holdEventLoop(ms: number): void {
  const until = performance.now() + ms
  while (performance.now() < until) {
    // spin
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

describe('RedisStore: a 409 from the record SET hands back', () => {
  it('answers a duplicate of a running claim IN_PROGRESS without a script once the store acquired a key, and writes nothing', async () => {
    const { store, key } = await newStore()
    const holder = await newStore()
    const holderKey = key('busy')
    // The holder is another instance: its layout-3 record, its times from the key's expiry.
    expect((await holder.store.claim(claimRequest(holderKey, owner()))).kind).toBe('ACQUIRED')
    // This store's own acquiring claim: Redis's time at its SET bounds the clock.
    expect((await store.claim(claimRequest(key('warm'), owner()))).kind).toBe('ACQUIRED')
    const bytes = await server.admin.getBuffer(holderKey)
    const expiry = await server.admin.pexpiretime(holderKey)

    const from = await serverNow(server.admin)
    const fresh = await counted(() => store.claim(claimRequest(holderKey, owner())))
    expect(fresh.scripts).toBe(0)
    expect(fresh.answer.kind).toBe('IN_PROGRESS')
    const retryAfterMs = fresh.answer.kind === 'IN_PROGRESS' ? fresh.answer.retryAfterMs : 0
    // At most the lease left when Redis read the record (after `from`); the lease ends at the
    // key's expiry + 1 - the retention.
    expect(retryAfterMs).toBeLessThanOrEqual(expiry + 1 - ORDER_TIMES.failureRetentionMs - from)
    expect(retryAfterMs).toBeGreaterThan(ORDER_TIMES.leaseMs - 1_000)
    expect(await server.admin.getBuffer(holderKey)).toEqual(bytes)
    expect(await server.admin.pexpiretime(holderKey)).toBe(expiry)

    // A layout-2 record (written by a script) and a CLAIMED one, a legacy fingerprint: the same.
    const claimed = await running(key('claimed'), { state: 'CLAIMED' })
    const legacy = await counted(() =>
      store.claim(claimRequest(key('claimed'), owner(), { fingerprint: 'fp-new', legacyFingerprints: ['fp-1'] })),
    )
    expect(legacy).toMatchObject({ scripts: 0, answer: { kind: 'IN_PROGRESS' } })
    expect(await server.admin.getBuffer(key('claimed'))).toEqual(claimed)
  })

  it('lets the script answer a lease that ran out (503 expired execution, or a takeover), one near its end, a waiting claim and the holder itself', async () => {
    const { store, key } = await newStore()
    expect((await store.claim(claimRequest(key('warm'), owner()))).kind).toBe('ACQUIRED')

    await running(key('expired'), { leaseUntil: (await serverNow(server.admin)) - 1_000 })
    const expired = await counted(() => store.claim(claimRequest(key('expired'), owner())))
    expect(expired).toEqual({ scripts: 1, answer: { kind: 'RECOVERY_REQUIRED', reason: 'EXPIRED_EXECUTION' } })

    await running(key('taken'), { state: 'CLAIMED', leaseUntil: (await serverNow(server.admin)) - 1_000 })
    const taken = await counted(() => store.claim(claimRequest(key('taken'), owner())))
    expect(taken).toMatchObject({ scripts: 1, answer: { kind: 'TAKEN_OVER', attempt: 2 } })

    // Less than the margin left: the bound cannot tell it from a lease that ran out.
    await running(key('ending'), { leaseUntil: (await serverNow(server.admin)) + LIVE_LEASE_MARGIN_MS - 10 })
    const ending = await counted(() => store.claim(claimRequest(key('ending'), owner())))
    expect(ending.scripts).toBe(1)
    expect(['IN_PROGRESS', 'RECOVERY_REQUIRED']).toContain(ending.answer.kind)

    // A claim that will wait marks the record in the script, for the end to notify it.
    await running(key('waited'), {})
    const waited = await counted(() => store.claim(claimRequest(key('waited'), owner(), { wait: true })))
    expect(waited).toMatchObject({ scripts: 1, answer: { kind: 'IN_PROGRESS' } })
    expect((await server.admin.getBuffer(key('waited')))?.readDoubleBE(MARK_AT)).toBe(1)

    // The holder's own re-sent claim.
    const me = owner()
    await running(key('mine'), { owner: me })
    const mine = await counted(() => store.claim(claimRequest(key('mine'), me)))
    expect(mine).toMatchObject({ scripts: 1, answer: { kind: 'REPLAYED_ACQUIRE' } })
  })

  it("lets the script answer where Redis's clock cannot be bounded (TIME refused, as by a proxy without it), and reports a new key's lease end from its expiry", async () => {
    // TIME goes out as a command this Redis does not know: its real "unknown command" reply.
    const { store, key } = await newStore({ refuseTime: true })
    const acquired = await store.claim(claimRequest(key('warm'), owner()))
    if (acquired.kind !== 'ACQUIRED') throw new Error(acquired.kind)
    expect(acquired.leaseUntil).toBe((await server.admin.pexpiretime(key('warm'))) + 1 - ORDER_TIMES.failureRetentionMs)

    await running(key('busy'), {})
    const answer = await counted(() => store.claim(claimRequest(key('busy'), owner())))
    expect(answer).toMatchObject({ scripts: 1, answer: { kind: 'IN_PROGRESS' } })
    const again = await store.claim(claimRequest(key('warm-again'), owner()))
    if (again.kind !== 'ACQUIRED') throw new Error(again.kind)
    expect(again.leaseUntil).toBe(
      (await server.admin.pexpiretime(key('warm-again'))) + 1 - ORDER_TIMES.failureRetentionMs,
    )
  })

  it("reports an acquiring claim's lease end from the sample, never later than the lease's true end", async () => {
    const { store, key } = await newStore()
    for (let i = 0; i < 20; i++) {
      const result = await store.claim(claimRequest(key(`lease-${i}`), owner()))
      if (result.kind !== 'ACQUIRED') throw new Error(result.kind)
      const trueEnd = (await server.admin.pexpiretime(key(`lease-${i}`))) + 1 - ORDER_TIMES.failureRetentionMs
      expect(result.leaseUntil).toBeLessThanOrEqual(trueEnd)
      expect(result.leaseUntil).toBeGreaterThan(trueEnd - 100)
    }
  })

  it('drops the sample when the client reconnects (another master may answer, with a clock of its own)', async () => {
    const { store, key } = await newStore()
    const redis = clients.at(-1) as Redis
    expect((await store.claim(claimRequest(key('warm'), owner()))).kind).toBe('ACQUIRED')
    await running(key('busy'), {})
    expect(await counted(() => store.claim(claimRequest(key('busy'), owner())))).toMatchObject({ scripts: 0 })

    const ready = new Promise((resolve) => redis.once('ready', resolve))
    redis.disconnect(true)
    await ready
    // The sample is well under a second old, yet the first claim on the new connection sends a
    // TIME of its own ahead of its SET, and is judged by it.
    const timesBefore = await timeCalls()
    const after = await counted(() => store.claim(claimRequest(key('busy'), owner())))
    expect(after).toMatchObject({ scripts: 0, answer: { kind: 'IN_PROGRESS' } })
    expect((await timeCalls()) - timesBefore).toBe(1)
  })

  it("bounds Redis's clock from the time the sampling TIME was sent, not from when its reply was read", async () => {
    const { store, key } = await newStore()
    // The store's first claim, with the TIME that samples the clock: Redis runs them ~150 ms
    // after they were sent (a slow command ahead of them on their connection), and the replies
    // are read ~300 ms after that (this process busy).
    const busy = busyFor(150, clients.at(-1) as Redis)
    const sampling = store.claim(claimRequest(key('sample'), owner()))
    await sleep(20)
    holdEventLoop(450)
    await busy
    expect((await sampling).kind).toBe('ACQUIRED')

    // A lease that ran out 100 ms ago: only the script may answer, 503 expired execution. A
    // bound taken from the reply's time would be ~300 ms low and call it live.
    await running(key('expired'), { leaseUntil: (await serverNow(server.admin)) - 100 })
    const expired = await counted(() => store.claim(claimRequest(key('expired'), owner())))
    expect(expired).toEqual({ scripts: 1, answer: { kind: 'RECOVERY_REQUIRED', reason: 'EXPIRED_EXECUTION' } })
  })

  it('judges the lease at the time the reply arrived, not the time the claim was sent', async () => {
    const { store, key } = await newStore()
    expect((await store.claim(claimRequest(key('warm'), owner()))).kind).toBe('ACQUIRED')

    // 150 ms left when the claim is sent; Redis runs its SET ~300 ms later (a slow command ahead
    // of it on its connection), when the lease has run out: only the script may answer, 503
    // expired execution.
    await running(key('late'), { leaseUntil: (await serverNow(server.admin)) + 150 })
    const before = await scripts()
    const busy = busyFor(300, clients.at(-1) as Redis)
    const late = await store.claim(claimRequest(key('late'), owner()))
    await busy
    expect(late).toEqual({ kind: 'RECOVERY_REQUIRED', reason: 'EXPIRED_EXECUTION' })
    expect((await scripts()) - before).toBe(2) // the slow command and the claim script
  })
})
