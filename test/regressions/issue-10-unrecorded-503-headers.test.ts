/**
 * Issue 10, item 5: when the handler ran but its answer could not be recorded, the client gets
 * 503 store-unavailable instead of the answer; that 503 kept the handler's headers (`Location`,
 * and on Express `ETag` and the rest) of a resource the client is told nothing about. The
 * replacement carries only the problem's own headers, plus those set before the handler ran
 * (as on the layer's other answers).
 */
import { createServer } from 'node:http'
import express from 'express'
import Fastify from 'fastify'
import { afterEach, describe, expect, it } from 'vitest'
import { idempotency as expressIdempotency } from '../../plugins/express/index.js'
import fastifyIdempotency from '../../plugins/fastify/index.js'
import type { IdempotencyStore } from '../../src/core/store.js'
import { authHeaders, listen, type RunningApp, send } from '../helpers/adapters.js'
import { SECRET } from '../helpers/example-app.js'
import { faultyStore } from '../helpers/faulty-store.js'
import { STORES, type TestStore } from '../helpers/stores.js'

const options = (store: IdempotencyStore) => ({
  store,
  secrets: { current: 1, keys: { 1: SECRET } },
  principal: (request: { headers: { authorization?: string } }) => request.headers.authorization,
  recordRetryMs: 0,
})

const HANDLER_HEADERS = { location: '/orders/1', etag: '"v1"', 'x-order': '1', 'cache-control': 'max-age=60' }

async function fastifyApp(store: IdempotencyStore): Promise<RunningApp> {
  const app = Fastify()
  app.addHook('onRequest', async (_request, reply) => {
    reply.header('x-request-id', 'r-1')
  })
  await app.register(fastifyIdempotency, options(store))
  app.post('/orders', { config: { idempotency: true } }, async (_request, reply) =>
    reply.code(201).headers(HANDLER_HEADERS).send({ id: 1 }),
  )
  await app.listen({ port: 0, host: '127.0.0.1' })
  const address = app.server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0
  return { url: `http://127.0.0.1:${port}`, port, logs: [], close: async () => void (await app.close()) }
}

async function expressApp(store: IdempotencyStore): Promise<RunningApp> {
  const app = express()
  app.use((_req, res, next) => {
    res.set('x-request-id', 'r-1')
    next()
  })
  app.use(express.json())
  const idem = expressIdempotency(options(store))
  app.post('/orders', idem(), (_req, res) => {
    res.status(201).set(HANDLER_HEADERS).json({ id: 1 })
  })
  app.use(idem.errors)
  const server = createServer(app)
  return listen(server)
}

const CASES = [
  ['fastify', fastifyApp],
  ['express', expressApp],
] as const

describe.each(STORES)('the 503 for an answer that could not be recorded, on the %s store', (_name, create) => {
  let backing: TestStore | undefined
  let app: RunningApp | undefined

  afterEach(async () => {
    await app?.close()
    await backing?.teardown()
  })

  it.each(CASES)('carries none of the handler headers on %s', async (adapter, build) => {
    backing = await create()
    const store = faultyStore(backing.store)
    store.block('complete', 'not-sent')
    app = await build(store)

    const response = await send(app, 'POST', '/orders', {
      headers: authHeaders('alice', `k-503-${adapter}`),
      body: { item: 'a' },
    })

    expect(response.status).toBe(503)
    expect(response.json()).toMatchObject({ code: 'IDEMPOTENCY_STORE_UNAVAILABLE' })
    expect(response.headers.get('content-type')).toBe('application/problem+json; charset=utf-8')
    expect(response.headers.get('cache-control')).toBe('no-store')
    expect(Number(response.headers.get('retry-after'))).toBeGreaterThanOrEqual(1)
    for (const name of ['location', 'etag', 'x-order']) expect(response.headers.get(name), name).toBeNull()
    expect(response.headers.get('x-request-id')).toBe('r-1')
    expect(Number(response.headers.get('content-length'))).toBe(response.body.byteLength)
  })
})
