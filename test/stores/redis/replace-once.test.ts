/**
 * replace.lua (operators only, `idemkit resolve`) reads the record once: a claim's record in
 * layout 3 is compared as its layout-2 bytes from the value the one GET read. On the suite's
 * redis-server, counted by Redis (INFO commandstats).
 */
import type { Redis } from 'ioredis'
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { commandCalls } from '../../../scripts/redis-server.js'
import { ClaimReply, RecordState } from '../../../src/core/record.js'
import { type RedisStore, redisStore } from '../../../src/stores/redis/index.js'
import { claimRequest } from '../../../src/testing/index.js'
import { redisFixture } from './fixture.js'

const TIMES = { leaseMs: 10_000, replayWindowMs: 60_000, failureRetentionMs: 30_000 } as const
const server = redisFixture({ flush: 'data' })
let client: Redis
let store: RedisStore

beforeAll(async () => {
  client = await server.ready()
})

beforeEach(() => {
  store = redisStore({ redis: client, keyPrefix: 'once' })
})

afterAll(async () => {
  await store.close()
})

/** A new key's claim (layout 3, the claim without a script) and the record an operator reads. */
async function freshRecord(key: string) {
  expect((await store.claim(claimRequest(key, TIMES))).kind).toBe(ClaimReply.ACQUIRED)
  expect((await server.admin.getBuffer(key))?.[0]).toBe(3)
  const { record } = await store.read(key)
  if (record === undefined) throw new Error('the claim wrote no record')
  return record
}

/** The GETs Redis ran for `send`, a script's own among them. */
async function gets(send: () => Promise<unknown>): Promise<number> {
  await server.admin.config('RESETSTAT')
  await send()
  return (await commandCalls(server.admin)).get ?? 0
}

describe('replace.lua', () => {
  it('replaces a layout-3 record it read with one GET', async () => {
    const key = 'once:idem:1:d1:op:a'
    const record = await freshRecord(key)
    const next = { ...record, state: RecordState.ABANDONED, rev: record.rev + 1 }

    let replaced: boolean | undefined
    expect(
      await gets(async () => {
        replaced = await store.replace(key, record, next)
      }),
    ).toBe(1)
    expect(replaced).toBe(true)
    expect((await store.read(key)).record).toMatchObject({ state: RecordState.ABANDONED, rev: record.rev + 1 })
  })

  it('leaves a layout-3 record that changed since alone, with one GET', async () => {
    const key = 'once:idem:1:d1:op:b'
    const record = await freshRecord(key)
    const before = await server.admin.getBuffer(key)

    let replaced: boolean | undefined
    expect(
      await gets(async () => {
        replaced = await store.replace(key, { ...record, rev: record.rev + 1 }, undefined)
      }),
    ).toBe(1)
    expect(replaced).toBe(false)
    expect(await server.admin.getBuffer(key)).toEqual(before)
  })
})
