/**
 * `idempotentFetch` (idemkit/client) against real idemkit servers (Fastify, the memory store,
 * and the Redis store behind a TCP proxy that can cut it): which answers it retries and which it
 * returns, after how long (`Retry-After` in seconds and as an HTTP-date), with which key, within
 * which deadline, and how it replays a body. The servers count what they receive.
 */
import { randomUUID } from 'node:crypto'
import Fastify, { type FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import { afterAll, beforeAll, beforeEach, describe, expect, inject, it } from 'vitest'
import fastifyIdempotency from '../../plugins/fastify/index.js'
import { idempotentFetch, type RetryEvent } from '../../src/client/index.js'
import type { IdempotencyStore } from '../../src/core/store.js'
import { memoryStore } from '../../src/stores/memory/index.js'
import { redisStore } from '../../src/stores/redis/index.js'
import { SECRET } from '../helpers/example-app.js'
import { sleep } from '../helpers/sleep.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'

const secrets = { current: 1, keys: { 1: SECRET } }
const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

/** One request as a server received it. */
interface Received {
  readonly path: string
  readonly key: string | undefined
  readonly at: number
  readonly body: string
}

let received: Received[] = []
/** What the scripted routes answer next, per test tag: a list consumed one answer per request. */
const scripts = new Map<string, string[]>()
let handlerRuns = 0

function receivedOn(path: string): Received[] {
  return received.filter((entry) => entry.path === path)
}

async function build(store: IdempotencyStore, options: { unavailableRetryAfterMs?: number } = {}) {
  const app = Fastify()
  app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_request, body, done) =>
    done(null, body),
  )
  app.addHook('onRequest', async (request) => {
    const header = request.headers['idempotency-key']
    received.push({
      path: request.url.split('?')[0] as string,
      key: typeof header === 'string' ? header : undefined,
      at: performance.now(),
      body: '',
    })
  })
  app.addHook('preHandler', async (request) => {
    const last = received[received.length - 1]
    if (last !== undefined && request.body !== undefined) {
      ;(last as { body: string }).body = Buffer.isBuffer(request.body)
        ? request.body.toString()
        : JSON.stringify(request.body)
    }
  })
  await app.register(fastifyIdempotency, {
    store,
    secrets,
    principal: (request) => request.headers.authorization,
    unavailableRetryAfterMs: options.unavailableRetryAfterMs ?? 1000,
  })
  // Protected: an order, optionally slow; a failure with an unknown effect.
  app.post('/orders', { config: { idempotency: { inProgressRetryAfterMs: 1000 } } }, async (request, reply) => {
    handlerRuns++
    const body = request.body as { delayMs?: number }
    if (body.delayMs !== undefined) await sleep(body.delayMs)
    return reply.code(201).send({ order: randomUUID(), ...body })
  })
  app.post('/fail', { config: { idempotency: true } }, async () => {
    handlerRuns++
    throw new Error('the handler failed')
  })
  // Unprotected, scripted per `?tag=`: each request takes the next answer of its tag's script.
  app.all('/scripted', async (request, reply) => {
    const tag = String((request.query as { tag?: string }).tag)
    const next = scripts.get(tag)?.shift() ?? '201'
    const [status, ...extras] = next.split(' ')
    if (status === 'reset') {
      request.raw.socket.destroy()
      return reply
    }
    if (status === 'hang') {
      await sleep(5_000)
      return reply
    }
    for (const extra of extras) {
      const [name, value] = extra.split('=') as [string, string]
      reply.header(name, name === 'retry-after' && value.startsWith('date+') ? httpDate(Number(value.slice(5))) : value)
    }
    return reply.code(Number(status)).send({ status: Number(status) })
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const address = app.server.address()
  return { app, url: `http://127.0.0.1:${typeof address === 'object' && address !== null ? address.port : 0}` }
}

/** An HTTP-date `seconds` from now, rounded up to the next whole second so the wait is at least `seconds - 1`. */
function httpDate(seconds: number): string {
  return new Date(Math.ceil(Date.now() / 1000) * 1000 + seconds * 1000).toUTCString()
}

describe('idempotentFetch against an idemkit server', () => {
  let memory: { app: FastifyInstance; url: string }
  let stored: { app: FastifyInstance; url: string }
  let proxy: TcpProxy
  let redis: Redis
  const events: RetryEvent[] = []
  const client = idempotentFetch.with({ initialDelayMs: 50, maxDelayMs: 400, onRetry: (event) => events.push(event) })
  const headers = { authorization: 'alice', 'content-type': 'application/json' }

  beforeAll(async () => {
    memory = await build(memoryStore())
    proxy = await startTcpProxy(Number(new URL(inject('redisUrl')).port))
    redis = new Redis(proxy.url, {
      commandTimeout: 1000,
      maxRetriesPerRequest: 0,
      retryStrategy: () => 50,
    })
    // The cuts are this test's own: the store reports them as unavailable.
    redis.on('error', () => {})
    stored = await build(redisStore({ redis, keyPrefix: 'client' }))
  })

  afterAll(async () => {
    await memory.app.close()
    await stored.app.close()
    redis.disconnect()
    await proxy.close()
  })

  beforeEach(() => {
    received = []
    events.length = 0
    handlerRuns = 0
  })

  it('sends a new UUID v4 with each unsafe call, the same on each retry of it, and none with GET', async () => {
    const tag = randomUUID()
    scripts.set(tag, ['reset', '503 retry-after=0', '201'])
    const first = await client(`${memory.url}/scripted?tag=${tag}`, { method: 'POST', headers, body: '{}' })
    const second = await client(`${memory.url}/scripted?tag=${tag}`, { method: 'POST', headers, body: '{}' })
    const get = await client(`${memory.url}/scripted?tag=${tag}`)

    expect([first.status, second.status, get.status]).toEqual([201, 201, 201])
    const keys = receivedOn('/scripted').map((entry) => entry.key)
    expect(keys).toHaveLength(5)
    expect(keys[0]).toMatch(UUID_V4)
    expect(keys.slice(0, 3)).toEqual([keys[0], keys[0], keys[0]])
    expect(keys[3]).toMatch(UUID_V4)
    expect(keys[3]).not.toBe(keys[0])
    expect(keys[4]).toBeUndefined()
    expect(events.map((event) => [event.attempt, event.status, event.key])).toEqual([
      [1, undefined, keys[0]],
      [2, 503, keys[0]],
    ])
  })

  it('sends the key it is given, as idempotencyKey or as the header', async () => {
    const key = `given-${randomUUID()}`
    await client(`${memory.url}/orders`, { method: 'POST', headers, body: '{"a":1}', idempotencyKey: key })
    await client(`${memory.url}/orders`, {
      method: 'POST',
      headers: { ...headers, 'Idempotency-Key': `${key}-h` },
      body: '{"a":1}',
    })

    expect(receivedOn('/orders').map((entry) => entry.key)).toEqual([key, `${key}-h`])
  })

  it('retries a 409 in flight after its Retry-After and gets the first request\u2019s answer', async () => {
    const key = randomUUID()
    const body = JSON.stringify({ delayMs: 1500 })
    const first = client(`${memory.url}/orders`, { method: 'POST', headers, body, idempotencyKey: key })
    // The first send holds the key (its handler runs) before the duplicate is sent.
    while (handlerRuns === 0) await sleep(10)
    const duplicate = await client(`${memory.url}/orders`, { method: 'POST', headers, body, idempotencyKey: key })
    const original = await first

    expect(original.status).toBe(201)
    expect(duplicate.status).toBe(201)
    expect(duplicate.headers.get('idempotent-replayed')).toBe('true')
    expect(await duplicate.json()).toEqual(await original.json())
    expect(handlerRuns).toBe(1)
    const sends = receivedOn('/orders')
    expect(sends.length).toBeGreaterThanOrEqual(3)
    // Retry-After: 1 (inProgressRetryAfterMs 1000): the duplicate's next send came a second later.
    expect((sends[2] as Received).at - (sends[1] as Received).at).toBeGreaterThanOrEqual(990)
    expect(events.find((event) => event.status === 409)?.delayMs).toBe(1000)
  })

  it.each([
    ['400 (a malformed key)', 400, { 'Idempotency-Key': 'a b' }, '{}'],
    ['401 (no principal)', 401, { authorization: '' }, '{}'],
  ])('returns %s at once', async (_name, status, extra, body) => {
    const response = await client(`${memory.url}/orders`, { method: 'POST', headers: { ...headers, ...extra }, body })

    expect(response.status).toBe(status)
    expect(receivedOn('/orders')).toHaveLength(1)
    expect(handlerRuns).toBe(0)
  })

  it('returns a 422 (the key with another body) at once', async () => {
    const key = randomUUID()
    await client(`${memory.url}/orders`, { method: 'POST', headers, body: '{"a":1}', idempotencyKey: key })
    const reused = await client(`${memory.url}/orders`, {
      method: 'POST',
      headers,
      body: '{"a":2}',
      idempotencyKey: key,
    })

    expect(reused.status).toBe(422)
    expect(receivedOn('/orders')).toHaveLength(2)
  })

  it('retries a 500 and stops at 503 recovery-required, which no retry can settle', async () => {
    const response = await client(`${memory.url}/fail`, { method: 'POST', headers, body: '{}' })

    expect(response.status).toBe(503)
    expect(await response.json()).toMatchObject({ code: 'IDEMPOTENCY_RECOVERY_REQUIRED' })
    expect(receivedOn('/fail')).toHaveLength(2)
    expect(handlerRuns).toBe(1)
  })

  it('retries 503 store-unavailable after its Retry-After until the store is back, with the same key', async () => {
    proxy.setMode('cut')
    // The store comes back once the first request was answered 503.
    const restore = (async () => {
      while (receivedOn('/orders').length === 0) await sleep(5)
      await sleep(100)
      proxy.setMode('pass')
    })()
    const response = await client(`${stored.url}/orders`, { method: 'POST', headers, body: '{"item":"book"}' })
    await restore

    expect(response.status).toBe(201)
    expect(handlerRuns).toBe(1)
    const sends = receivedOn('/orders')
    expect(sends.length).toBeGreaterThanOrEqual(2)
    expect(new Set(sends.map((entry) => entry.key)).size).toBe(1)
    expect((sends[1] as Received).at - (sends[0] as Received).at).toBeGreaterThanOrEqual(990)
    expect(events[0]).toMatchObject({ status: 503, delayMs: 1000 })
  })

  it('waits out a 429\u2019s Retry-After given in seconds and as an HTTP-date', async () => {
    const seconds = randomUUID()
    const date = randomUUID()
    scripts.set(seconds, ['429 retry-after=1', '201'])
    scripts.set(date, ['429 retry-after=date+1', '201'])

    const bySeconds = await client(`${memory.url}/scripted?tag=${seconds}`, { method: 'POST', headers, body: '{}' })
    const byDate = await client(`${memory.url}/scripted?tag=${date}`, { method: 'POST', headers, body: '{}' })

    expect([bySeconds.status, byDate.status]).toEqual([201, 201])
    const [a, b, c, d] = receivedOn('/scripted') as [Received, Received, Received, Received]
    expect(b.at - a.at).toBeGreaterThanOrEqual(990)
    // The date names the start of a whole second at least one second ahead.
    expect(d.at - c.at).toBeGreaterThanOrEqual(990)
    expect(events.map((event) => event.status)).toEqual([429, 429])
  })

  it('lets x-should-retry win over the status rules, both ways', async () => {
    const no = randomUUID()
    const yes = randomUUID()
    scripts.set(no, ['503 x-should-retry=false retry-after=0', '201'])
    scripts.set(yes, ['400 x-should-retry=true', '201'])

    const refused = await client(`${memory.url}/scripted?tag=${no}`, { method: 'POST', headers, body: '{}' })
    const retried = await client(`${memory.url}/scripted?tag=${yes}`, { method: 'POST', headers, body: '{}' })

    expect(refused.status).toBe(503)
    expect(retried.status).toBe(201)
    expect(receivedOn('/scripted')).toHaveLength(3)
  })

  it.each([403, 404, 405, 413, 501])('returns a %i at once', async (status) => {
    const tag = randomUUID()
    scripts.set(tag, [String(status), '201'])
    const response = await client(`${memory.url}/scripted?tag=${tag}`, { method: 'POST', headers, body: '{}' })

    expect(response.status).toBe(status)
    expect(receivedOn('/scripted')).toHaveLength(1)
  })

  it('retries an attempt that timed out with the same key: the first send\u2019s run answers', async () => {
    const key = randomUUID()
    const response = await client.with({ attemptTimeoutMs: 400 })(`${memory.url}/orders`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ delayMs: 1200 }),
      idempotencyKey: key,
    })

    expect(response.status).toBe(201)
    expect(handlerRuns).toBe(1)
    expect(new Set(receivedOn('/orders').map((entry) => entry.key))).toEqual(new Set([key]))
    expect(events[0]).toMatchObject({ attempt: 1, error: expect.objectContaining({ name: 'TimeoutError' }) })
  })

  it('bounds the whole call by its deadline: the last answer, or a TimeoutError with no answer', async () => {
    const busy = randomUUID()
    scripts.set(busy, Array(10).fill('503 retry-after=1'))
    const hang = randomUUID()
    scripts.set(hang, ['hang'])
    const short = client.with({ deadlineMs: 1200 })

    let started = performance.now()
    const answered = await short(`${memory.url}/scripted?tag=${busy}`, { method: 'POST', headers, body: '{}' })
    const answeredMs = performance.now() - started
    started = performance.now()
    const hung = await short(`${memory.url}/scripted?tag=${hang}`, { method: 'POST', headers, body: '{}' }).catch(
      (error: unknown) => error,
    )
    const hungMs = performance.now() - started

    // Sent at 0 and after 1 s; a third send would start past the deadline, so the 503 is the answer.
    expect(answered.status).toBe(503)
    expect(answeredMs).toBeGreaterThanOrEqual(990)
    expect(answeredMs).toBeLessThan(1200)
    expect(receivedOn('/scripted')).toHaveLength(3)
    expect(hung).toMatchObject({ name: 'TimeoutError', message: expect.stringMatching(/deadlineMs 1200/) })
    expect(hungMs).toBeGreaterThanOrEqual(1150)
    expect(hungMs).toBeLessThan(1200 + 1000)
  })

  it('stops after maxAttempts', async () => {
    const tag = randomUUID()
    scripts.set(tag, Array(10).fill('429 retry-after=0'))
    const response = await client.with({ maxAttempts: 3 })(`${memory.url}/scripted?tag=${tag}`, {
      method: 'POST',
      headers,
      body: '{}',
    })

    expect(response.status).toBe(429)
    expect(receivedOn('/scripted')).toHaveLength(3)
  })

  it('rejects with the signal\u2019s reason when aborted during a pause, and sends nothing more', async () => {
    const tag = randomUUID()
    scripts.set(tag, ['503 retry-after=5', '201'])
    const controller = new AbortController()
    const started = performance.now()
    const call = client(`${memory.url}/scripted?tag=${tag}`, {
      method: 'POST',
      headers,
      body: '{}',
      signal: controller.signal,
    })
    while (receivedOn('/scripted').length === 0) await sleep(5)
    await sleep(100)
    controller.abort(new Error('the caller gave up'))

    await expect(call).rejects.toThrow('the caller gave up')
    expect(performance.now() - started).toBeLessThan(3000)
    expect(receivedOn('/scripted')).toHaveLength(1)
  })

  it('sends a streamed body again on every retry, buffered once, and refuses one over maxBufferedBodyBytes', async () => {
    const tag = randomUUID()
    scripts.set(tag, ['reset', '201'])
    const stream = () =>
      new ReadableStream<Uint8Array>({
        start(controller) {
          controller.enqueue(new TextEncoder().encode('chunk-one,'))
          controller.enqueue(new TextEncoder().encode('chunk-two'))
          controller.close()
        },
      })
    const octets = { ...headers, 'content-type': 'application/octet-stream' }
    const response = await client(`${memory.url}/scripted?tag=${tag}`, {
      method: 'POST',
      headers: octets,
      body: stream(),
      duplex: 'half',
    } as RequestInit)
    const fromRequest = await client(
      new Request(`${memory.url}/scripted?tag=${tag}`, { method: 'PUT', headers: octets, body: 'as a Request' }),
    )
    const refused = await client
      .with({ maxBufferedBodyBytes: 8 })(`${memory.url}/scripted?tag=${tag}`, {
        method: 'POST',
        headers: octets,
        body: stream(),
        duplex: 'half',
      } as RequestInit)
      .catch((error: unknown) => error)

    expect(response.status).toBe(201)
    expect(fromRequest.status).toBe(201)
    const sends = receivedOn('/scripted')
    expect(sends.map((entry) => entry.body)).toEqual(['chunk-one,chunk-two', 'chunk-one,chunk-two', 'as a Request'])
    expect(sends[2]?.key).toMatch(UUID_V4)
    expect(refused).toMatchObject({
      code: 'ERR_IDEM_INVALID_ARGUMENT',
      message: expect.stringMatching(/maxBufferedBodyBytes \(8 bytes\)/),
    })
  })

  it('sends an async iterable body of strings and bytes again on a retry, and refuses chunks that are neither', async () => {
    const tag = randomUUID()
    scripts.set(tag, ['reset', '201'])
    async function* parts() {
      yield 'text,'
      yield new Uint16Array([0x6962, 0x6574]) // "bite" in little-endian bytes
      yield new TextEncoder().encode(',end').buffer
    }
    const octets = { ...headers, 'content-type': 'application/octet-stream' }
    const response = await client(`${memory.url}/scripted?tag=${tag}`, {
      method: 'POST',
      headers: octets,
      body: parts() as never,
      duplex: 'half',
    } as RequestInit)
    async function* bad() {
      yield 42
    }
    const refused = await client(`${memory.url}/scripted?tag=${tag}`, {
      method: 'POST',
      headers: octets,
      body: bad() as never,
    }).catch((error: unknown) => error)

    expect(response.status).toBe(201)
    expect(receivedOn('/scripted').map((entry) => entry.body)).toEqual(['text,bite,end', 'text,bite,end'])
    expect(refused).toMatchObject({
      code: 'ERR_IDEM_INVALID_ARGUMENT',
      message: expect.stringMatching(/bytes or strings/),
    })
  })

  it('rejects with the last network error once maxAttempts is spent, and an observer that throws changes nothing', async () => {
    const tag = randomUUID()
    scripts.set(tag, ['reset', 'reset', '201'])
    const failing = idempotentFetch.with({
      maxAttempts: 2,
      initialDelayMs: 10,
      onRetry: () => {
        throw new Error('an observer that throws')
      },
    })
    const error = await failing(`${memory.url}/scripted?tag=${tag}`, { method: 'POST', headers, body: '{}' }).catch(
      (caught: unknown) => caught,
    )

    expect(error).toBeInstanceOf(TypeError)
    expect(receivedOn('/scripted')).toHaveLength(2)
  })

  it('refuses an idempotencyKey that no server would accept, before sending', async () => {
    for (const idempotencyKey of ['', 'a b', 'k'.repeat(256), 7 as unknown as string]) {
      await expect(
        client(`${memory.url}/orders`, { method: 'POST', headers, body: '{}', idempotencyKey }),
      ).rejects.toMatchObject({ code: 'ERR_IDEM_INVALID_ARGUMENT' })
    }
    expect(receivedOn('/orders')).toHaveLength(0)
  })

  it('sends each attempt through the fetch it is given, with the key in the header it names', async () => {
    const seen: string[] = []
    const own = idempotentFetch.with({
      keyHeader: 'X-Request-Key',
      fetch: (input, init) => {
        seen.push(new Headers(init?.headers).get('x-request-key') ?? 'none')
        return fetch(input, init)
      },
    })
    const response = await own(`${memory.url}/scripted?tag=${randomUUID()}`, {
      method: 'DELETE',
      headers: { authorization: 'alice' },
    })

    expect(response.status).toBe(201)
    expect(seen).toHaveLength(1)
    expect(seen[0]).toMatch(UUID_V4)
  })

  it('refuses unknown and out-of-range options naming them', () => {
    expect(() => idempotentFetch.with({ deadlinMs: 5 } as never)).toThrow(
      expect.objectContaining({ code: 'ERR_IDEM_INVALID_OPTION', message: expect.stringMatching(/"deadlinMs"/) }),
    )
    expect(() => idempotentFetch.with({ maxAttempts: 0 })).toThrow(/"maxAttempts" must be a positive integer/)
    expect(() => idempotentFetch.with({ keyHeader: 'a b' })).toThrow(/"keyHeader"/)
    expect(() => idempotentFetch.with({ fetch: 'fetch' as never })).toThrow(/"fetch"/)
    expect(() => idempotentFetch.with({ onRetry: 1 as never })).toThrow(/"onRetry"/)
    expect(() => idempotentFetch.with(null as never)).toThrow(/"options"/)
    expect(() => idempotentFetch.with({ attemptTimeoutMs: 0 })).toThrow(/"attemptTimeoutMs"/)
  })
})
