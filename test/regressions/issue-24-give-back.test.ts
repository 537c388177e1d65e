/**
 * Issue 24, finding 4: with `durability`, a claim whose WAIT falls short is given back
 * (FAILED_RETRYABLE: nothing ran) and answers 503. A give-back that could not be sent was
 * dropped, leaving the key EXECUTING under an owner that never runs: 409 for a lease, then
 * recovery-required for the whole retention, until an operator freed it. Now it goes to the
 * undecided claims and is settled once Redis answers. A real master (append-only file, fsync on
 * every write) and replica; the replica paused (the shortfall), the master killed during the
 * WAIT (the give-back cannot be sent) and started again.
 */
import { randomUUID } from 'node:crypto'
import type { FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { RedisServer } from '../../scripts/redis-server.js'
import { inspectScope } from '../../src/admin/index.js'
import { parseSecrets } from '../../src/core/scope.js'
import { redisStore } from '../../src/stores/redis/index.js'
import { SECRET } from '../helpers/example-app.js'
import { sleep } from '../helpers/executor-harness.js'
import { type FaultRedis, startFaultRedis } from '../helpers/fault-redis.js'
import { pluginApp, postOrder } from '../helpers/plugin-app.js'
import { startReplicaOf, storeClient } from '../helpers/redis-replica.js'

describe('a durability give-back that cannot be sent', () => {
  let master: FaultRedis
  let replica: RedisServer
  let admin: Redis
  let client: Redis
  let app: FastifyInstance
  let runs = 0

  beforeAll(async () => {
    master = await startFaultRedis({ aof: true, config: { appendfsync: 'always' } })
    admin = master.admin()
    replica = await startReplicaOf(master.port, admin)
    client = await storeClient(master.port)
    const store = redisStore({ redis: client, durability: { replicas: 1, timeoutMs: 600 }, onEvent: () => undefined })
    app = await pluginApp(store, { leaseMs: 10_000, storeCallTimeoutMs: 5_000 })
    app.post('/orders', { config: { idempotency: true } }, async (_request, reply) => {
      runs++
      return reply.code(201).send({ order: runs })
    })
  }, 30_000)

  afterAll(async () => {
    try {
      process.kill(replica.pid, 'SIGCONT')
    } catch {
      // Gone already.
    }
    await app?.close()
    client?.disconnect()
    await replica?.stop()
    await master?.stop()
  })

  it('settles itself: the key is FAILED_RETRYABLE again and its retry runs once', async () => {
    const key = randomUUID()
    const post = () => postOrder(app, key)
    const id = await client.client('ID')
    process.kill(replica.pid, 'SIGSTOP')
    const answered = post()
    // The claim lands (on disk: fsync always) and its WAIT waits for the stopped replica; the
    // master is killed then, so the WAIT fails and the give-back finds no server to go to.
    let waiting = false
    for (let i = 0; i < 300 && !waiting; i++) {
      const clients = String(await admin.client('LIST', 'ID', String(id)))
      waiting = /\bcmd=wait\b/.test(clients)
      if (!waiting) await sleep(10)
    }
    expect(waiting).toBe(true)
    await master.kill()
    const first = await answered
    expect(first.statusCode).toBe(503)
    expect(runs).toBe(0)
    await master.restart()
    process.kill(replica.pid, 'SIGCONT')

    const scope = {
      store: redisStore({ redis: admin, onEvent: () => undefined }),
      secrets: parseSecrets({ current: 1, keys: { 1: SECRET } }),
      principal: 'alice',
      key,
      operation: 'POST /orders',
    }
    let state: string | undefined
    for (let i = 0; i < 100; i++) {
      state = (await inspectScope(scope)).versions[0]?.record?.state
      if (state !== 'EXECUTING') break
      await sleep(100)
    }
    console.log(`[issue-24 give-back] the key after the failed give-back: ${state}`)
    expect(state).toBe('FAILED_RETRYABLE')
    // The replica is back in sync with the restarted master: the retry's WAIT is answered.
    for (let i = 0; i < 100; i++) {
      const info = await master.info('replication')
      if (info.connected_slaves === '1' && /state=online/.test(info.slave0 ?? '')) break
      await sleep(100)
    }
    // A retry runs it once. Until the store's client has reconnected to the restarted master and
    // the replica acknowledges in time, a retry may still be answered 503 store-unavailable, with
    // nothing run: a client retries that.
    for (let i = 0; i < 100 && client.status !== 'ready'; i++) await sleep(100)
    let retry = await post()
    for (let i = 0; i < 20 && retry.statusCode === 503; i++) {
      expect(retry.json()).toMatchObject({ code: 'IDEMPOTENCY_STORE_UNAVAILABLE' })
      expect(runs).toBe(0)
      await sleep(250)
      retry = await post()
    }
    expect(retry.statusCode).toBe(201)
    expect(runs).toBe(1)
    expect((await post()).headers['idempotent-replayed']).toBe('true')
  }, 30_000)
})
