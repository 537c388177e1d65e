/**
 * What `idemkit` does before and after a command, in this process (test/admin/cli.test.ts runs
 * the command itself as a child process): the store a URL names, opened on the suite's
 * redis-server and PostgreSQL and checked before use; the errors that end a command (a URL that
 * is none, a scheme it does not know, a server not reached, a Redis database the server does not
 * have); the store URL from the option or the environment; and what `inspect` prints for records
 * a real store holds.
 */
import { randomUUID } from 'node:crypto'
import { afterEach, describe, expect, inject, it, vi } from 'vitest'
import { freePort } from '../../scripts/redis-server.js'
import { ConnectError, causeOf, openStore, serverOf, storeUrl, UsageError } from '../../src/admin/cli-store.js'
import { human, print } from '../../src/admin/cli-text.js'
import { inspectScope } from '../../src/admin/index.js'
import { ClaimReply, TransitionReply } from '../../src/core/record.js'
import { parseSecrets } from '../../src/core/scope.js'
import type { ClaimRequest, IdempotencyStore, OwnerRef } from '../../src/core/store.js'
import { operationCode, scopeKeys } from '../../src/core/store-key.js'
import { claimRequest } from '../../src/testing/index.js'

const SECRETS = parseSecrets({ current: 1, keys: { 1: 'c'.repeat(32) } })
const TIMES = { leaseMs: 10_000, replayWindowMs: 60_000, failureRetentionMs: 30_000 }

afterEach(() => {
  vi.restoreAllMocks()
})

const OPERATION = 'POST /orders'

/** The store key of principal `u`'s Idempotency-Key `key` on POST /orders, under SECRETS' current version. */
function scopeKey(store: IdempotencyStore, key: string): string {
  const [at] = scopeKeys(store.keyPrefix, SECRETS, operationCode(OPERATION), {
    principal: 'u',
    key,
    operation: OPERATION,
  })
  if (at === undefined) throw new Error('no scope key')
  return at.key
}

/** Claims `key` (EXECUTING) on `store`, and answers the holder's reference. */
async function claimed(store: IdempotencyStore, key: string, overrides: Partial<ClaimRequest> = {}): Promise<OwnerRef> {
  const request = claimRequest(scopeKey(store, key), TIMES, { operation: OPERATION, ...overrides })
  const claim = await store.claim(request)
  if (claim.kind !== ClaimReply.ACQUIRED) throw new Error(`claim of ${key}: ${claim.kind}`)
  return { key: request.key, owner: request.owner, attempt: claim.attempt, rev: claim.rev }
}

describe('openStore', () => {
  it.each([
    ['redis', () => `${inject('redisUrl')}/0`, /^redis 127\.0\.0\.1:\d+\/0$/],
    ['postgres', () => inject('postgresUrl'), /^postgres [^:]+:\d+\/\S+$/],
  ])('opens the %s store a URL names, which then reads and writes records', async (_name, url, where) => {
    const open = await openStore(url(), { 'key-prefix': `cli-${randomUUID().slice(0, 8)}` })
    try {
      expect(open.where).toMatch(where)
      const ref = await claimed(open.store, 'k-1')
      expect((await open.store.complete(ref, Buffer.from('{}'), TIMES)).kind).toBe(TransitionReply.OK)
      const read = await open.store.read?.(ref.key)
      expect(read?.record?.state).toBe('COMPLETED')
    } finally {
      await open.close()
    }
  })

  it('refuses a Redis database the server does not have, rather than using database 0', async () => {
    const url = `${inject('redisUrl')}/99`
    const error = await openStore(url, {}).catch((caught: unknown) => caught)
    expect(error).toBeInstanceOf(ConnectError)
    expect((error as Error).message).toMatch(/^cannot use redis 127\.0\.0\.1:\d+\/99: /)
  })

  it.each([
    [
      'redis',
      async () => `redis://127.0.0.1:${await freePort()}/3`,
      /^cannot connect to redis 127\.0\.0\.1:\d+\/3: \S/,
    ],
    [
      'postgres',
      async () => {
        const url = new URL(inject('postgresUrl'))
        url.hostname = '127.0.0.1'
        url.port = String(await freePort())
        return url.toString()
      },
      /^cannot connect to postgres [^:]+:\d+\/\S+: \S/,
    ],
  ])('names the %s server it could not reach, and why', async (_name, url, message) => {
    const error = await openStore(await url(), {}).catch((caught: unknown) => caught)
    expect(error).toBeInstanceOf(ConnectError)
    expect((error as Error).message).toMatch(message)
  })

  it('refuses what is not a store URL, without echoing a password', async () => {
    const notUrl = await openStore('redis//user:secret@host', {}).catch((caught: unknown) => caught)
    expect(notUrl).toBeInstanceOf(UsageError)
    expect((notUrl as Error).message).toBe('--store is not a URL: redis//…@host')
    const noScheme = await openStore('not a url //user:secret@host', {}).catch((caught: unknown) => caught)
    expect((noScheme as Error).message).not.toContain('secret')
    const scheme = await openStore('mysql://127.0.0.1/app', {}).catch((caught: unknown) => caught)
    expect(scheme).toBeInstanceOf(UsageError)
    expect((scheme as Error).message).toBe('--store must be a redis:// or postgres:// URL, not mysql:')
  })
})

describe('the store URL and the server it names', () => {
  it('takes --store, else IDEMKIT_STORE, and warns when a password is on the command line', () => {
    const warnings: string[] = []
    vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
      warnings.push(String(chunk))
      return true
    })
    expect(storeUrl({ store: 'redis://127.0.0.1:6380/2' }, {})).toBe('redis://127.0.0.1:6380/2')
    expect(storeUrl({}, { IDEMKIT_STORE: 'postgres://app:pw@db/app' })).toBe('postgres://app:pw@db/app')
    expect(warnings).toEqual([])
    expect(storeUrl({ store: 'redis://user:pw@127.0.0.1:6380' }, {})).toBe('redis://user:pw@127.0.0.1:6380')
    expect(warnings.join('')).toMatch(/password.*set IDEMKIT_STORE instead/)
    expect(() => storeUrl({}, {})).toThrow(UsageError)
    expect(() => storeUrl({}, { IDEMKIT_STORE: '' })).toThrow('--store (or IDEMKIT_STORE) is required')
  })

  it('names host, port and database, never the user or password', () => {
    expect(serverOf(new URL('redis://user:pw@cache.internal:6380/2'), 6379, '0')).toBe('cache.internal:6380/2')
    expect(serverOf(new URL('redis://cache.internal'), 6379, '0')).toBe('cache.internal:6379/0')
    expect(serverOf(new URL('postgres://app:pw@db/orders%20eu'), 5432, 'app')).toBe('db:5432/orders eu')
  })

  it('gives the cause of an error and of the errors behind it', () => {
    const inner = Object.assign(new Error(''), { code: 'ECONNREFUSED' })
    expect(causeOf(new Error('connect failed', { cause: inner }))).toBe('connect failed (ECONNREFUSED)')
    expect(causeOf('plain')).toBe('plain')
  })
})

describe('what inspect prints', () => {
  it('gives durations for people', () => {
    expect(human(850.4)).toBe('850 ms')
    expect(human(12_340)).toBe('12.3 s')
    expect(human(250_000)).toBe('4 min 10 s')
    expect(human(86_340_000)).toBe('23 h 59 min')
    expect(human(266_400_000)).toBe('3 d 2 h')
  })

  it('prints a completed record, a running one and a missing one as a real store holds them', async () => {
    const open = await openStore(`${inject('redisUrl')}/0`, { 'key-prefix': `cli-${randomUUID().slice(0, 8)}` })
    try {
      await claimed(open.store, 'running', { codec: 'http-2' })
      const done = await claimed(open.store, 'done', { codec: 'http-2' })
      expect(
        (await open.store.complete(done, Buffer.concat([Buffer.from([0, 201]), Buffer.from('{"id":"o-1"}')]), TIMES))
          .kind,
      ).toBe(TransitionReply.OK)
      const text = async (key: string) =>
        print(await inspectScope({ store: open.store, secrets: SECRETS, principal: 'u', key, operation: OPERATION }))

      const running = await text('running')
      expect(running).toMatch(/^POST \/orders: scope digest \S+ \(secret version 1, current\)\n/)
      expect(running).toMatch(/ {2}state {5}EXECUTING\n/)
      expect(running).toMatch(/ {2}lease {5}\d+(\.\d)? s left\n/)
      expect(running).toMatch(/ {2}stored {4}operation POST \/orders, codec http-2, policy 1\n$/)

      const completed = await text('done')
      expect(completed).toMatch(/ {2}state {5}COMPLETED\n/)
      expect(completed).toMatch(/ {2}replays {3}for \d+(\.\d)? s\n/)
      expect(completed).toMatch(/ {2}response {2}201, 14 bytes\n/)
      expect(completed).not.toContain('lease')

      expect(await text('never')).toMatch(/: no record\n$/)
    } finally {
      await open.close()
    }
  })
})
