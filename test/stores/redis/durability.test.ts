/**
 * The Redis store on a Sentinel client, and `durability` (WAIT after a claim that starts an
 * execution, after a completion and before a replay) against a real master, replica and three sentinels; the
 * replica really paused (SIGSTOP) for the shortfalls.
 */
import { Cluster, Redis } from 'ioredis'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { ErrorCode } from '../../../src/core/errors.js'
import { RecordState } from '../../../src/core/record.js'
import { decodeRecord } from '../../../src/stores/record-layout.js'
import { type RedisStoreOptions, redisStore } from '../../../src/stores/redis/index.js'
import type { RedisStoreEvent } from '../../../src/stores/redis/server-check.js'
import { claimRequest } from '../../../src/testing/store-contract.js'
import { harness } from '../../helpers/executor-harness.js'
import { type RedisSentinelSetup, SENTINEL_NAME, startRedisSentinel } from '../../helpers/redis-sentinel.js'

describe('the Redis store on Sentinel, with durability', () => {
  let setup: RedisSentinelSetup
  let masterPort: number
  let replicaPid: number
  const clients: Redis[] = []

  beforeAll(async () => {
    setup = await startRedisSentinel()
    masterPort = await setup.masterPort()
    replicaPid = (setup.nodes.find((node) => node.port !== masterPort) as { pid: number }).pid
  }, 60_000)

  afterAll(async () => {
    for (const client of clients) client.disconnect()
    await setup?.stop()
  })

  afterEach(() => {
    process.kill(replicaPid, 'SIGCONT')
  })

  async function sentinelClient(): Promise<Redis> {
    const client = new Redis({
      sentinels: [...setup.sentinels],
      name: SENTINEL_NAME,
      commandTimeout: 2_000,
      maxRetriesPerRequest: 1,
      autoResendUnfulfilledCommands: false,
    })
    client.on('error', () => undefined)
    clients.push(client)
    await new Promise<void>((resolve) => client.once('ready', () => resolve()))
    return client
  }

  function storeOn(redis: Redis, options: Partial<RedisStoreOptions> = {}) {
    const events: RedisStoreEvent[] = []
    const store = redisStore({
      redis,
      keyPrefix: `d${Math.random().toString(36).slice(2, 8)}`,
      onEvent: (e) => events.push(e),
      ...options,
    })
    return { store, events }
  }

  it('runs, replays and reports itself as sentinel on an ioredis Sentinel client', async () => {
    const { store } = storeOn(await sentinelClient())
    const h = harness(store)
    expect(await h.run()).toMatchObject({ kind: 'EXECUTED' })
    expect(await h.run()).toMatchObject({ kind: 'REPLAYED' })
    expect(h.runs()).toBe(1)
    const report = await store.describe()
    expect(report.mode).toBe('sentinel')
  })

  it('with durability the completion is on the replica when the answer is known', async () => {
    const redis = await sentinelClient()
    const { store, events } = storeOn(redis, { durability: { replicas: 1, timeoutMs: 500 } })
    const replica = new Redis({
      port: setup.nodes.find((n) => n.port !== masterPort)?.port as number,
      host: '127.0.0.1',
    })
    clients.push(replica)
    const h = harness(store)
    expect(await h.run()).toMatchObject({ kind: 'EXECUTED' })
    const bytes = await replica.getBuffer(h.key)
    expect(bytes).not.toBeNull()
    expect(decodeRecord(bytes as Buffer).state).toBe(RecordState.COMPLETED)
    expect(events.filter((e) => e.type === 'durability-shortfall')).toEqual([])
  })

  it('reports the connected replicas at startup, and warns when durability asks for more', async () => {
    const redis = await sentinelClient()
    const enough = await storeOn(redis, { durability: { replicas: 1 } }).store.describe()
    const tooMany = await storeOn(redis, { durability: { replicas: 2 } }).store.describe()
    expect(Object.entries(enough.settings).find(([name]) => name.endsWith('connected replicas'))?.[1]).toBe('1')
    expect(enough.warnings.filter((warning) => warning.includes('durability'))).toEqual([])
    expect(
      tooMany.warnings.filter((warning) => warning.includes('durability asks for 2 replica(s) and 1 is connected')),
    ).toHaveLength(1)
  })

  it("replica stopped, onShortfall 'fail': claims answer unavailable, nothing runs, the hold is given back", async () => {
    const redis = await sentinelClient()
    const { store, events } = storeOn(redis, { durability: { replicas: 1, timeoutMs: 200 } })
    process.kill(replicaPid, 'SIGSTOP')
    const runs = Array.from({ length: 30 }, () => harness(store))
    const started = performance.now()
    const outcomes = await Promise.all(runs.map((h) => h.run()))
    const elapsed = performance.now() - started
    console.log(
      `[durability] 30 claims with the replica stopped: ${outcomes
        .map((o) => o.kind)
        .join(',')
        .slice(0, 60)}... in ${Math.round(elapsed)} ms`,
    )
    expect(outcomes.every((o) => o.kind === 'STORE_UNAVAILABLE')).toBe(true)
    expect(runs.reduce((n, h) => n + h.runs(), 0)).toBe(0)
    // Group commit: one WAIT per round, not one per claim (30 × 200 ms would be 6 s).
    expect(elapsed).toBeLessThan(2_000)
    const admin = new Redis({ port: masterPort, host: '127.0.0.1' })
    clients.push(admin)
    const record = decodeRecord((await admin.getBuffer((runs[0] as { key: string }).key)) as Buffer)
    expect(record.state).toBe(RecordState.FAILED_RETRYABLE)
    expect(events.some((e) => e.type === 'durability-shortfall' && e.call === 'claim' && e.action === 'failed')).toBe(
      true,
    )
    process.kill(replicaPid, 'SIGCONT')
    // Once the replica is back, a retry claims (the hold was given back) and runs once.
    const retried = await (runs[0] as ReturnType<typeof harness>).run()
    expect(retried).toMatchObject({ kind: 'EXECUTED', attempt: 2 })
  })

  it("replica stopped, onShortfall 'warn': runs, and reports the shortfall", async () => {
    const redis = await sentinelClient()
    const { store, events } = storeOn(redis, { durability: { replicas: 1, timeoutMs: 100, onShortfall: 'warn' } })
    process.kill(replicaPid, 'SIGSTOP')
    const h = harness(store)
    expect(await h.run()).toMatchObject({ kind: 'EXECUTED' })
    const calls = events.filter((e) => e.type === 'durability-shortfall').map((e) => `${e.call} ${e.action}`)
    expect(calls).toEqual(['claim warned', 'complete warned'])
  })

  it('a completion the replica did not acknowledge is not an answer: 503 after recordRetryMs, then the retry replays', async () => {
    const redis = await sentinelClient()
    const { store } = storeOn(redis, { durability: { replicas: 1, timeoutMs: 100 } })
    const h = harness(store)
    const outcome = await h.run({
      recordRetryMs: 400,
      action: async () => {
        process.kill(replicaPid, 'SIGSTOP')
        return { paid: true }
      },
    })
    expect(outcome).toMatchObject({ kind: 'UNRECORDED', reason: 'STORE_UNAVAILABLE' })
    process.kill(replicaPid, 'SIGCONT')
    expect(await h.run()).toMatchObject({ kind: 'REPLAYED', value: { paid: true } })
    expect(h.runs()).toBe(1)
  })

  it('a replay answers only from a record a replica holds: replica stopped, 503 and nothing runs; replica back, it replays', async () => {
    const redis = await sentinelClient()
    const { store, events } = storeOn(redis, { durability: { replicas: 1, timeoutMs: 100 } })
    const h = harness(store)
    expect(await h.run({ action: async () => ({ paid: true }) })).toMatchObject({ kind: 'EXECUTED' })
    process.kill(replicaPid, 'SIGSTOP')
    // The replica holds this record already; a master deposed by a failover would not: the
    // store cannot tell the two apart, so the replay waits for a replica's acknowledgment.
    expect(await h.run()).toMatchObject({ kind: 'STORE_UNAVAILABLE' })
    expect(
      events.filter((e) => e.type === 'durability-shortfall').map((e) => `${e.call} ${e.action} ${e.acknowledged}`),
    ).toEqual(['replay failed 0'])
    process.kill(replicaPid, 'SIGCONT')
    expect(await h.run()).toMatchObject({ kind: 'REPLAYED', value: { paid: true } })
    expect(h.runs()).toBe(1)
  })

  it('replica stopped: a failure mark, a release and an inspect answer unavailable, not as done; replica back, they stand', async () => {
    const redis = await sentinelClient()
    const { store, events } = storeOn(redis, { durability: { replicas: 1, timeoutMs: 100 } })
    const times = { leaseMs: 30_000, replayWindowMs: 60_000, failureRetentionMs: 60_000 }
    const claimOf = async (owner: string, start: boolean) => {
      const key = harness(store).key
      const claim = await store.claim(claimRequest(key, times, { owner, start }))
      expect(claim.kind).toBe('ACQUIRED')
      return { key, owner, attempt: (claim as { attempt: number }).attempt, rev: (claim as { rev: number }).rev }
    }
    const executing = await claimOf('c'.repeat(64), true)
    const claimed = await claimOf('d'.repeat(64), false)
    process.kill(replicaPid, 'SIGSTOP')
    await expect(store.markFailed(executing, 'retryable', times)).rejects.toMatchObject({
      code: ErrorCode.STORE_UNAVAILABLE,
    })
    await expect(store.release(claimed)).rejects.toMatchObject({ code: ErrorCode.STORE_UNAVAILABLE })
    await expect(store.inspect(executing.key, executing.owner)).rejects.toMatchObject({
      code: ErrorCode.STORE_UNAVAILABLE,
    })
    expect(events.filter((e) => e.type === 'durability-shortfall').map((e) => `${e.call} ${e.action}`)).toEqual([
      'markFailed failed',
      'release failed',
      'inspect failed',
    ])
    process.kill(replicaPid, 'SIGCONT')
    // Re-sent once a replica answers: the mark stands (ALREADY: it landed on the master), the
    // release finds its record gone, and the inspect reads the mark.
    expect((await store.markFailed(executing, 'retryable', times)).kind).toBe('ALREADY')
    expect((await store.release(claimed)).kind).toMatch(/^(ALREADY|NOT_FOUND)$/)
    expect(await store.inspect(executing.key, executing.owner)).toMatchObject({ kind: RecordState.FAILED_RETRYABLE })
  })

  it('refuses durability on a Cluster client and malformed settings', () => {
    const cluster = new Cluster([{ host: '127.0.0.1', port: 1 }], { lazyConnect: true })
    try {
      expect(() => redisStore({ redis: cluster, durability: { replicas: 1 } })).toThrow(/Cluster/)
    } finally {
      cluster.disconnect()
    }
    const redis = new Redis({ lazyConnect: true })
    for (const durability of [
      { replicas: 0 },
      { replicas: 1, timeoutMs: 0 },
      { replicas: 1, onShortfall: 'drop' },
      { replicas: 1, extra: 1 },
      null,
    ]) {
      expect(() => redisStore({ redis, durability: durability as never })).toThrow(
        expect.objectContaining({ code: ErrorCode.INVALID_OPTION }),
      )
    }
    redis.disconnect()
  })
})
