import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { type Redis, type RedisOptions, ReplyError } from 'ioredis'
import { beforeEach, describe, expect, it, onTestFinished } from 'vitest'
import { commandCalls, freePort } from '../../../scripts/redis-server.js'
import {
  ErrorCode,
  IdempotencyError,
  StoreIndeterminateError,
  StoreProtocolError,
  StoreUnavailableError,
} from '../../../src/core/errors.js'
import type { ClaimRequest, OwnerRef } from '../../../src/core/store.js'
import { decodeRecord, encodeRecord, type StoredRecord } from '../../../src/stores/record-layout.js'
import { type RedisStore, type RedisStoreOptions, redisFault, redisStore } from '../../../src/stores/redis/index.js'
import { loadScripts } from '../../../src/stores/redis/script-loader.js'
import { claimRequest as contractClaim } from '../../../src/testing/index.js'
import { redisMonitor } from '../../helpers/redis-monitor.js'
import { ORDER_CLAIM, ORDER_TIMES, serverNow } from '../../helpers/stores.js'
import { redisFixture } from './fixture.js'

const server = redisFixture({ flush: 'data-and-scripts' })
let prefixes = 0
let prefix = ''

beforeEach(() => {
  prefix = `t${++prefixes}`
})

async function readyStore(
  options: RedisOptions = {},
  storeOptions: Partial<RedisStoreOptions> = {},
): Promise<{
  redis: Redis
  store: RedisStore
}> {
  const redis = server.client(options)
  await redis.ping()
  return { redis, store: redisStore({ redis, keyPrefix: prefix, ...storeOptions }) }
}

function owner(): string {
  return randomBytes(32).toString('hex')
}

function keyOf(name: string): string {
  return `${prefix}:idem:1:d1:op:${name}`
}

/** A claim of `who` on `key` for the order records below, with their times (ORDER_TIMES) and without start. */
function claimRequest(key: string, who: string, overrides: Partial<ClaimRequest> = {}): ClaimRequest {
  return contractClaim(key, ORDER_TIMES, { ...ORDER_CLAIM, owner: who, start: false, ...overrides })
}

/** The record under `key`, decoded from its one string (layout 2, or 3 with the key's expiry). */
async function record(key: string): Promise<StoredRecord> {
  const [raw, expireTime] = await Promise.all([server.admin.getBuffer(key), server.admin.pexpiretime(key)])
  if (raw === null) throw new Error(`no record under ${key}`)
  return decodeRecord(raw, expireTime)
}

/** Rewrites fields of the record under `key` in place, its key expiry kept. */
async function patch(key: string, fields: Partial<StoredRecord>): Promise<void> {
  await server.admin.set(key, encodeRecord({ ...(await record(key)), ...fields }), 'KEEPTTL')
}

async function pexpiretime(key: string): Promise<number> {
  return Number(await server.admin.call('PEXPIRETIME', key))
}

async function thrown(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise
  } catch (error) {
    return error as Error
  }
  throw new Error('expected the call to throw')
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

describe('redisStore', () => {
  it('defaults keyPrefix to idemkit and names itself redis when only a client is given', async () => {
    const { redis } = await readyStore()

    const store = redisStore({ redis })

    expect(store.keyPrefix).toBe('idemkit')
    expect(store.name).toBe('redis')
  })

  it.each([
    ['an empty keyPrefix', { keyPrefix: '' }],
    ['a keyPrefix with whitespace', { keyPrefix: 'my app' }],
    ['a non-boolean closeClient', { closeClient: 'yes' }],
    ['a non-boolean failFast', { failFast: 1 }],
    ['a non-boolean coalesceWrites', { coalesceWrites: 'yes' }],
    ['an unknown option', { prefix: 'x' }],
  ])('throws ERR_IDEM_INVALID_OPTION when given %s', async (_name, extra) => {
    const { redis } = await readyStore()

    const error = await thrown(Promise.resolve().then(() => redisStore({ redis, ...(extra as object) })))

    expect(error).toBeInstanceOf(IdempotencyError)
    expect((error as IdempotencyError).code).toBe(ErrorCode.INVALID_OPTION)
  })

  describe('coalesceWrites', () => {
    /** Counts the writes that reach the client's socket (Node's net.Socket _write / _writev). */
    function countWrites(redis: Redis): { readonly count: number } {
      const socket = redis.stream as unknown as Record<'_write' | '_writev', (...args: unknown[]) => unknown>
      const counter = { count: 0 }
      for (const name of ['_write', '_writev'] as const) {
        const original = socket[name]
        socket[name] = function (this: unknown, ...args: unknown[]) {
          counter.count++
          return original.apply(this, args)
        }
      }
      return counter
    }

    async function claimsInOneTurn(coalesceWrites: boolean): Promise<{ writes: number; other: string | null }> {
      const redis = server.client()
      await redis.ping()
      const store = redisStore({ redis, keyPrefix: prefix, coalesceWrites })
      await store.verify()
      const writes = countWrites(redis)
      const claims = Array.from({ length: 20 }, (_, i) =>
        store.claim(claimRequest(keyOf(`c${coalesceWrites}-${i}`), owner())),
      )
      // Another user of the same client, in the same turn: it waits with the claims, no longer.
      const other = redis.get('unrelated')
      const results = await Promise.all(claims)
      expect(results.every((result) => result.kind === 'ACQUIRED')).toBe(true)
      return { writes: writes.count, other: await other }
    }

    it('sends the calls made in one turn of the event loop in one write by default', async () => {
      const { writes, other } = await claimsInOneTurn(true)

      expect(writes).toBe(1)
      expect(other).toBeNull()
    })

    it('writes call by call when turned off', async () => {
      const { writes, other } = await claimsInOneTurn(false)

      expect(writes).toBeGreaterThan(1)
      expect(other).toBeNull()
    })
  })

  it('throws ERR_IDEM_INVALID_OPTION when no client is given', () => {
    expect(() => redisStore({} as never)).toThrow(/Option "redis"/)
  })

  it('defines each script once under its versioned name when two stores share a client', async () => {
    const { redis } = await readyStore()
    // touch.lua is not a command of the client: the durability touch is sent by hand as EVALSHA
    // or EVAL, never re-sent by ioredis behind the WAIT that follows it (docs/durability.md).
    // compare-and-set.lua is one only for a store with oneCommandCompletion.
    const scripts = Object.values(loadScripts()).filter((s) => s.name !== 'touch' && s.name !== 'compare-and-set')
    const commands = redis as unknown as Record<string, unknown>

    redisStore({ redis, keyPrefix: 'a' })
    const defined = scripts.map((s) => commands[s.commandName])
    redisStore({ redis, keyPrefix: 'b' })

    expect(defined.every((fn) => typeof fn === 'function')).toBe(true)
    expect(scripts.map((s) => commands[s.commandName])).toEqual(defined)
    expect(commands[loadScripts().touch.commandName]).toBeUndefined()
    expect(loadScripts().claim.commandName).toMatch(/^idemkit_claim_[0-9a-f]{12}$/)
  })

  it('leaves the client connected when closed with closeClient false', async () => {
    const { redis, store } = await readyStore()

    await store.close()

    expect(redis.status).toBe('ready')
    expect(await redis.ping()).toBe('PONG')
  })

  it('quits the client when closed with closeClient true', async () => {
    const redis = server.client()
    await redis.ping()
    const store = redisStore({ redis, keyPrefix: prefix, closeClient: true })
    const ended = once(redis, 'end')

    await store.close()
    await ended

    expect(redis.status).toBe('end')
  })
})

describe('RedisStore scripts', () => {
  it('runs a script again through ioredis when Redis has flushed its script cache (NOSCRIPT)', async () => {
    const { store } = await readyStore({}, { functions: false })
    const key = keyOf('noscript')
    const me = owner()
    await store.claim(claimRequest(key, me))
    // The first claim of a new key is a plain SET; this one runs the claim script once.
    expect((await store.claim(claimRequest(key, me))).kind).toBe('REPLAYED_ACQUIRE')
    const before = await noscriptErrors()
    await server.admin.script('FLUSH')

    const again = await store.claim(claimRequest(key, me))

    expect(again.kind).toBe('REPLAYED_ACQUIRE')
    expect(await noscriptErrors()).toBe(before + 1)
  })

  it('touches only KEYS[1] when every script runs (MONITOR)', async () => {
    const { store } = await readyStore()
    const monitor = await redisMonitor(server.port)
    onTestFinished(() => monitor.disconnect())
    const seen: string[][] = []
    monitor.on('monitor', (_time: string, args: string[], source: string) => {
      if (source === 'lua') seen.push(args)
    })
    const a = keyOf('a')
    const b = keyOf('b')
    const c = keyOf('c')
    const me = owner()

    await store.claim(claimRequest(a, me, { start: true }))
    await store.renew({ key: a, owner: me, attempt: 1, rev: 1 }, ORDER_TIMES)
    await store.complete({ key: a, owner: me, attempt: 1, rev: 1 }, Buffer.from('body'), ORDER_TIMES)
    await store.claim(claimRequest(a, owner()))
    await store.inspect(a, me)
    await store.claim(claimRequest(b, me))
    await store.start({ key: b, owner: me, attempt: 1, rev: 1 }, ORDER_TIMES)
    await store.markFailed({ key: b, owner: me, attempt: 1, rev: 2 }, 'retryable', ORDER_TIMES)
    await store.claim(claimRequest(b, owner()))
    await store.claim(claimRequest(c, me))
    await store.release({ key: c, owner: me, attempt: 1, rev: 1 })
    await server.admin.ping()
    await sleep(50)

    // Three commands at most per script (TIME, GET, SET/DEL), eleven scripts.
    expect(seen.length).toBeGreaterThan(20)
    const strays = seen.filter(([command, ...rest]) => {
      if (command === 'TIME') return rest.length !== 0
      if (command === 'DEL') return rest.length !== 1 || ![a, b, c].includes(rest[0] as string)
      return ![a, b, c].includes(rest[0] as string)
    })
    expect(strays).toEqual([])
  })

  it('reads the time only from Redis TIME when it sets a lease', async () => {
    const { store } = await readyStore()
    const before = await serverNow(server.admin)

    const result = await store.claim(claimRequest(keyOf('time'), owner()))
    const after = await serverNow(server.admin)

    expect(result.kind).toBe('ACQUIRED')
    if (result.kind !== 'ACQUIRED') return
    // The lease Redis set, on its own clock.
    const leaseEnd = (await server.admin.pexpiretime(keyOf('time'))) + 1 - ORDER_TIMES.failureRetentionMs
    expect(leaseEnd).toBeGreaterThanOrEqual(before + ORDER_TIMES.leaseMs)
    expect(leaseEnd).toBeLessThanOrEqual(after + ORDER_TIMES.leaseMs)
    // The one reported: from the TIME sampled with the claim, never later, a round trip earlier at most.
    expect(result.leaseUntil).toBeLessThanOrEqual(leaseEnd)
    expect(result.leaseUntil).toBeGreaterThanOrEqual(before + ORDER_TIMES.leaseMs - (after - before) - 1)
  })

  it("stores one string per record (layout 3 from a new key's claim, read with the key's expiry) and sets createdAt and updatedAt when it creates a record", async () => {
    const { store } = await readyStore()
    const key = keyOf('fields')
    const me = owner()

    await store.claim(claimRequest(key, me, { start: true }))
    const fields = await record(key)

    expect(await server.admin.type(key)).toBe('string')
    for (const name of ['attempt', 'rev', 'leaseUntil', 'expiresAt', 'createdAt', 'updatedAt'] as const) {
      expect(Number.isSafeInteger(fields[name]) && fields[name] > 0, name).toBe(true)
    }
    expect(fields.createdAt).toBe(fields.updatedAt)
    expect(fields).toMatchObject({
      state: 'EXECUTING',
      owner: me,
      attempt: 1,
      rev: 1,
      replayUntil: 0,
      op: 'POST /orders',
      fp: 'fp-1',
      codec: 'json@1',
      policy: 'p1',
    })
    expect(fields.response.byteLength).toBe(0)
  })

  it('gives the key the expiry 1 ms before expiresAt in every state when each operation writes (Redis holds it exactly while the record is live)', async () => {
    const { store } = await readyStore()
    const me = owner()
    const a = keyOf('ttl-a')
    const b = keyOf('ttl-b')
    const c = keyOf('ttl-c')
    const check = async (key: string) => {
      const fields = await record(key)
      expect(await pexpiretime(key), `${key} ${fields.state}`).toBe(fields.expiresAt - 1)
      return fields
    }

    await store.claim(claimRequest(a, me))
    const claimed = await check(a)
    await store.start({ key: a, owner: me, attempt: 1, rev: 1 }, ORDER_TIMES)
    const executing = await check(a)
    await store.renew({ key: a, owner: me, attempt: 1, rev: 2 }, ORDER_TIMES)
    await check(a)
    await store.complete({ key: a, owner: me, attempt: 1, rev: 2 }, Buffer.from('answer'), ORDER_TIMES)
    const completed = await check(a)
    await store.claim(claimRequest(b, me, { start: true }))
    await store.markFailed({ key: b, owner: me, attempt: 1, rev: 1 }, 'retryable', ORDER_TIMES)
    const failed = await check(b)
    await store.claim(claimRequest(b, owner(), { start: true }))
    const takenOver = await check(b)
    await store.claim(claimRequest(c, me, { start: true }))
    await store.markFailed({ key: c, owner: me, attempt: 1, rev: 1 }, 'unknown', ORDER_TIMES)
    const abandoned = await check(c)

    const n = (value: number) => value
    expect(n(claimed.expiresAt)).toBe(n(claimed.leaseUntil) + ORDER_TIMES.failureRetentionMs)
    expect(n(executing.expiresAt)).toBe(n(executing.leaseUntil) + ORDER_TIMES.failureRetentionMs)
    expect(n(completed.expiresAt)).toBe(n(completed.replayUntil))
    expect(n(completed.replayUntil)).toBe(n(completed.updatedAt) + ORDER_TIMES.replayWindowMs)
    expect(n(failed.expiresAt)).toBe(n(failed.updatedAt) + ORDER_TIMES.failureRetentionMs)
    expect(takenOver).toMatchObject({ state: 'EXECUTING', attempt: 2, rev: 3 })
    expect(n(takenOver.expiresAt)).toBe(n(takenOver.leaseUntil) + ORDER_TIMES.failureRetentionMs)
    expect(abandoned.state).toBe('ABANDONED')
    expect(n(abandoned.expiresAt)).toBe(n(abandoned.updatedAt) + ORDER_TIMES.failureRetentionMs)
  })

  it('really moves leaseUntil, expiresAt and the key expiry when renew succeeds (docs/design.md §7 defect 3)', async () => {
    const { store } = await readyStore()
    const me = owner()
    const key = keyOf('renew')
    const ref: OwnerRef = { key, owner: me, attempt: 1, rev: 1 }
    await store.claim(claimRequest(key, me, { start: true }))
    const before = await record(key)
    await sleep(20)

    const renewed = await store.renew(ref, { ...ORDER_TIMES, leaseMs: 9_000 })
    const after = await record(key)
    const afterExpiry = await pexpiretime(key)
    const again = await store.renew(ref, { ...ORDER_TIMES, leaseMs: 9_000 })

    expect(renewed.kind).toBe('OK')
    if (renewed.kind !== 'OK' || again.kind !== 'OK') throw new Error('renew refused')
    expect(renewed.leaseUntil).toBeGreaterThanOrEqual(Number(before.leaseUntil) + 4_000 + 20)
    expect(Number(after.leaseUntil)).toBe(renewed.leaseUntil)
    expect(Number(after.expiresAt)).toBe(renewed.leaseUntil + ORDER_TIMES.failureRetentionMs)
    expect(afterExpiry).toBe(Number(after.expiresAt) - 1)
    expect(Number(after.updatedAt)).toBeGreaterThan(Number(before.updatedAt))
    expect(after.rev).toBe(before.rev)
    expect(again.leaseUntil).toBeGreaterThanOrEqual(renewed.leaseUntil)
  })

  it('refuses renew when the record is CLAIMED, taken over or missing', async () => {
    const { store } = await readyStore()
    const me = owner()
    const key = keyOf('renew-refused')
    await store.claim(claimRequest(key, me, { leaseMs: 30 }))

    const claimedRenew = await store.renew({ key, owner: me, attempt: 1, rev: 1 }, ORDER_TIMES)
    await sleep(60)
    await store.claim(claimRequest(key, owner()))
    const takenRenew = await store.renew({ key, owner: me, attempt: 1, rev: 1 }, ORDER_TIMES)
    const missingRenew = await store.renew({ key: keyOf('none'), owner: me, attempt: 1, rev: 1 }, ORDER_TIMES)

    expect(claimedRenew).toEqual({ kind: 'WRONG_STATE', state: 'CLAIMED' })
    expect(takenRenew).toEqual({ kind: 'NOT_OWNER' })
    expect(missingRenew).toEqual({ kind: 'NOT_FOUND' })
  })

  it('treats a record as absent when expiresAt has passed though Redis still holds the key', async () => {
    const { store } = await readyStore()
    const me = owner()
    const key = keyOf('stale')
    await store.claim(claimRequest(key, me, { start: true }))
    await store.complete({ key, owner: me, attempt: 1, rev: 1 }, Buffer.from('old answer'), ORDER_TIMES)
    await patch(key, { expiresAt: (await serverNow(server.admin)) - 1 })
    await server.admin.persist(key)

    const inspected = await store.inspect(key, me)
    const claimed = await store.claim(claimRequest(key, owner(), { fingerprint: 'fp-other' }))
    const fields = await record(key)

    expect(inspected).toEqual({ kind: 'ABSENT' })
    expect(claimed).toMatchObject({ kind: 'ACQUIRED', attempt: 1, rev: 1, state: 'CLAIMED' })
    expect(fields.response.byteLength).toBe(0)
    expect(fields.replayUntil).toBe(0)
    expect(fields.fp).toBe('fp-other')
    expect(await pexpiretime(key)).toBe(fields.expiresAt - 1)
  })

  it('treats a COMPLETED record as absent when its replay window has passed', async () => {
    const { store } = await readyStore()
    const me = owner()
    const key = keyOf('replayed-out')
    await store.claim(claimRequest(key, me, { start: true }))
    await store.complete({ key, owner: me, attempt: 1, rev: 1 }, Buffer.from('answer'), ORDER_TIMES)
    await patch(key, { replayUntil: (await serverNow(server.admin)) - 1 })

    const inspected = await store.inspect(key, me)
    const claimed = await store.claim(claimRequest(key, owner()))

    expect(inspected).toEqual({ kind: 'ABSENT' })
    expect(claimed).toMatchObject({ kind: 'ACQUIRED', attempt: 1 })
  })

  it('answers NOT_FOUND to a transition when the record has expired', async () => {
    const { store } = await readyStore()
    const me = owner()
    const key = keyOf('expired-transition')
    await store.claim(claimRequest(key, me))
    await patch(key, { expiresAt: (await serverNow(server.admin)) - 1 })

    const started = await store.start({ key, owner: me, attempt: 1, rev: 1 }, ORDER_TIMES)

    expect(started).toEqual({ kind: 'NOT_FOUND' })
    expect((await record(key)).state).toBe('CLAIMED')
  })

  it('matches a legacy fingerprint and stores the current one when it takes over', async () => {
    const { store } = await readyStore()
    const first = owner()
    const key = keyOf('legacy')
    await store.claim(claimRequest(key, first, { fingerprint: 'fp-v1', start: true }))
    await store.markFailed({ key, owner: first, attempt: 1, rev: 1 }, 'retryable', ORDER_TIMES)

    const mismatch = await store.claim(claimRequest(key, owner(), { fingerprint: 'fp-v2' }))
    const taken = await store.claim(
      claimRequest(key, owner(), { fingerprint: 'fp-v2', legacyFingerprints: ['fp-x', 'fp-v1'] }),
    )

    expect(mismatch).toEqual({ kind: 'FINGERPRINT_MISMATCH' })
    expect(taken).toMatchObject({ kind: 'TAKEN_OVER', attempt: 2, rev: 3 })
    expect((await record(key)).fp).toBe('fp-v2')
  })

  it('answers IN_PROGRESS with the lease left, then RECOVERY_REQUIRED when an EXECUTING lease has run out', async () => {
    const { store } = await readyStore()
    const key = keyOf('expired-execution')
    await store.claim(claimRequest(key, owner(), { start: true, leaseMs: 200 }))

    const busy = await store.claim(claimRequest(key, owner()))
    await sleep(250)
    const recover = await store.claim(claimRequest(key, owner()))
    const takeover = await store.claim(claimRequest(key, owner(), { expiredExecution: 'takeover' }))

    expect(busy.kind).toBe('IN_PROGRESS')
    if (busy.kind === 'IN_PROGRESS') expect(busy.retryAfterMs).toBeGreaterThan(0)
    if (busy.kind === 'IN_PROGRESS') expect(busy.retryAfterMs).toBeLessThanOrEqual(200)
    expect(recover).toEqual({ kind: 'RECOVERY_REQUIRED', reason: 'EXPIRED_EXECUTION' })
    expect(takeover).toMatchObject({ kind: 'TAKEN_OVER', attempt: 2, rev: 2 })
  })

  it('throws ERR_IDEM_INVALID_ARGUMENT and writes nothing when an argument is malformed', async () => {
    const { store } = await readyStore()
    const key = keyOf('malformed')

    const calls = [
      store.claim(claimRequest(key, 'not-a-token')),
      store.claim(claimRequest(key, owner(), { leaseMs: 0 })),
      store.claim(claimRequest(key, owner(), { failureRetentionMs: 1.5 })),
      store.claim(claimRequest(key, owner(), { fingerprint: '' })),
      store.claim(claimRequest(key, owner(), { expiredExecution: 'maybe' as never })),
      store.start({ key, owner: owner(), attempt: 0, rev: 1 }, ORDER_TIMES),
      store.markFailed({ key, owner: owner(), attempt: 1, rev: 1 }, 'later' as never, ORDER_TIMES),
      store.renew({ key, owner: owner(), attempt: 1, rev: 1 }, { ...ORDER_TIMES, leaseMs: -5 }),
    ]
    const errors = await Promise.all(calls.map(thrown))

    for (const error of errors) {
      expect(error).toBeInstanceOf(IdempotencyError)
      expect((error as IdempotencyError).code).toBe(ErrorCode.INVALID_ARGUMENT)
    }
    expect(errors[1]?.message).toContain('leaseMs')
    expect(await server.admin.dbsize()).toBe(0)
  })

  it('throws StoreProtocolError when the key holds something that is not a record', async () => {
    const { store } = await readyStore()
    await server.admin.set(keyOf('string'), 'x')
    await server.admin.hset(keyOf('hash'), 'state', 'SLEEPING', 'owner', owner())
    await server.admin.hset(keyOf('partial'), 'fp', 'x')

    const errors = await Promise.all([
      thrown(store.claim(claimRequest(keyOf('string'), owner()))),
      thrown(store.inspect(keyOf('hash'), owner())),
      thrown(store.claim(claimRequest(keyOf('partial'), owner()))),
    ])

    for (const error of errors) expect(error).toBeInstanceOf(StoreProtocolError)
    expect(await server.admin.hgetall(keyOf('partial'))).toEqual({ fp: 'x' })
  })
})

describe('RedisStore error classification', () => {
  it('throws StoreUnavailableError without queueing when failFast and the server does not listen', async () => {
    const redis = server.client({ retryStrategy: () => 50 }, await freePort())
    const store = redisStore({ redis, keyPrefix: prefix })

    const error = await thrown(store.claim(claimRequest(keyOf('down'), owner())))

    expect(error).toBeInstanceOf(StoreUnavailableError)
    expect(redis.status).not.toBe('ready')
    expect((redis as unknown as { offlineQueue: { length: number } }).offlineQueue.length).toBe(0)
  })

  it('throws StoreUnavailableError when the client is disconnected with enableOfflineQueue false', async () => {
    const redis = server.client({ retryStrategy: () => 50, enableOfflineQueue: false }, await freePort())
    const store = redisStore({ redis, keyPrefix: prefix, failFast: false })

    const error = await thrown(store.inspect(keyOf('down'), owner()))

    expect(error).toBeInstanceOf(StoreUnavailableError)
    expect((error.cause as Error).message).toBe("Stream isn't writeable and enableOfflineQueue options is false")
  })

  it('throws StoreIndeterminateError when the server is paused longer than commandTimeout', async () => {
    const { store } = await readyStore({ commandTimeout: 100 })
    const me = owner()
    const key = keyOf('paused')
    await server.admin.call('CLIENT', 'PAUSE', '400', 'ALL')

    const error = await thrown(store.claim(claimRequest(key, me)))
    await sleep(500)
    const after = await store.inspect(key, me)

    expect(error).toBeInstanceOf(StoreIndeterminateError)
    expect((error.cause as Error).message).toBe('Command timed out')
    // Indeterminate indeed: the claim was applied once the pause ended.
    expect(after).toMatchObject({ kind: 'CLAIMED', mine: true })
  })

  it('throws StoreIndeterminateError when a queued call runs out of retries (failFast false)', async () => {
    const redis = server.client({ retryStrategy: () => 20, maxRetriesPerRequest: 0 }, await freePort())
    const store = redisStore({ redis, keyPrefix: prefix, failFast: false })

    const error = await thrown(store.inspect(keyOf('down'), owner()))

    expect(error).toBeInstanceOf(StoreIndeterminateError)
    expect((error.cause as Error).name).toBe('MaxRetriesPerRequestError')
  })

  it('throws StoreUnavailableError and writes nothing when Redis answers OOM', async () => {
    const { store } = await readyStore()
    const key = keyOf('oom')
    await server.admin.config('SET', 'maxmemory', '1')
    let error: Error
    try {
      error = await thrown(store.claim(claimRequest(key, owner())))
    } finally {
      await server.admin.config('SET', 'maxmemory', '0')
    }

    expect(error).toBeInstanceOf(StoreUnavailableError)
    expect((error.cause as Error).message).toMatch(/^OOM /)
    expect(await server.admin.exists(key)).toBe(0)
  })

  it('throws StoreUnavailableError when the store is used after its client was quit (failFast)', async () => {
    const { redis, store } = await readyStore()
    const ended = once(redis, 'end')
    await redis.quit()
    await ended

    const error = await thrown(store.inspect(keyOf('quit'), owner()))

    expect(error).toBeInstanceOf(StoreUnavailableError)
    expect(error.message).toContain('"end"')
  })

  it.each([
    'OOM command not allowed when used memory > maxmemory',
    'LOADING Redis is loading the dataset in memory',
    'BUSY Redis is busy running a script',
    "READONLY You can't write against a read only replica.",
    'MASTERDOWN Link with MASTER is down',
    'CLUSTERDOWN The cluster is down',
    'TRYAGAIN Multiple keys request during rehashing of slot',
    'NOREPLICAS Not enough good replicas to write.',
    'MISCONF Redis is configured to save RDB snapshots',
    'NOPERM this user has no permissions',
  ])('classifies as unavailable when Redis replies %s', (message) => {
    const cause = new ReplyError(message)

    const error = redisFault(cause)

    expect(error).toBeInstanceOf(StoreUnavailableError)
    expect(error.cause).toBe(cause)
  })

  it.each([
    ['a command timeout', new Error('Command timed out')],
    ['a closed connection', new Error('Connection is closed.')],
    ['a reset', Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' })],
    ['a script runtime error', new ReplyError('ERR user_script:1: Script attempted to access nonexistent global')],
    ['an OOM-looking message that is not a reply', new Error('OOM command not allowed')],
    ['a non-error', 'boom'],
  ])('classifies as indeterminate when the error is %s', (_name, cause) => {
    const error = redisFault(cause)

    expect(error).toBeInstanceOf(StoreIndeterminateError)
    expect(error.cause).toBe(cause)
  })

  it('returns the error unchanged when it is already an IdempotencyError', () => {
    const original = new StoreProtocolError('bad')

    expect(redisFault(original)).toBe(original)
  })
})

async function noscriptErrors(): Promise<number> {
  const info = await server.admin.info('errorstats')
  const match = /errorstat_NOSCRIPT:count=(\d+)/.exec(info)
  return match ? Number(match[1]) : 0
}

describe('RedisStore: a claim without a script (SET NX GET)', () => {
  const calls = async (): Promise<{ set: number; scripts: number }> => {
    const counted = await commandCalls(server.admin)
    const count = (command: string) => counted[command] ?? 0
    return { set: count('set'), scripts: count('evalsha') + count('eval') + count('fcall') }
  }
  const since = async (before: { set: number; scripts: number }) => {
    const after = await calls()
    return { set: after.set - before.set, scripts: after.scripts - before.scripts }
  }

  it('claims a new key with one SET, and answers a replay and a changed body from the record SET hands back', async () => {
    const { store } = await readyStore()
    const key = keyOf('fast')
    const me = owner()
    let before = await calls()
    const first = await store.claim(claimRequest(key, me, { start: true }))
    expect(first).toMatchObject({ kind: 'ACQUIRED', state: 'EXECUTING', attempt: 1, rev: 1 })
    expect(await since(before)).toEqual({ set: 1, scripts: 0 })
    expect(await server.admin.getrange(key, 0, 0)).toBe('\u0003')

    // A duplicate while it runs: the lease is certainly live by the bound of Redis's clock the
    // claim above gave (redis-clock.ts), so no script (test/stores/redis/fast-in-progress.test.ts).
    before = await calls()
    expect((await store.claim(claimRequest(key, owner(), { start: true }))).kind).toBe('IN_PROGRESS')
    expect(await since(before)).toEqual({ set: 1, scripts: 0 })
    // A changed body while it runs: refused from the record, no script.
    before = await calls()
    expect((await store.claim(claimRequest(key, owner(), { fingerprint: 'fp-2' }))).kind).toBe('FINGERPRINT_MISMATCH')
    expect(await since(before)).toEqual({ set: 1, scripts: 0 })

    const done = await store.complete({ key, owner: me, attempt: 1, rev: 1 }, Buffer.from('answer'), ORDER_TIMES)
    expect(done.kind).toBe('OK')
    before = await calls()
    const replay = await store.claim(claimRequest(key, owner()))
    expect(replay.kind).toBe('COMPLETED_REPLAY')
    expect(replay.kind === 'COMPLETED_REPLAY' && Buffer.from(replay.response).toString()).toBe('answer')
    expect((await store.claim(claimRequest(key, owner(), { fingerprint: 'fp-2' }))).kind).toBe('FINGERPRINT_MISMATCH')
    // A legacy fingerprint matches as on the script's path.
    const legacy = await store.claim(
      claimRequest(key, owner(), { fingerprint: 'fp-new', legacyFingerprints: ['fp-1'] }),
    )
    expect(legacy.kind).toBe('COMPLETED_REPLAY')
    expect(await since(before)).toEqual({ set: 3, scripts: 0 })
  })

  it('keeps a layout-3 record on the server clock: its times from the key expiry, the same for the scripts and for read()', async () => {
    const { store } = await readyStore()
    const key = keyOf('fast-times')
    const me = owner()
    const from = await serverNow(server.admin)
    await store.claim(claimRequest(key, me, { start: true }))
    const to = await serverNow(server.admin)

    const fresh = await record(key)
    expect(fresh.createdAt).toBeGreaterThanOrEqual(from)
    expect(fresh.createdAt).toBeLessThanOrEqual(to)
    expect(fresh.updatedAt).toBe(fresh.createdAt)
    expect(fresh.leaseUntil).toBe(fresh.createdAt + ORDER_TIMES.leaseMs)
    expect(fresh.expiresAt).toBe(fresh.leaseUntil + ORDER_TIMES.failureRetentionMs)
    expect(fresh.expiresAt).toBe((await server.admin.pexpiretime(key)) + 1)
    expect((await store.read(key)).record).toEqual(fresh)
    // inspect.lua hands back the record in layout 2 with the same times.
    const inspected = await store.inspect(key, me)
    expect(inspected).toMatchObject({ kind: 'EXECUTING', mine: true, leaseUntil: fresh.leaseUntil, attempt: 1, rev: 1 })

    // The first script that writes it writes layout 2, keeping createdAt.
    const renewed = await store.renew({ key, owner: me, attempt: 1, rev: 1 }, ORDER_TIMES)
    expect(renewed.kind).toBe('OK')
    expect(await server.admin.getrange(key, 0, 0)).toBe('\u0002')
    const after = await record(key)
    expect(after.createdAt).toBe(fresh.createdAt)
    expect(after.leaseUntil).toBeGreaterThanOrEqual(fresh.leaseUntil)
    expect(after.expiresAt).toBe((await server.admin.pexpiretime(key)) + 1)
  })

  it('lets the script decide a COMPLETED record whose replay window ends before its expiry', async () => {
    const { store } = await readyStore()
    const key = keyOf('fast-window')
    const now = await serverNow(server.admin)
    const me = owner()
    // Replays until now - 1 but is kept until now + 60 s: for a claim it is gone (step 1).
    const stored: StoredRecord = {
      state: 'COMPLETED',
      owner: me,
      attempt: 1,
      rev: 2,
      leaseUntil: now - 10_000,
      replayUntil: now - 1,
      expiresAt: now + 60_000,
      createdAt: now - 20_000,
      updatedAt: now - 5_000,
      fp: 'fp-1',
      codec: 'json@1',
      policy: 'p1',
      op: 'POST /orders',
      response: Buffer.from('old'),
    }
    await server.admin.set(key, encodeRecord(stored), 'PXAT', now + 60_000)
    const before = await calls()
    expect((await store.claim(claimRequest(key, owner()))).kind).toBe('ACQUIRED')
    // The fast SET that wrote nothing, then the script, which writes with a SET of its own.
    expect(await since(before)).toEqual({ set: 2, scripts: 1 })
    expect(await server.admin.getrange(key, 0, 0)).toBe('\u0002')
  })

  it('refuses a changed body without a script on every live state, as the script would', async () => {
    const { store } = await readyStore()
    for (const state of ['CLAIMED', 'EXECUTING', 'FAILED_RETRYABLE', 'ABANDONED'] as const) {
      const key = keyOf(`fast-422-${state}`)
      const now = await serverNow(server.admin)
      const stored: StoredRecord = {
        state,
        owner: owner(),
        attempt: 1,
        rev: 1,
        leaseUntil: now + 5_000,
        replayUntil: 0,
        expiresAt: now + 35_000,
        createdAt: now,
        updatedAt: now,
        fp: 'fp-1',
        codec: 'json@1',
        policy: 'p1',
        op: 'POST /orders',
        response: Buffer.alloc(0),
      }
      await server.admin.set(key, encodeRecord(stored), 'PXAT', stored.expiresAt)
      const before = await calls()
      expect((await store.claim(claimRequest(key, owner(), { fingerprint: 'fp-2' }))).kind, state).toBe(
        'FINGERPRINT_MISMATCH',
      )
      expect(await since(before), state).toEqual({ set: 1, scripts: 0 })
      expect(await server.admin.getBuffer(key), state).toEqual(encodeRecord(stored))
    }
  })
})
