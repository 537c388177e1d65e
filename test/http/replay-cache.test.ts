/**
 * `replayCache` over HTTP, on Fastify and Express with the Redis store: a replay the cache kept is
 * answered byte for byte with no store call (the store's calls counted, and Redis's own command
 * count unchanged); another body still gets the store's 422, another principal with the same key
 * its own run; the option is checked when the plugin is registered.
 */
import { createServer } from 'node:http'
import express from 'express'
import Fastify from 'fastify'
import type { Redis } from 'ioredis'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { idempotency as expressIdempotency } from '../../plugins/express/index.js'
import fastifyIdempotency from '../../plugins/fastify/index.js'
import { ErrorCode } from '../../src/core/errors.js'
import type { ReplayCacheOptions } from '../../src/core/replay-cache.js'
import type { IdempotencyStore } from '../../src/core/store.js'
import { listen, type RunningApp, send } from '../helpers/adapters.js'
import { type CountingStore, countingStore } from '../helpers/counting-store.js'
import { SECRET } from '../helpers/example-app.js'
import { createRedisStore, type TestStore, testRedisClient } from '../helpers/stores.js'

const secrets = { current: 1, keys: { 1: SECRET } }

type Build = (
  store: IdempotencyStore,
  replayCache: boolean | ReplayCacheOptions,
  ran: () => number,
) => Promise<RunningApp>

const fastifyApp: Build = async (store, replayCache, ran) => {
  const app = Fastify()
  await app.register(fastifyIdempotency, {
    store,
    secrets,
    principal: (request) => request.headers.authorization,
    replayCache,
  })
  app.post('/orders', { config: { idempotency: true } }, async (request, reply) =>
    reply.code(201).header('location', '/orders/1').send({ run: ran(), body: request.body }),
  )
  await app.listen({ port: 0, host: '127.0.0.1' })
  const address = app.server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0
  return { url: `http://127.0.0.1:${port}`, port, logs: [], close: () => app.close() }
}

const expressApp: Build = async (store, replayCache, ran) => {
  const app = express()
  const idem = expressIdempotency({ store, secrets, principal: (req) => req.headers.authorization, replayCache })
  app.use(express.json(), idem.captureBody)
  app.post('/orders', idem(), (req, res) => {
    res.status(201).set('location', '/orders/1').json({ run: ran(), body: req.body })
  })
  app.use(idem.errors)
  return listen(createServer(app))
}

/** Redis's count of the commands it ran (INFO commandstats), the INFO calls themselves left out. */
async function redisCommands(redis: Redis): Promise<number> {
  const info = await redis.info('commandstats')
  let total = 0
  for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    if (match[1] !== 'info') total += Number(match[2])
  }
  return total
}

describe.each([
  ['fastify', fastifyApp],
  ['express', expressApp],
] as const)('the replay cache on %s', (_name, build) => {
  let backing: TestStore
  let counted: CountingStore
  let redis: Redis
  let app: RunningApp | undefined
  let runs: number
  const ran = () => ++runs

  beforeEach(async () => {
    backing = await createRedisStore()
    counted = countingStore(backing.store)
    redis = testRedisClient()
    runs = 0
    app = undefined
  })

  afterEach(async () => {
    await app?.close()
    redis.disconnect()
    await backing.teardown()
  })

  const post = (key: string, body: object = { item: 'book' }, principal = 'alice') =>
    send(app as RunningApp, 'POST', '/orders', {
      headers: { authorization: principal, 'idempotency-key': key, 'content-type': 'application/json' },
      body,
    })

  it('answers a kept replay byte for byte without a store call', async () => {
    app = await build(counted.store, { maxAgeMs: 60_000 }, ran)
    const first = await post('k1')
    expect(first.status).toBe(201)
    const fromStore = await post('k1')
    expect(fromStore.status).toBe(201)
    expect(fromStore.headers.get('idempotent-replayed')).toBe('true')

    counted.reset()
    const before = await redisCommands(redis)
    for (let i = 0; i < 5; i++) {
      const replay = await post('k1')
      expect(replay.status).toBe(201)
      expect(replay.headers.get('idempotent-replayed')).toBe('true')
      expect(replay.headers.get('location')).toBe('/orders/1')
      expect(replay.text).toBe(fromStore.text)
    }
    expect(counted.counts).toEqual({})
    expect(await redisCommands(redis)).toBe(before)
    expect(runs).toBe(1)
  })

  it("sends another body to the store (422), and never answers another principal with alice's answer", async () => {
    app = await build(counted.store, true, ran)
    await post('k1')
    await post('k1')

    counted.reset()
    const other = await post('k1', { item: 'lamp' })
    expect(other.status).toBe(422)
    expect(counted.counts.claim).toBe(1)

    const bob = await post('k1', { item: 'book' }, 'bob')
    expect(bob.status).toBe(201)
    expect(bob.headers.get('idempotent-replayed')).toBeNull()
    expect(bob.json()).toEqual({ run: 2, body: { item: 'book' } })
    expect(runs).toBe(2)
  })

  it('refuses a bad replayCache when the plugin is made, naming the option', async () => {
    await expect(build(counted.store, { maxEntries: -1 }, ran)).rejects.toMatchObject({
      code: ErrorCode.INVALID_OPTION,
      message: expect.stringContaining('"replayCache.maxEntries"'),
    })
    await expect(build(counted.store, 'on' as never, ran)).rejects.toMatchObject({
      code: ErrorCode.INVALID_OPTION,
      message: expect.stringContaining('"replayCache"'),
    })
  })
})
