/**
 * The Redis store's operations as one Redis Functions library (docs/design.md §6, "Redis
 * Functions"): every operation still answers while the functions are flushed under load; two
 * versions of the library live side by side; a Cluster node whose functions were flushed gets
 * the library again; an ACL user without FUNCTION turns the store to EVALSHA scripts, once.
 * Real redis-servers throughout.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Cluster, Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { commandCalls, freePort } from '../../../scripts/redis-server.js'
import { ClaimReply, FailureKind, RecordState, TransitionReply } from '../../../src/core/record.js'
import type { ClaimRequest, OwnerRef } from '../../../src/core/store.js'
import { packClaimTexts } from '../../../src/stores/record-layout.js'
import { type RedisStore, type RedisStoreEvent, redisStore } from '../../../src/stores/redis/index.js'
import { buildLibrary, loadLibrary, SCRIPT_NAMES, SCRIPTS_DIR } from '../../../src/stores/redis/script-loader.js'
import { type RedisCluster, startRedisCluster } from '../../helpers/redis-cluster.js'
import { sleep } from '../../helpers/sleep.js'
import { redisFixture } from './fixture.js'

const TIMES = { leaseMs: 10_000, replayWindowMs: 60_000, failureRetentionMs: 30_000 } as const
const owner = () => randomBytes(32).toString('hex')
const newKey = (tag = '') => `fn:idem:1:d1:op:${tag}${randomBytes(8).toString('hex')}`

function request(key: string, overrides: Partial<ClaimRequest> = {}): ClaimRequest {
  return {
    key,
    owner: owner(),
    fingerprint: 'f1:aa',
    operation: 'POST /orders',
    codec: 'json-1',
    policy: '1',
    start: false,
    expiredExecution: 'recover',
    ...TIMES,
    ...overrides,
  }
}

/**
 * Every operation of the store on fresh keys, each through its script or function: claim (a new
 * key, then the claim script), inspect, start, renew, complete, the replay, markFailed, release,
 * replace. Resolves to what each answered, in order.
 */
async function everyOperation(store: RedisStore, tag = ''): Promise<string[]> {
  const answers: string[] = []
  const key = newKey(tag)
  const claim = request(key)
  const first = await store.claim(claim)
  if (first.kind !== ClaimReply.ACQUIRED) throw new Error(`claim: ${first.kind}`)
  const again = await store.claim(claim)
  answers.push(again.kind)
  if (again.kind !== ClaimReply.REPLAYED_ACQUIRE) throw new Error(`claim again: ${again.kind}`)
  const ref: OwnerRef = { key, owner: claim.owner, attempt: again.attempt, rev: again.rev }
  answers.push((await store.inspect(key, claim.owner)).kind)
  const started = await store.start(ref, TIMES)
  answers.push(started.kind)
  const executing = { ...ref, rev: started.kind === TransitionReply.OK ? started.rev : ref.rev }
  answers.push((await store.renew(executing, TIMES)).kind)
  answers.push((await store.complete(executing, Buffer.from('{"ok":1}'), TIMES)).kind)
  answers.push((await store.claim({ ...claim, owner: owner() })).kind)

  const failing = request(newKey(tag), { start: true })
  const held = await store.claim(failing)
  if (held.kind !== ClaimReply.ACQUIRED) throw new Error(`claim: ${held.kind}`)
  const failRef = { key: failing.key, owner: failing.owner, attempt: held.attempt, rev: held.rev }
  answers.push((await store.markFailed(failRef, FailureKind.RETRYABLE, TIMES)).kind)

  const releasing = request(newKey(tag))
  const claimed = await store.claim(releasing)
  if (claimed.kind !== ClaimReply.ACQUIRED) throw new Error(`claim: ${claimed.kind}`)
  answers.push(
    (await store.release({ key: releasing.key, owner: releasing.owner, attempt: claimed.attempt, rev: claimed.rev }))
      .kind,
  )

  const read = await store.read(failing.key)
  if (read.record === undefined) throw new Error('no record to replace')
  answers.push(String(await store.replace(failing.key, read.record, undefined)))
  return answers
}

const EVERY_OPERATION = [
  ClaimReply.REPLAYED_ACQUIRE,
  RecordState.CLAIMED,
  TransitionReply.OK,
  'OK',
  TransitionReply.OK,
  ClaimReply.COMPLETED_REPLAY,
  TransitionReply.OK,
  TransitionReply.OK,
  'true',
]

const libraries = async (redis: Redis): Promise<string[]> => {
  const list = (await redis.call('function', 'list')) as unknown[][]
  return list.map((entry) => String(entry[entry.indexOf('library_name') + 1])).sort()
}

describe('the Redis store on Redis Functions', () => {
  const server = redisFixture({
    server: { config: { 'maxmemory-policy': 'noeviction' } },
    admin: { commandTimeout: 5_000, maxRetriesPerRequest: 1 },
  })
  const client = (options: Record<string, unknown> = {}) => server.ready({ commandTimeout: 5_000, ...options })

  it('sends FCALL, and loads the library where the server has none', async () => {
    await server.admin.call('function', 'flush')
    await server.admin.config('RESETSTAT')
    const store = redisStore({ redis: await client(), keyPrefix: 'fn' })

    expect(await everyOperation(store)).toEqual(EVERY_OPERATION)

    const calls = await commandCalls(server.admin)
    expect(calls.fcall ?? 0).toBeGreaterThanOrEqual(8)
    expect((calls.evalsha ?? 0) + (calls.eval ?? 0)).toBe(0)
    expect(await libraries(server.admin)).toEqual([loadLibrary().name])
    expect(store.scriptMode()).toEqual({ mode: 'functions', library: loadLibrary().name })
  })

  it('answers every operation while FUNCTION FLUSH runs every 2 ms under load, nothing run twice', async () => {
    const store = redisStore({ redis: await client(), keyPrefix: 'fn' })
    let flushing = true
    let flushes = 0
    const flusher = (async () => {
      while (flushing) {
        await server.admin.call('function', 'flush')
        flushes++
        await sleep(2)
      }
    })()
    const runs: string[][] = []
    try {
      // Rounds of 40 loads at once until more than 10 flushes ran among them (a loaded machine
      // runs fewer flushes a round), at most 20 rounds.
      for (let round = 0; round < 20 && (round === 0 || flushes <= 10); round++)
        runs.push(
          ...(await Promise.all(Array.from({ length: 40 }, (_, i) => everyOperation(store, `load${round}.${i}:`)))),
        )
    } finally {
      flushing = false
      await flusher
    }
    expect(flushes).toBeGreaterThan(10)
    for (const answers of runs) expect(answers).toEqual(EVERY_OPERATION)
    // The loads that followed the flushes never turned the store to scripts.
    expect(store.scriptMode().mode).toBe('functions')
  })

  it('runs beside another version of the library: neither replaces the other, both answer', async () => {
    // Another version: the same scripts with one line changed, so another hash.
    const dir = mkdtempSync(join(tmpdir(), 'idemkit-lib-'))
    try {
      cpSync(SCRIPTS_DIR, dir, { recursive: true })
      writeFileSync(join(dir, 'lib', 'now.lua'), '\n-- another version\n', { flag: 'a' })
      const other = buildLibrary(dir, SCRIPT_NAMES)
      expect(other.name).not.toBe(loadLibrary().name)
      await server.admin.call('function', 'flush')
      await server.admin.call('function', 'load', other.source)

      const store = redisStore({ redis: await client(), keyPrefix: 'fn' })
      expect(await everyOperation(store)).toEqual(EVERY_OPERATION)

      // Both libraries are loaded, and the other version's functions still answer.
      expect(await libraries(server.admin)).toEqual([loadLibrary().name, other.name].sort())
      const key = newKey()
      expect(await server.admin.call('fcall', other.functions.inspect, 1, key, owner())).toEqual(['ABSENT'])
      const ownerOf = owner()
      const args = [ownerOf, 'f1:aa', '0', 'recover', '10000', '30000', packClaimTexts('json-1', '1', 'op'), '0']
      expect(((await server.admin.call('fcall', other.functions.claim, 1, key, ...args)) as unknown[])[0]).toBe(
        'ACQUIRED',
      )
      // The record the other version wrote reads the same through this one.
      expect(await store.inspect(key, ownerOf)).toMatchObject({ kind: RecordState.CLAIMED, mine: true })
      // Loading it again (another instance of that version starting) is no error.
      await expect(server.admin.call('function', 'load', other.source)).rejects.toThrow(/already exists/)
      expect(await everyOperation(store)).toEqual(EVERY_OPERATION)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('an ACL user without FUNCTION: the store turns to EVALSHA scripts once, says so, and answers', async () => {
    await server.admin.call('function', 'flush')
    await server.admin.call('ACL', 'SETUSER', 'nofn', 'on', '>pw', '~*', '&*', '+@all', '-function')
    const events: RedisStoreEvent[] = []
    const store = redisStore({
      redis: await client({ username: 'nofn', password: 'pw' }),
      keyPrefix: 'fn',
      onEvent: (event) => events.push(event),
    })
    const report = await store.describe()
    expect(report.settings.operations).toMatch(/^EVALSHA scripts \(Redis refused FUNCTION or FCALL: NOPERM/)
    await server.admin.config('RESETSTAT')

    expect(await everyOperation(store)).toEqual(EVERY_OPERATION)
    expect(await everyOperation(store)).toEqual(EVERY_OPERATION)

    const calls = await commandCalls(server.admin)
    expect(calls.fcall ?? 0).toBe(0)
    expect(calls.function ?? 0).toBe(0)
    expect((calls.evalsha ?? 0) + (calls.eval ?? 0)).toBeGreaterThanOrEqual(16)
    expect(events.filter((event) => event.type === 'scripts-instead-of-functions')).toHaveLength(1)
    expect(store.scriptMode().mode).toBe('scripts')
  })

  it('an ACL user without FCALL nor FUNCTION, library loaded or not: the first call turns it to scripts', async () => {
    await server.admin.call('ACL', 'SETUSER', 'nofcall', 'on', '>pw', '~*', '&*', '+@all', '-function', '-fcall')
    for (const loaded of [false, true]) {
      await server.admin.call('function', 'flush')
      if (loaded) await server.admin.call('function', 'load', loadLibrary().source)
      const events: RedisStoreEvent[] = []
      const store = redisStore({
        redis: await client({ username: 'nofcall', password: 'pw' }),
        keyPrefix: 'fn',
        onEvent: (event) => events.push(event),
      })
      expect(await everyOperation(store)).toEqual(EVERY_OPERATION)
      expect(events.map((event) => event.type)).toEqual(['scripts-instead-of-functions'])
      expect(store.scriptMode()).toMatchObject({ mode: 'scripts', reason: expect.stringMatching(/NOPERM/) })
    }
  })

  it('with functions false, sends EVALSHA scripts and never FUNCTION', async () => {
    await server.admin.config('RESETSTAT')
    const store = redisStore({ redis: await client(), keyPrefix: 'fn', functions: false })

    expect(await everyOperation(store)).toEqual(EVERY_OPERATION)

    const calls = await commandCalls(server.admin)
    expect((calls.fcall ?? 0) + (calls.function ?? 0)).toBe(0)
    expect((calls.evalsha ?? 0) + (calls.eval ?? 0)).toBeGreaterThanOrEqual(8)
  })
})

describe('the Redis store on a server without FCALL and FUNCTION', () => {
  let child: ChildProcess
  let redis: Redis

  beforeAll(async () => {
    // As a managed Redis that disables them, or a Redis before 7.0: "ERR unknown command".
    const port = await freePort()
    child = spawn(
      'redis-server',
      ['--port', String(port), '--save', '', '--rename-command', 'FCALL', '', '--rename-command', 'FUNCTION', ''],
      { stdio: 'ignore' },
    )
    redis = new Redis(port, '127.0.0.1', { commandTimeout: 5_000, retryStrategy: (n) => (n > 50 ? null : 50) })
    redis.on('error', () => undefined)
    await redis.ping()
  })

  afterAll(async () => {
    redis?.disconnect()
    if (child?.pid !== undefined) {
      const exited = once(child, 'exit')
      process.kill(child.pid, 'SIGKILL')
      await exited
    }
  })

  it('turns to EVALSHA scripts at the first call, once, and answers every operation', async () => {
    const events: RedisStoreEvent[] = []
    const store = redisStore({ redis, keyPrefix: 'fn', onEvent: (event) => events.push(event) })

    expect(await everyOperation(store)).toEqual(EVERY_OPERATION)
    expect(await everyOperation(store)).toEqual(EVERY_OPERATION)

    expect(events.map((event) => event.type)).toEqual(['scripts-instead-of-functions'])
    expect(store.scriptMode()).toMatchObject({ mode: 'scripts', reason: expect.stringMatching(/unknown command/) })
    const calls = await commandCalls(redis)
    expect((calls.evalsha ?? 0) + (calls.eval ?? 0)).toBeGreaterThanOrEqual(16)
  })
})

describe('the Redis store on Redis Functions, on a Cluster', () => {
  let cluster: RedisCluster
  let redis: Cluster
  const nodes: Redis[] = []

  beforeAll(async () => {
    cluster = await startRedisCluster()
    redis = new Cluster(
      cluster.nodes.map((node) => ({ host: '127.0.0.1', port: node.port })),
      { redisOptions: { commandTimeout: 5_000 } },
    )
    await redis.ping()
    for (const node of cluster.nodes) nodes.push(new Redis(node.port, '127.0.0.1', { commandTimeout: 5_000 }))
  }, 60_000)

  afterAll(async () => {
    redis?.disconnect()
    for (const node of nodes) node.disconnect()
    await cluster?.stop()
  })

  it('a master whose functions were flushed gets the library again, and every operation answers', async () => {
    const store = redisStore({ redis, keyPrefix: 'fn' })
    // Keys on every master.
    expect(await Promise.all(Array.from({ length: 12 }, (_, i) => everyOperation(store, `{c${i}}`)))).toEqual(
      Array.from({ length: 12 }, () => EVERY_OPERATION),
    )
    for (const node of nodes) expect(await libraries(node)).toEqual([loadLibrary().name])

    // One master loses its functions (FUNCTION FLUSH: as a fresh node would have none).
    const [flushed] = nodes as [Redis]
    await flushed.call('function', 'flush')
    await flushed.config('RESETSTAT')
    expect(await libraries(flushed)).toEqual([])

    expect(await Promise.all(Array.from({ length: 12 }, (_, i) => everyOperation(store, `{d${i}}`)))).toEqual(
      Array.from({ length: 12 }, () => EVERY_OPERATION),
    )
    expect(await libraries(flushed)).toEqual([loadLibrary().name])
    const calls = await commandCalls(flushed)
    expect(calls.fcall ?? 0).toBeGreaterThan(0)
    expect(calls.evalsha ?? 0).toBe(0)
    expect(store.scriptMode().mode).toBe('functions')
  }, 30_000)
})
