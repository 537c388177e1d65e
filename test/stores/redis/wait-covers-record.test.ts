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
import { commandCalls, type RedisServer } from '../../../scripts/redis-server.js'
import { ClaimReply, TransitionReply } from '../../../src/core/record.js'
import { redisStore } from '../../../src/stores/redis/index.js'
import { redisMonitor } from '../../helpers/redis-monitor.js'
import { startReplicaOf, storeClient } from '../../helpers/redis-replica.js'
import { sleep } from '../../helpers/sleep.js'
import { claimRequest } from '../../helpers/stores.js'
import { redisFixture } from './fixture.js'

describe('WAIT covers the record on every path (durability)', () => {
  const master = redisFixture({
    server: { config: { 'maxmemory-policy': 'noeviction' } },
    admin: { commandTimeout: 5_000 },
  })
  let replica: RedisServer
  let client: Redis
  let onReplica: Redis

  beforeAll(async () => {
    replica = await startReplicaOf(master.port, master.admin)
    onReplica = master.client({ commandTimeout: 5_000 }, replica.port)
    client = await storeClient(master.port)
  }, 30_000)

  afterEach(() => {
    process.kill(replica.pid, 'SIGCONT')
  })

  afterAll(async () => {
    client?.disconnect()
    await replica?.stop()
  })

  const store = (functions = true) =>
    redisStore({ redis: client, durability: { replicas: 1, timeoutMs: 300 }, onEvent: () => undefined, functions })
  const offset = async () => Number(/master_repl_offset:(\d+)/.exec(await master.admin.info('replication'))?.[1])

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
    const bytes = ((await master.admin.getBuffer(request.key)) as Buffer).length
    expect((await offset()) - before).toBeGreaterThanOrEqual(bytes)
    expect(await onReplica.getBuffer(request.key)).toEqual(await master.admin.getBuffer(request.key))
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
    expect(await onReplica.getBuffer(request.key)).toEqual(await master.admin.getBuffer(request.key))
  })

  it('a claim that answers REPLAYED_ACQUIRE writes the record before its WAIT, and falls short with the replica stopped', async () => {
    const s = store()
    const request = claimRequest(s)
    expect((await s.claim(request)).kind).toBe(ClaimReply.ACQUIRED)
    const before = await offset()
    expect((await s.claim(request)).kind).toBe(ClaimReply.REPLAYED_ACQUIRE)
    const bytes = ((await master.admin.getBuffer(request.key)) as Buffer).length
    expect((await offset()) - before).toBeGreaterThanOrEqual(bytes)
    process.kill(replica.pid, 'SIGSTOP')
    await expect(s.claim(request)).rejects.toMatchObject({ code: 'ERR_IDEM_STORE_UNAVAILABLE' })
  })

  /** The commands the master runs while `during` runs, in order: MONITOR's source and arguments. */
  async function monitored(during: () => Promise<void>): Promise<{ source: string; args: string[] }[]> {
    const monitor = await redisMonitor(master.port)
    const seen: { source: string; args: string[] }[] = []
    monitor.on('monitor', (_time: string, args: string[], source: string) => {
      seen.push({ source, args: args.map(String) })
    })
    try {
      await during()
      // An ECHO through the monitored server: every command before it has been fed to MONITOR.
      const marker = `marker-${randomBytes(4).toString('hex')}`
      await master.admin.echo(marker)
      for (let i = 0; i < 100 && !seen.some((c) => c.args[1] === marker); i++) await sleep(10)
    } finally {
      monitor.disconnect()
    }
    return seen
  }

  /** Whether the last WAIT of `from` follows a write of `key` by the touch, sent after `after`. */
  function waitFollowsTouch(seen: { source: string; args: string[] }[], from: string, key: string): boolean {
    const lastWait = seen.findLastIndex((c) => c.source === from && c.args[0]?.toLowerCase() === 'wait')
    if (lastWait < 0) return false
    // The nearest script call of `from` before it must be the one whose Lua wrote the record.
    const script = seen.findLastIndex(
      (c, i) => i < lastWait && c.source === from && /^(eval(sha)?|fcall)$/i.test(c.args[0] ?? '') && c.args[3] === key,
    )
    if (script < 0) return false
    return seen
      .slice(script + 1, lastWait)
      .some((c) => c.source === 'lua' && c.args[0]?.toUpperCase() === 'SET' && c.args[1] === key)
  }

  const addressOf = (redis: Redis) => `127.0.0.1:${redis.stream.localPort}`

  it('a touch that meets NOSCRIPT (the script cache flushed) is redone: its WAIT never runs ahead of the write', async () => {
    const s = store(false)
    const request = claimRequest(s)
    const claim = await s.claim(request)
    if (claim.kind !== ClaimReply.ACQUIRED) throw new Error(claim.kind)
    const ref = { key: request.key, owner: request.owner, attempt: claim.attempt, rev: claim.rev }
    expect((await s.complete(ref, Buffer.from('{"c":3}'), request)).kind).toBe(TransitionReply.OK)
    // One ALREADY: the touch is sent, and is in the script cache from then on.
    expect((await s.complete(ref, Buffer.from('{"c":3}'), request)).kind).toBe(TransitionReply.ALREADY)
    await master.admin.script('FLUSH')
    const seen = await monitored(async () => {
      expect((await s.complete(ref, Buffer.from('{"c":3}'), request)).kind).toBe(TransitionReply.ALREADY)
    })
    // Sent as EVALSHA, the touch met NOSCRIPT; a re-send as EVAL would have written the record
    // only after the WAIT pipelined behind it. The WAIT that counted follows the touch's write.
    expect(seen.some((c) => c.source === addressOf(client) && c.args[0]?.toLowerCase() === 'evalsha')).toBe(true)
    expect(waitFollowsTouch(seen, addressOf(client), request.key)).toBe(true)
  })

  it('a touch that meets "Function not found" (the functions flushed) is void and redone: its WAIT never runs ahead of the write', async () => {
    const s = store()
    const request = claimRequest(s)
    const claim = await s.claim(request)
    if (claim.kind !== ClaimReply.ACQUIRED) throw new Error(claim.kind)
    const ref = { key: request.key, owner: request.owner, attempt: claim.attempt, rev: claim.rev }
    expect((await s.complete(ref, Buffer.from('{"e":5}'), request)).kind).toBe(TransitionReply.OK)
    // One ALREADY: the touch is sent, and its function is loaded from then on.
    expect((await s.complete(ref, Buffer.from('{"e":5}'), request)).kind).toBe(TransitionReply.ALREADY)
    // The functions are flushed just before the next touch, on its own connection, so the touch
    // meets "Function not found" with its WAIT pipelined behind it.
    const call = client.call.bind(client) as (...args: unknown[]) => Promise<unknown>
    let flushed = 0
    ;(client as unknown as { call: (...args: unknown[]) => Promise<unknown> }).call = (...args: unknown[]) => {
      if (flushed === 0 && String(args[0]).toLowerCase() === 'fcall' && String(args[1]).startsWith('idemkit_touch_')) {
        flushed++
        void call('function', 'flush')
      }
      return call(...args)
    }
    let seen: { source: string; args: string[] }[]
    try {
      seen = await monitored(async () => {
        expect((await s.complete(ref, Buffer.from('{"e":5}'), request)).kind).toBe(TransitionReply.ALREADY)
      })
    } finally {
      delete (client as unknown as { call?: unknown }).call
    }
    const from = addressOf(client)
    const touches = seen.filter(
      (c) => c.source === from && c.args[0]?.toLowerCase() === 'fcall' && c.args[1]?.startsWith('idemkit_touch_'),
    )
    // The touch that met "Function not found", then the one behind a FUNCTION LOAD; the WAIT that
    // counted follows the second one's write. A WAIT counted after the first touch would follow no write.
    expect(flushed).toBe(1)
    expect(touches.length).toBeGreaterThanOrEqual(2)
    expect(
      seen.some(
        (c) => c.source === from && c.args[0]?.toLowerCase() === 'function' && c.args[1]?.toLowerCase() === 'load',
      ),
    ).toBe(true)
    expect(waitFollowsTouch(seen, from, request.key)).toBe(true)
  })

  it('a WAIT whose connection changed while it waited is void: touch and WAIT again on the new connection', async () => {
    // The client re-sends what was in flight at a reconnect (ioredis's default): the WAIT goes
    // out again on a fresh connection, where from Redis 7.2 on it would cover nothing.
    const resending = new Redis(master.port, '127.0.0.1', { commandTimeout: 2_000, maxRetriesPerRequest: 1 })
    resending.on('error', () => undefined)
    await new Promise<void>((resolve) => resending.once('ready', () => resolve()))
    try {
      const s = redisStore({ redis: resending, durability: { replicas: 1, timeoutMs: 600 }, onEvent: () => undefined })
      const request = claimRequest(s)
      const claim = await s.claim(request)
      if (claim.kind !== ClaimReply.ACQUIRED) throw new Error(claim.kind)
      const ref = { key: request.key, owner: request.owner, attempt: claim.attempt, rev: claim.rev }
      const id = String(await resending.client('ID'))
      process.kill(replica.pid, 'SIGSTOP')
      let completed: Promise<unknown> | undefined
      const seen = await monitored(async () => {
        completed = s.complete(ref, Buffer.from('{"d":4}'), request).then(
          (result) => result,
          (error: unknown) => error,
        )
        // The completion was written and its WAIT waits for the stopped replica: reconnect now.
        let waiting = false
        for (let i = 0; i < 100 && !waiting; i++) {
          waiting = /\bcmd=wait\b/.test(String(await master.admin.client('LIST', 'ID', id)))
          if (!waiting) await sleep(5)
        }
        expect(waiting).toBe(true)
        resending.disconnect(true)
        await completed
      })
      // Still a shortfall (the replica is stopped), and the WAIT that decided it went out on the
      // new connection behind a write of the record there.
      expect(await completed).toMatchObject({ code: 'ERR_IDEM_STORE_UNAVAILABLE' })
      expect(waitFollowsTouch(seen, addressOf(resending), request.key)).toBe(true)
    } finally {
      process.kill(replica.pid, 'SIGCONT')
      resending.disconnect()
    }
  })

  it('a call that wrote on this connection adds no write of its own before the WAIT', async () => {
    const s = store()
    const calls = (counted: Record<string, number>, command: string) => counted[command] ?? 0
    const scripts = (counted: Record<string, number>) =>
      calls(counted, 'evalsha') + calls(counted, 'eval') + calls(counted, 'fcall')
    // The server's counts also see what an earlier test's store may still send in the
    // background (a give-back it retries): the claim is measured a few times, and the fewest
    // commands seen are its own. A claim that wrote more would show it every time.
    let fewest = { set: Number.POSITIVE_INFINITY, scripts: Number.POSITIVE_INFINITY, wait: Number.POSITIVE_INFINITY }
    for (let round = 0; round < 3 && (fewest.set > 1 || fewest.scripts > 0 || fewest.wait > 1); round++) {
      const request = claimRequest(s, { key: `test:idem:1:d1:op:${randomBytes(8).toString('hex')}` })
      const before = await commandCalls(master.admin)
      expect((await s.claim(request)).kind).toBe(ClaimReply.ACQUIRED)
      const after = await commandCalls(master.admin)
      fewest = {
        set: Math.min(fewest.set, calls(after, 'set') - calls(before, 'set')),
        scripts: Math.min(fewest.scripts, scripts(after) - scripts(before)),
        wait: Math.min(fewest.wait, calls(after, 'wait') - calls(before, 'wait')),
      }
      if (round < 2) await sleep(200)
    }
    // The claim of a new key (one SET) and one WAIT: no touch, no script.
    expect(fewest).toEqual({ set: 1, scripts: 0, wait: 1 })
  })
})
