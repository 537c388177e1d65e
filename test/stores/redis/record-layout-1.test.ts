/**
 * Records written by version 1 of this library (record layout 1: a hash of fields, integers as
 * decimal strings, the response as `http-1` JSON) keep answering as they did until they expire:
 * a completed one replays its response, a running one is in progress, a failed one is taken
 * over (and rewritten in layout 2). Each record is written here field by field, as version 1's
 * scripts wrote it.
 */
import { randomBytes } from 'node:crypto'
import type { Redis } from 'ioredis'
import { beforeAll, describe, expect, it } from 'vitest'
import type { ClaimRequest } from '../../../src/core/store.js'
import { encodeLegacyResponse, responseCodec } from '../../../src/http/response-codec.js'
import { decodeRecord } from '../../../src/stores/record-layout.js'
import { redisStore } from '../../../src/stores/redis/index.js'
import { ORDER_TIMES, serverNow } from '../../helpers/stores.js'
import { redisFixture } from './fixture.js'

const server = redisFixture({ flush: 'data' })
let client: Redis

beforeAll(async () => {
  client = await server.ready()
})

const owner = () => randomBytes(32).toString('hex')

/** Writes a layout-1 record the way version 1's scripts did: HSET of every field, then PEXPIREAT. */
async function writeV1(key: string, fields: Record<string, string | number | Buffer>): Promise<void> {
  const now = await serverNow(server.admin)
  const record: Record<string, string | number | Buffer> = {
    owner: owner(),
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
    ...fields,
  }
  await server.admin.hset(key, record)
  await server.admin.pexpireat(key, Number(record.expiresAt))
}

function claim(key: string, overrides: Partial<ClaimRequest> = {}): ClaimRequest {
  return {
    key,
    owner: owner(),
    fingerprint: 'fp-1',
    operation: 'POST /orders',
    codec: 'http-2',
    policy: '1',
    start: true,
    expiredExecution: 'recover',
    ...ORDER_TIMES,
    ...overrides,
  }
}

describe('records of layout 1', () => {
  it('replays a completed record of version 1, and the response codec reads its http-1 body', async () => {
    const store = redisStore({ redis: client })
    const now = await serverNow(server.admin)
    const sent = { status: 201, headers: { 'content-type': 'application/json' }, body: Buffer.from('{"id":7}') }
    await writeV1('v1:done', {
      state: 'COMPLETED',
      replayUntil: now + 60_000,
      resp: encodeLegacyResponse(sent),
    })

    const replay = await store.claim(claim('v1:done'))
    const seen = await store.inspect('v1:done', owner())

    expect(replay).toMatchObject({ kind: 'COMPLETED_REPLAY', codec: 'http-1', policy: '1', replayUntil: now + 60_000 })
    if (replay.kind !== 'COMPLETED_REPLAY') return
    expect(responseCodec(['content-type'], 1 << 20).decode(replay.response, replay.codec)).toEqual(sent)
    expect(seen).toMatchObject({ kind: 'COMPLETED', attempt: 1, rev: 2, fingerprint: 'fp-1', codec: 'http-1' })
    expect(await server.admin.type('v1:done')).toBe('hash')
  })

  it('answers a running record of version 1 in progress, and a different request a mismatch', async () => {
    const store = redisStore({ redis: client })
    await writeV1('v1:running', { state: 'EXECUTING' })

    const busy = await store.claim(claim('v1:running'))
    const other = await store.claim(claim('v1:running', { fingerprint: 'fp-2' }))

    expect(busy.kind).toBe('IN_PROGRESS')
    expect(other).toEqual({ kind: 'FINGERPRINT_MISMATCH' })
  })

  it('answers an abandoned record of version 1 recovery-required', async () => {
    const store = redisStore({ redis: client })
    await writeV1('v1:abandoned', { state: 'ABANDONED' })

    expect(await store.claim(claim('v1:abandoned'))).toEqual({ kind: 'RECOVERY_REQUIRED', reason: 'ABANDONED' })
  })

  it('takes over a failed record of version 1 and rewrites it in layout 2', async () => {
    const store = redisStore({ redis: client })
    await writeV1('v1:failed', { state: 'FAILED_RETRYABLE', attempt: 3, rev: 6 })
    const request = claim('v1:failed')

    const taken = await store.claim(request)
    const raw = await server.admin.getBuffer('v1:failed')

    expect(taken).toMatchObject({ kind: 'TAKEN_OVER', state: 'EXECUTING', attempt: 4, rev: 7 })
    expect(await server.admin.type('v1:failed')).toBe('string')
    expect(decodeRecord(raw as Buffer)).toMatchObject({
      state: 'EXECUTING',
      owner: request.owner,
      attempt: 4,
      codec: 'http-2',
    })
  })

  it('acquires afresh over a record of version 1 past its lifetime', async () => {
    const store = redisStore({ redis: client })
    const now = await serverNow(server.admin)
    await writeV1('v1:old', { state: 'COMPLETED', replayUntil: now + 60_000, resp: '{}', expiresAt: now - 1 })
    await server.admin.persist('v1:old')

    expect(await store.claim(claim('v1:old'))).toMatchObject({ kind: 'ACQUIRED', attempt: 1, rev: 1 })
    expect(await server.admin.type('v1:old')).toBe('string')
  })
})
