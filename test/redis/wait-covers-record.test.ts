/**
 * Issue 24, finding 3: with `durability`, every call that ends in WAIT makes its connection's
 * replication offset cover the record, so the WAIT vouches for the record on every Redis version
 * (7.2 moved a connection's offset only for that connection's own propagated commands; this
 * machine runs 7.0, whose offset moves for any command, so the coverage itself is checked: the
 * replication stream grows by the record before the WAIT on the paths that answer without
 * writing). A real master and replica; the replica stopped (SIGSTOP) at the moment that matters.
 */
import { randomBytes } from 'node:crypto'
import { Redis } from 'ioredis'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { type RedisServer, startRedisServer } from '../../scripts/redis-server.js'
import { ClaimReply, TransitionReply } from '../../src/core/record.js'
import { redisStore } from '../../src/stores/redis/index.js'
import { startReplicaOf, storeClient } from '../helpers/redis-replica.js'
import { claimRequest } from '../helpers/stores.js'

describe('WAIT covers the record on every path (durability)', () => {
  let master: RedisServer
  let replica: RedisServer
  let admin: Redis
  let client: Redis
  let onReplica: Redis

  beforeAll(async () => {
    master = await startRedisServer({ config: { 'maxmemory-policy': 'noeviction' } })
    admin = new Redis(master.port, '127.0.0.1', { commandTimeout: 5_000 })
    replica = await startReplicaOf(master.port, admin)
    onReplica = new Redis(replica.port, '127.0.0.1', { commandTimeout: 5_000 })
    client = await storeClient(master.port)
  }, 30_000)

  afterEach(() => {
    process.kill(replica.pid, 'SIGCONT')
  })

  afterAll(async () => {
    client?.disconnect()
    admin?.disconnect()
    onReplica?.disconnect()
    await replica?.stop()
    await master?.stop()
  })

  const store = () =>
    redisStore({ redis: client, durability: { replicas: 1, timeoutMs: 300 }, onEvent: () => undefined })
  const offset = async () => Number(/master_repl_offset:(\d+)/.exec(await admin.info('replication'))?.[1])

  it('a re-sent completion that answers ALREADY writes the record again before its WAIT', async () => {
    const s = store()
    const request = claimRequest(s)
    const claim = await s.claim(request)
    if (claim.kind !== ClaimReply.ACQUIRED) throw new Error(claim.kind)
    const ref = { key: request.key, owner: request.owner, attempt: claim.attempt, rev: claim.rev }
    expect((await s.complete(ref, Buffer.from('{"a":1}'), request)).kind).toBe(TransitionReply.OK)
    const before = await offset()
    expect((await s.complete(ref, Buffer.from('{"a":1}'), request)).kind).toBe(TransitionReply.ALREADY)
    // The record went down the replication stream again, from this connection, before the WAIT
    // (more than the WAIT's own REPLCONF GETACK, 37 bytes: the record's bytes).
    const bytes = ((await admin.getBuffer(request.key)) as Buffer).length
    expect((await offset()) - before).toBeGreaterThanOrEqual(bytes)
    expect(await onReplica.getBuffer(request.key)).toEqual(await admin.getBuffer(request.key))
  })

  it('a re-sent completion answering ALREADY with the replica stopped: a shortfall, never a vouched-for answer', async () => {
    const s = store()
    const request = claimRequest(s)
    const claim = await s.claim(request)
    if (claim.kind !== ClaimReply.ACQUIRED) throw new Error(claim.kind)
    const ref = { key: request.key, owner: request.owner, attempt: claim.attempt, rev: claim.rev }
    // The first completion lands while the replica is stopped (its WAIT falls short)...
    process.kill(replica.pid, 'SIGSTOP')
    await expect(s.complete(ref, Buffer.from('{"b":2}'), request)).rejects.toMatchObject({
      code: 'ERR_IDEM_STORE_UNAVAILABLE',
    })
    // ...and its re-send, ALREADY, on a new connection: still a shortfall while the replica is down.
    client.disconnect(true)
    await new Promise<void>((resolve) => client.once('ready', () => resolve()))
    await expect(s.complete(ref, Buffer.from('{"b":2}'), request)).rejects.toMatchObject({
      code: 'ERR_IDEM_STORE_UNAVAILABLE',
    })
    process.kill(replica.pid, 'SIGCONT')
    expect((await s.complete(ref, Buffer.from('{"b":2}'), request)).kind).toBe(TransitionReply.ALREADY)
    expect(await onReplica.getBuffer(request.key)).toEqual(await admin.getBuffer(request.key))
  })

  it('a claim that answers REPLAYED_ACQUIRE writes the record before its WAIT, and falls short with the replica stopped', async () => {
    const s = store()
    const request = claimRequest(s)
    expect((await s.claim(request)).kind).toBe(ClaimReply.ACQUIRED)
    const before = await offset()
    expect((await s.claim(request)).kind).toBe(ClaimReply.REPLAYED_ACQUIRE)
    const bytes = ((await admin.getBuffer(request.key)) as Buffer).length
    expect((await offset()) - before).toBeGreaterThanOrEqual(bytes)
    process.kill(replica.pid, 'SIGSTOP')
    await expect(s.claim(request)).rejects.toMatchObject({ code: 'ERR_IDEM_STORE_UNAVAILABLE' })
  })

  it('a call that wrote on this connection adds no write of its own before the WAIT', async () => {
    const s = store()
    const request = claimRequest(s, { key: `test:idem:1:d1:op:${randomBytes(8).toString('hex')}` })
    const before = await admin.info('commandstats')
    expect((await s.claim(request)).kind).toBe(ClaimReply.ACQUIRED)
    const after = await admin.info('commandstats')
    const calls = (text: string, command: string) =>
      Number(new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(text)?.[1] ?? 0)
    // The claim of a new key (one SET) and one WAIT: no touch, no script.
    expect(calls(after, 'set') - calls(before, 'set')).toBe(1)
    expect(calls(after, 'evalsha') + calls(after, 'eval') - calls(before, 'evalsha') - calls(before, 'eval')).toBe(0)
    expect(calls(after, 'wait') - calls(before, 'wait')).toBe(1)
  })
})
