import { Readable } from 'node:stream'
import Fastify, { type FastifyInstance } from 'fastify'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import idempotency, { type FastifyIdempotencyOptions } from '../../plugins/fastify/index.js'
import type { IdempotencyStore } from '../../src/core/store.js'
import { SECRET } from '../helpers/example-app.js'
import { faultyStore } from '../helpers/faulty-store.js'
import { sleep } from '../helpers/sleep.js'
import { STORES, type TestStore } from '../helpers/stores.js'

const secrets = { current: 1, keys: { 1: SECRET } }

async function appOn(store: IdempotencyStore, extra: Partial<FastifyIdempotencyOptions> = {}) {
  const app = Fastify()
  const runs = { count: 0 }
  await app.register(idempotency, { store, secrets, anonymous: true, ...extra })
  return { app, runs }
}

describe.each(STORES)('Fastify responses on the %s store', (_name, create) => {
  let backing: TestStore
  let app: FastifyInstance | undefined

  beforeEach(async () => {
    backing = await create()
  })

  afterEach(async () => {
    await app?.close()
    app = undefined
    await backing.teardown()
  })

  const send = (key = 'k', payload: object = {}) =>
    (app as FastifyInstance).inject({ method: 'POST', url: '/r', headers: { 'idempotency-key': key }, payload })

  it('sends a response over maxResponseBytes once, stores nothing and answers retries with 503', async () => {
    const built = await appOn(backing.store, { maxResponseBytes: 1024 })
    app = built.app
    app.post('/r', { config: { idempotency: true } }, async () => {
      built.runs.count++
      return { blob: 'x'.repeat(2048) }
    })

    const first = await send()
    const retry = await send()

    expect(first.statusCode).toBe(200)
    expect(first.json().blob).toHaveLength(2048)
    expect(retry.statusCode).toBe(503)
    expect(retry.json()).toMatchObject({ code: 'IDEMPOTENCY_RECOVERY_REQUIRED' })
    expect(built.runs.count).toBe(1)
  })

  it('stores a stream payload and replays the same bytes', async () => {
    const built = await appOn(backing.store)
    app = built.app
    app.post('/r', { config: { idempotency: true } }, async (_request, reply) => {
      built.runs.count++
      reply.type('text/plain; charset=utf-8')
      return reply.send(Readable.from(['chunk-1 ', 'chunk-2 ', `run-${built.runs.count}`]))
    })

    const first = await send()
    const second = await send()

    expect(first.body).toBe('chunk-1 chunk-2 run-1')
    expect(second.body).toBe(first.body)
    expect(second.headers['content-type']).toBe('text/plain; charset=utf-8')
    expect(second.headers['idempotent-replayed']).toBe('true')
    expect(built.runs.count).toBe(1)
  })

  it('stores a web ReadableStream payload and replays the same bytes', async () => {
    const built = await appOn(backing.store)
    app = built.app
    app.post('/r', { config: { idempotency: true } }, async (_request, reply) => {
      built.runs.count++
      const parts = ['web-1 ', `web-run-${built.runs.count}`]
      const stream = new ReadableStream<Uint8Array>({
        pull(controller) {
          const part = parts.shift()
          if (part === undefined) controller.close()
          else controller.enqueue(new TextEncoder().encode(part))
        },
      })
      reply.type('text/plain; charset=utf-8')
      return reply.send(stream)
    })

    const first = await send()
    const second = await send()

    expect(first.body).toBe('web-1 web-run-1')
    expect(second.body).toBe(first.body)
    expect(second.headers['idempotent-replayed']).toBe('true')
    expect(built.runs.count).toBe(1)
  })

  it('ends the execution as unknown when a stream payload fails while it is read', async () => {
    const built = await appOn(backing.store)
    app = built.app
    app.post('/r', { config: { idempotency: true } }, async (_request, reply) => {
      built.runs.count++
      const failing = new Readable({
        read() {
          this.push('partial ')
          this.destroy(new Error('the stream broke'))
        },
      })
      return reply.send(failing)
    })

    const first = await send()
    const retry = await send()

    expect(first.statusCode).toBe(500)
    // Not 409 for as long as the lease is renewed: the execution ended, as unknown.
    expect(retry.statusCode).toBe(503)
    expect(retry.json()).toMatchObject({ code: 'IDEMPOTENCY_RECOVERY_REQUIRED' })
    expect(built.runs.count).toBe(1)
  })

  it('ends the execution as unknown when the handler hijacks the reply', async () => {
    const built = await appOn(backing.store)
    app = built.app
    app.post('/r', { config: { idempotency: true } }, async (_request, reply) => {
      built.runs.count++
      reply.hijack()
      reply.raw.writeHead(200, { 'content-type': 'text/plain' })
      reply.raw.end('written around Fastify')
    })

    const first = await send()
    // The outcome is recorded after the response has gone (its finish event): wait until it is stored.
    let retry = await send()
    for (let i = 0; i < 50 && retry.statusCode === 409; i++) {
      await sleep(10)
      retry = await send()
    }

    expect(first.body).toBe('written around Fastify')
    expect(retry.statusCode).toBe(503)
    expect(retry.json()).toMatchObject({ code: 'IDEMPOTENCY_RECOVERY_REQUIRED' })
    expect(built.runs.count).toBe(1)
  })

  it('replays a binary body byte for byte', async () => {
    const bytes = Buffer.from([0, 255, 1, 254, 0xc3, 0x28])
    const built = await appOn(backing.store)
    app = built.app
    app.post('/r', { config: { idempotency: true } }, async (_request, reply) =>
      reply.type('application/octet-stream').send(bytes),
    )

    await send()
    const replay = await send()

    expect(replay.rawPayload.equals(bytes)).toBe(true)
  })

  it('never stores set-cookie, stores configured headers, and drops the rest', async () => {
    const built = await appOn(backing.store, { storedHeaders: ['x-order-version'] })
    app = built.app
    app.post('/r', { config: { idempotency: true } }, async (_request, reply) =>
      reply
        .header('set-cookie', 'session=abc')
        .header('x-order-version', '7')
        .header('x-trace', 't1')
        .code(201)
        .send({ ok: 1 }),
    )

    await send()
    const replay = await send()

    expect(replay.statusCode).toBe(201)
    expect(replay.headers['x-order-version']).toBe('7')
    expect(replay.headers['set-cookie']).toBeUndefined()
    expect(replay.headers['x-trace']).toBeUndefined()
  })

  it('lets a retry run again after the handler answered 429', async () => {
    const built = await appOn(backing.store)
    app = built.app
    app.post('/r', { config: { idempotency: true } }, async (_request, reply) => {
      built.runs.count++
      return built.runs.count === 1 ? reply.code(429).send({ slow: 'down' }) : reply.code(201).send({ ok: true })
    })

    const first = await send()
    const second = await send()

    expect(first.statusCode).toBe(429)
    expect(second.statusCode).toBe(201)
    expect(built.runs.count).toBe(2)
  })

  it('gives the handler the fencing token and a signal, and grows the token on takeover', async () => {
    const built = await appOn(backing.store)
    app = built.app
    const tokens: number[] = []
    app.post('/r', { config: { idempotency: { classify: () => 'retryable' } } }, async (request) => {
      tokens.push(request.idempotency?.fencingToken ?? -1)
      expect(request.idempotency?.signal.aborted).toBe(false)
      return { ok: true }
    })

    await send()
    await send()
    await send()

    expect(tokens).toEqual([1, 2, 3])
  })

  it('answers 503 with Retry-After and runs nothing when the store cannot be reached', async () => {
    const store = faultyStore(backing.store)
    store.block('claim', 'not-sent')
    const built = await appOn(store, { unavailableRetryAfterMs: 2_500 })
    app = built.app
    app.post('/r', { config: { idempotency: true } }, async () => {
      built.runs.count++
      return 'ran'
    })

    const response = await send()

    expect(response.statusCode).toBe(503)
    expect(response.headers['retry-after']).toBe('3')
    expect(response.json()).toMatchObject({ code: 'IDEMPOTENCY_STORE_UNAVAILABLE' })
    expect(built.runs.count).toBe(0)
  })

  it('replaces the answer with 503 when the completion cannot be written, and never runs twice', async () => {
    const store = faultyStore(backing.store)
    store.block('complete', 'not-sent')
    const built = await appOn(store, { recordRetryMs: 100 })
    app = built.app
    app.post('/r', { config: { idempotency: true } }, async (_request, reply) => {
      built.runs.count++
      return reply.code(201).send({ created: true })
    })

    const first = await send()
    store.block('complete', undefined)
    const retry = await send()

    expect(first.statusCode).toBe(503)
    expect(first.json()).toMatchObject({ code: 'IDEMPOTENCY_STORE_UNAVAILABLE' })
    expect(retry.statusCode).toBe(409)
    expect(built.runs.count).toBe(1)
  })
})

describe.each(STORES)('Fastify secret rotation on the %s store', (_name, create) => {
  let backing: TestStore

  beforeEach(async () => {
    backing = await create()
  })

  afterEach(async () => {
    await backing.teardown()
  })

  async function appWith(current: number, keys: Record<number, string>, runs: { count: number }) {
    const app = Fastify()
    await app.register(idempotency, { store: backing.store, secrets: { current, keys }, anonymous: true })
    app.post('/r', { config: { idempotency: true } }, async (request) => {
      runs.count++
      await sleep((request.body as { delayMs?: number }).delayMs ?? 0)
      return { run: runs.count }
    })
    return app
  }

  it('replays a response recorded under the previous secret, and 409s one still running', async () => {
    const runs = { count: 0 }
    const before = await appWith(1, { 1: SECRET }, runs)
    const after = await appWith(2, { 1: SECRET, 2: 't'.repeat(32) }, runs)
    const post = (app: FastifyInstance, key: string, delayMs = 0) =>
      app.inject({ method: 'POST', url: '/r', headers: { 'idempotency-key': key }, payload: { delayMs } })

    const original = await post(before, 'done')
    const replayed = await post(after, 'done')
    const slow = post(before, 'slow', 300)
    await sleep(60)
    const inFlight = await post(after, 'slow', 300)
    await slow
    const mismatch = await post(after, 'done', 5)

    expect(replayed.headers['idempotent-replayed']).toBe('true')
    expect(replayed.body).toBe(original.body)
    expect(inFlight.statusCode).toBe(409)
    expect(mismatch.statusCode).toBe(422)
    expect(runs.count).toBe(2)
    await before.close()
    await after.close()
  })
})
