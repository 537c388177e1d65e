/**
 * `idempotent(fn, options)` on every store: one run per key, the stored result for every later
 * call, and what a caller must act on thrown as a typed error with a stable code.
 */
import { randomUUID } from 'node:crypto'
import { Redis } from 'ioredis'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { freePort } from '../../scripts/redis-server.js'
import { jsonCodec } from '../../src/core/codec.js'
import {
  IdempotencyError,
  IdempotencyInProgressError,
  IdempotencyKeyReusedError,
  IdempotencyRecoveryRequiredError,
  StoreUnavailableError,
} from '../../src/core/errors.js'
import type { ActionContext } from '../../src/core/run/types.js'
import { idempotent, makeIdempotent } from '../../src/jobs/idempotent.js'
import { redisStore } from '../../src/stores/redis/index.js'
import { createPostgresStore, STORES, type TestStore, testPostgresPool } from '../helpers/stores.js'

const SECRET_1 = 'jobs-test-secret-one-jobs-test-secret-one'
const SECRET_2 = 'jobs-test-secret-two-jobs-test-secret-two'
const SECRETS = { current: 1, keys: { 1: SECRET_1 } }

/** Resolves once `open()` is called: a function run held in the middle. */
function gate() {
  let open!: () => void
  const promise = new Promise<void>((resolve) => {
    open = resolve
  })
  return { promise, open }
}

/** What the rejection of `promise` is. */
async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise
  } catch (error) {
    return error
  }
  throw new Error('expected a rejection, got a value')
}

describe.each(STORES)('idempotent() on the %s store', (_name, create) => {
  let backing: TestStore

  beforeEach(async () => {
    backing = await create()
  })

  afterEach(async () => {
    await backing.teardown()
  })

  it('runs the function once per key and answers every later call with its stored result', async () => {
    const seen: { orderId: string; amount: number; fencingToken: number; aborted: boolean }[] = []
    const charge = idempotent(
      async (orderId: string, amount: number, { fencingToken, signal }: ActionContext) => {
        seen.push({ orderId, amount, fencingToken, aborted: signal.aborted })
        return { chargeId: `ch-${seen.length}`, amount }
      },
      { store: backing.store, secrets: SECRETS, operation: 'charge', key: (orderId) => orderId },
    )

    const first = await charge('order-1', 100)
    const again = await charge('order-1', 100)
    const other = await charge('order-2', 100)

    expect(first).toEqual({ chargeId: 'ch-1', amount: 100 })
    expect(again).toEqual(first)
    expect(other).toEqual({ chargeId: 'ch-2', amount: 100 })
    expect(seen).toEqual([
      { orderId: 'order-1', amount: 100, fencingToken: 1, aborted: false },
      { orderId: 'order-2', amount: 100, fencingToken: 1, aborted: false },
    ])
  })

  it('throws IdempotencyKeyReusedError for the same key with other arguments, and does not run', async () => {
    let runs = 0
    const charge = idempotent(
      async (_orderId: string, amount: number) => {
        runs++
        return amount
      },
      { store: backing.store, secrets: SECRETS, operation: 'charge', key: (orderId) => orderId },
    )
    await charge('order-1', 100)

    const error = await rejection(charge('order-1', 200))

    expect(error).toBeInstanceOf(IdempotencyKeyReusedError)
    expect(error).toMatchObject({ code: 'ERR_IDEM_KEY_REUSED', name: 'IdempotencyKeyReusedError' })
    expect(String((error as Error).message)).toContain('"charge"')
    expect(String((error as Error).message)).not.toContain('order-1')
    expect(runs).toBe(1)
  })

  it('compares what the fingerprint option returns, canonicalised: key order does not count', async () => {
    let runs = 0
    const handle = idempotent(
      async (message: { id: string; body: Record<string, number>; receivedAt: number }) => {
        runs++
        return message.body
      },
      {
        store: backing.store,
        secrets: SECRETS,
        operation: 'handle',
        key: 'id',
        fingerprint: (message) => message.body,
      },
    )

    await handle({ id: 'm-1', body: { a: 1, b: 2 }, receivedAt: 1 })
    const redelivered = await handle({ id: 'm-1', body: { b: 2, a: 1 }, receivedAt: 2 })

    expect(redelivered).toEqual({ a: 1, b: 2 })
    expect(runs).toBe(1)
  })

  it('stores a function that returns nothing: undefined is the answer of every call', async () => {
    let runs = 0
    const notify = idempotent(
      async (_userId: string): Promise<void> => {
        runs++
      },
      { store: backing.store, secrets: SECRETS, operation: 'notify', key: (userId) => userId },
    )

    expect(await notify('u-1')).toBeUndefined()
    expect(await notify('u-1')).toBeUndefined()
    expect(runs).toBe(1)
  })

  it('throws IdempotencyInProgressError with retryAfterMs to a call while the first runs, then replays', async () => {
    const hold = gate()
    let runs = 0
    const slow = idempotent(
      async (id: string) => {
        runs++
        await hold.promise
        return `done ${id}`
      },
      { store: backing.store, secrets: SECRETS, operation: 'slow', key: (id) => id, inProgressRetryAfterMs: 250 },
    )

    const first = slow('k')
    await new Promise((resolve) => setTimeout(resolve, 50))
    const error = await rejection(slow('k'))
    hold.open()

    expect(error).toBeInstanceOf(IdempotencyInProgressError)
    expect(error).toMatchObject({ code: 'ERR_IDEM_IN_PROGRESS', retryAfterMs: 250 })
    expect(await first).toBe('done k')
    expect(await slow('k')).toBe('done k')
    expect(runs).toBe(1)
  })

  it('with inFlight: { waitMs }, a call while the first runs waits for its result', async () => {
    const hold = gate()
    let runs = 0
    const slow = idempotent(
      async (id: string) => {
        runs++
        await hold.promise
        return `done ${id}`
      },
      { store: backing.store, secrets: SECRETS, operation: 'slow', key: (id) => id, inFlight: { waitMs: 10_000 } },
    )

    const first = slow('k')
    await new Promise((resolve) => setTimeout(resolve, 50))
    const waiting = slow('k')
    await new Promise((resolve) => setTimeout(resolve, 50))
    hold.open()

    expect(await Promise.all([first, waiting])).toEqual(['done k', 'done k'])
    expect(runs).toBe(1)
  })

  it("rethrows the function's error; an unmarked one leaves the key recovery-required", async () => {
    let runs = 0
    const fragile = idempotent(
      async (_id: string): Promise<string> => {
        runs++
        throw new Error('payment provider timed out')
      },
      { store: backing.store, secrets: SECRETS, operation: 'fragile', key: (id) => id },
    )

    const thrown = await rejection(fragile('k'))
    const later = await rejection(fragile('k'))

    expect(thrown).toMatchObject({ message: 'payment provider timed out' })
    expect(later).toBeInstanceOf(IdempotencyRecoveryRequiredError)
    expect(later).toMatchObject({ code: 'ERR_IDEM_RECOVERY_REQUIRED', reason: 'ABANDONED' })
    expect(runs).toBe(1)
  })

  it('with resume: true, runs again after an unmarked error, with the next fencing token and the same keyFor', async () => {
    const seen: { fencingToken: number; charge: string }[] = []
    const checkout = idempotent(
      async (_id: string, { fencingToken, keyFor }: ActionContext) => {
        seen.push({ fencingToken, charge: keyFor('charge') })
        if (seen.length === 1) throw new Error('fell over after the charge')
        return seen.length
      },
      { store: backing.store, secrets: SECRETS, operation: 'checkout', key: (id) => id, resume: true },
    )

    const thrown = await rejection(checkout('k'))
    const resumed = await checkout('k')
    const replayed = await checkout('k')

    expect(thrown).toMatchObject({ message: 'fell over after the charge' })
    expect(resumed).toBe(2)
    expect(replayed).toBe(2)
    expect(seen.map((run) => run.fencingToken)).toEqual([1, 2])
    expect(seen[1]?.charge).toBe(seen[0]?.charge)
  })

  it('runs again after an error marked retryable, or one the retryable option names', async () => {
    let runs = 0
    const flaky = idempotent(
      async (_id: string) => {
        runs++
        if (runs === 1) throw Object.assign(new Error('declined before sending'), { retryable: true })
        if (runs === 2) throw new RangeError('rate limited')
        return runs
      },
      {
        store: backing.store,
        secrets: SECRETS,
        operation: 'flaky',
        key: (id) => id,
        retryable: (error) => error instanceof RangeError || (error as { retryable?: boolean }).retryable === true,
      },
    )

    expect(await rejection(flaky('k'))).toMatchObject({ message: 'declined before sending' })
    expect(await rejection(flaky('k'))).toMatchObject({ message: 'rate limited' })
    expect(await flaky('k')).toBe(3)
    expect(await flaky('k')).toBe(3)
  })

  it('hands fn keyFor(name): the same downstream key on every run of one key, another for another key', async () => {
    const keys: string[] = []
    let runs = 0
    const send = idempotent(
      async (id: string, { keyFor }: ActionContext) => {
        keys.push(keyFor('charge'))
        runs++
        if (runs === 1) throw Object.assign(new Error('no effect'), { retryable: true })
        return id
      },
      { store: backing.store, secrets: SECRETS, operation: 'send', key: (id) => id },
    )

    await rejection(send('k'))
    await send('k')
    await send('other')

    expect(keys[0]).toBe(keys[1])
    expect(keys[2]).not.toBe(keys[0])
  })

  it('takes the key from a property path of the first argument, a number included', async () => {
    let runs = 0
    const handle = idempotent(
      async (job: { data: { orderId: string | number } }) => {
        runs++
        return job.data.orderId
      },
      { store: backing.store, secrets: SECRETS, operation: 'handle', key: 'data.orderId' },
    )

    await handle({ data: { orderId: 7 } })
    await handle({ data: { orderId: 7 } })
    await handle({ data: { orderId: '8' } })

    expect(runs).toBe(2)
    const error = await rejection(handle({ data: {} } as never))
    expect(error).toMatchObject({ code: 'ERR_IDEM_INVALID_ARGUMENT' })
    expect(String((error as Error).message)).toContain('key path "data.orderId" found undefined')
    expect(runs).toBe(2)
  })

  it('scopes keys by principal: the same key under two principals runs twice', async () => {
    let runs = 0
    const handle = idempotent(
      async (tenant: string, id: string) => {
        runs++
        return `${tenant}/${id}`
      },
      {
        store: backing.store,
        secrets: SECRETS,
        operation: 'handle',
        key: (_tenant, id) => id,
        principal: (tenant) => tenant,
      },
    )

    expect(await handle('acme', 'k')).toBe('acme/k')
    expect(await handle('globex', 'k')).toBe('globex/k')
    expect(await handle('acme', 'k')).toBe('acme/k')
    expect(runs).toBe(2)
  })

  it('does not run a message twice across a secret rotation between two deliveries', async () => {
    let runs = 0
    const handler = async (message: { id: string; amount: number }) => {
      runs++
      return { credited: message.amount, run: runs }
    }
    const options = { store: backing.store, operation: 'credit', key: 'id' } as const
    const before = idempotent(handler, { ...options, secrets: { current: 1, keys: { 1: SECRET_1 } } })
    const after = idempotent(handler, { ...options, secrets: { current: 2, keys: { 1: SECRET_1, 2: SECRET_2 } } })
    const forgotten = idempotent(handler, { ...options, secrets: { current: 2, keys: { 2: SECRET_2 } } })

    const first = await before({ id: 'm-1', amount: 5 })
    const redelivered = await after({ id: 'm-1', amount: 5 })

    expect(redelivered).toEqual(first)
    expect(runs).toBe(1)
    // The look-up is what keeps it: without the older secret, the same delivery runs again.
    expect(await forgotten({ id: 'm-1', amount: 5 })).toEqual({ credited: 5, run: 2 })
  })

  it('refuses arguments that are not JSON unless a fingerprint says what identifies the call', async () => {
    let runs = 0
    const fn = async (_id: string, amount: bigint) => {
      runs++
      return String(amount)
    }
    const bare = idempotent(fn, { store: backing.store, secrets: SECRETS, operation: 'big', key: (id) => id })
    const fingerprinted = idempotent(fn, {
      store: backing.store,
      secrets: SECRETS,
      operation: 'big',
      key: (id) => id,
      fingerprint: (id, amount) => [id, String(amount)],
    })

    expect(await rejection(bare('k', 1n))).toMatchObject({ code: 'ERR_IDEM_INVALID_ARGUMENT' })
    expect(runs).toBe(0)
    expect(await fingerprinted('k', 1n)).toBe('1')
  })

  it('a result its codec refuses: the function ran once, ERR_IDEM_RESPONSE_NOT_STORABLE, then recovery-required', async () => {
    let runs = 0
    const fn = idempotent(
      async (_id: string) => {
        runs++
        return { when: 1n }
      },
      { store: backing.store, secrets: SECRETS, operation: 'codec', key: (id) => id },
    )

    expect(await rejection(fn('k'))).toMatchObject({ code: 'ERR_IDEM_RESPONSE_NOT_STORABLE' })
    expect(await rejection(fn('k'))).toMatchObject({ code: 'ERR_IDEM_RECOVERY_REQUIRED', reason: 'ABANDONED' })
    expect(runs).toBe(1)
  })

  it('replays a stored answer only to a codec that reads it', async () => {
    const options = { store: backing.store, secrets: SECRETS, operation: 'codec', key: (id: string) => id }
    await idempotent(async (_id: string) => 1, options)('k')

    const other = idempotent(async (_id: string) => 1, { ...options, codec: jsonCodec<number>('json-2') })

    expect(await rejection(other('k'))).toMatchObject({ code: 'ERR_IDEM_RECOVERY_REQUIRED', reason: 'CODEC_MISMATCH' })
  })
})

describe('idempotent() options', () => {
  const store = { name: 'memory' }
  const valid = async () => {
    const { memoryStore } = await import('../../src/stores/memory/index.js')
    return { store: memoryStore(), secrets: SECRETS, operation: 'op', key: (id: string) => id }
  }

  it('is also exported as makeIdempotent', () => {
    expect(makeIdempotent).toBe(idempotent)
  })

  it.each([
    ['operation', { operation: undefined }, 'Option "operation" must be a non-empty string'],
    ['operation', { operation: '' }, 'Option "operation" must be a non-empty string'],
    ['key', { key: undefined }, 'Option "key" must be a function'],
    ['key', { key: 'data..id' }, 'Option "key" must be a function'],
    ['principal', { principal: 5 }, 'Option "principal" must be a string'],
    ['fingerprint', { fingerprint: 'body' }, 'Option "fingerprint" must be a function'],
    ['codec', { codec: {} }, 'Option "codec" must be a codec'],
    ['transaction', { transaction: true }, 'Option "transaction" must be false: the memory store'],
    [
      'transaction',
      { transaction: { name: 'orm', run: async () => undefined } },
      'Option "transaction" must be false: the memory store',
    ],
    ['transaction', { transaction: 'yes' }, 'Option "transaction" must be a boolean or an ORM adapter'],
    ['inFlight', { inFlight: { waitMs: 0 } }, 'Option "inFlight" must be'],
    ['leaseMs', { leaseMs: 5 }, 'Option "leaseMs" must be an integer number of milliseconds from 30'],
    ['claimTimeoutMs', { claimTimeoutMs: 0 }, 'Option "claimTimeoutMs" must be an integer'],
    ['an unknown option', { resumable: true }, 'Option "resumable" must be one of store, secrets, operation'],
    ['resume', { resume: 'yes' }, 'Option "resume" must be a boolean'],
    ['expiredExecution', { resume: true, expiredExecution: 'takeover' }, 'Option "expiredExecution" must be left out'],
    ['store', { store }, 'Option "store" must be an idempotency store'],
  ])('refuses a bad %s with ERR_IDEM_INVALID_OPTION naming it', async (_what, override, message) => {
    const options = { ...(await valid()), ...override }
    let error: unknown
    try {
      idempotent(async (id: string) => id, options as never)
    } catch (caught) {
      error = caught
    }
    expect(error).toBeInstanceOf(IdempotencyError)
    expect(error).toMatchObject({ code: 'ERR_IDEM_INVALID_OPTION' })
    expect(String((error as Error).message)).toContain(message)
    if ('close' in options.store) await options.store.close()
  })

  it('refuses missing secrets with ERR_IDEM_INVALID_SECRET', async () => {
    const options = { ...(await valid()), secrets: { current: 1, keys: { 1: undefined } } }
    expect(() => idempotent(async (id: string) => id, options)).toThrow(
      expect.objectContaining({ code: 'ERR_IDEM_INVALID_SECRET' }),
    )
  })

  it('rejects a call whose key function returns no string, before any store call', async () => {
    const options = { ...(await valid()), key: () => '' }
    const error = await rejection(idempotent(async (id: string) => id, options)('x'))
    expect(error).toMatchObject({ code: 'ERR_IDEM_INVALID_ARGUMENT' })
    expect(String((error as Error).message)).toContain('the key function returned an empty string')
  })
})

describe('idempotent() with the store out of reach', () => {
  it('throws StoreUnavailableError with retryAfterMs, and the function does not run', async () => {
    const port = await freePort()
    const redis = new Redis(port, '127.0.0.1', {
      commandTimeout: 2000,
      maxRetriesPerRequest: 1,
      autoResendUnfulfilledCommands: false,
      enableOfflineQueue: false,
      lazyConnect: true,
    })
    redis.on('error', () => undefined)
    const store = redisStore({ redis })
    let runs = 0
    const fn = idempotent(
      async (id: string) => {
        runs++
        return id
      },
      { store, secrets: SECRETS, operation: 'op', key: (id) => id, unavailableRetryAfterMs: 1500 },
    )
    try {
      const error = await rejection(fn(randomUUID()))
      expect(error).toBeInstanceOf(StoreUnavailableError)
      expect(error).toMatchObject({ code: 'ERR_IDEM_STORE_UNAVAILABLE', retryAfterMs: 1500 })
      expect(runs).toBe(0)
    } finally {
      await store.close()
      redis.disconnect()
    }
  })
})

describe('idempotent() with transaction: true on PostgreSQL', () => {
  let backing: TestStore

  beforeEach(async () => {
    backing = await createPostgresStore()
  })

  afterEach(async () => {
    await backing.teardown()
  })

  it('commits the writes with the stored result; a failure rolls them back and the next call runs', async () => {
    const pool = testPostgresPool()
    await pool.query('CREATE TABLE IF NOT EXISTS jobs_ledger (message_id text, amount int)')
    await pool.query('TRUNCATE jobs_ledger')
    let runs = 0
    const credit = idempotent(
      async (message: { id: string; amount: number }, { db }: ActionContext) => {
        runs++
        if (db === undefined) throw new Error('transaction: true gives db')
        await db.query('INSERT INTO jobs_ledger VALUES ($1, $2)', [message.id, message.amount])
        if (runs === 1) throw new Error('fails after its write')
        return { credited: message.amount }
      },
      { store: backing.store, secrets: SECRETS, operation: 'credit', key: 'id', transaction: true },
    )
    try {
      expect(await rejection(credit({ id: 'm-1', amount: 5 }))).toMatchObject({ message: 'fails after its write' })
      expect((await pool.query('SELECT count(*)::int AS n FROM jobs_ledger')).rows[0].n).toBe(0)

      expect(await credit({ id: 'm-1', amount: 5 })).toEqual({ credited: 5 })
      expect(await credit({ id: 'm-1', amount: 5 })).toEqual({ credited: 5 })
      expect((await pool.query('SELECT message_id, amount FROM jobs_ledger')).rows).toEqual([
        { message_id: 'm-1', amount: 5 },
      ])
      expect(runs).toBe(2)
    } finally {
      await pool.query('DROP TABLE jobs_ledger')
      await pool.end()
    }
  })
})
