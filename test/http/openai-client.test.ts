/**
 * The layer's refusals as a generated SDK reads them: the real `openai` client (Stainless-built,
 * as anthropic's is), with its default retries, against a local Fastify app. Left to its own
 * rules it retries every 409 and 5xx; `x-should-retry` decides first (docs/errors.md): a 409
 * in flight is retried after its `Retry-After` and then gets the replay, a 503
 * recovery-required and a 422 are sent once.
 */
import { randomUUID } from 'node:crypto'
import Fastify, { type FastifyInstance } from 'fastify'
import OpenAI, { APIError } from 'openai'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import idempotency, { memoryStore } from '../../plugins/fastify/index.js'
import { SECRET } from '../helpers/example-app.js'

interface Received {
  readonly key: string | undefined
  readonly at: number
  status?: number
}

describe('the openai SDK as a client of the layer', () => {
  let app: FastifyInstance
  let client: OpenAI
  let received: Received[]
  let release: () => void
  let started: Promise<void>
  let runs: number

  beforeEach(async () => {
    received = []
    runs = 0
    let markStarted = () => {}
    started = new Promise((resolve) => {
      markStarted = resolve
    })
    const gate = new Promise<void>((resolve) => {
      release = resolve
    })
    app = Fastify()
    app.addHook('onRequest', (request, _reply, done) => {
      const entry: Received = { key: request.headers['idempotency-key'] as string | undefined, at: Date.now() }
      received.push(entry)
      ;(request as { entry?: Received }).entry = entry
      done()
    })
    app.addHook('onResponse', (request, reply, done) => {
      const entry = (request as { entry?: Received }).entry
      if (entry !== undefined) entry.status = reply.statusCode
      // The first request waits until a duplicate has been refused as in flight.
      if (reply.statusCode === 409) release()
      done()
    })
    await app.register(idempotency, {
      store: memoryStore(),
      secrets: { current: 1, keys: { 1: SECRET } },
      principal: (request) => request.headers.authorization,
      inProgressRetryAfterMs: 1000,
    })
    app.post('/orders', { config: { idempotency: true } }, async (request, reply) => {
      runs++
      const body = request.body as { slow?: boolean; fail?: boolean }
      if (body.slow === true) {
        markStarted()
        await gate
      }
      if (body.fail === true) throw new Error('the effect of this failure is unknown')
      return reply.code(201).send({ order: runs, ...body })
    })
    await app.listen({ port: 0, host: '127.0.0.1' })
    const address = app.server.address()
    const port = typeof address === 'object' && address !== null ? address.port : 0
    client = new OpenAI({ baseURL: `http://127.0.0.1:${port}`, apiKey: 'x' })
  })

  afterEach(async () => {
    release()
    await app.close()
  })

  const direct = (key: string, body: object) =>
    fetch(`${client.baseURL}/orders`, {
      method: 'POST',
      headers: { authorization: 'Bearer x', 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify(body),
    })

  const fromSdk = (key: string) => received.filter((entry) => entry.key === key).slice(1)

  it('retries a 409 in flight after its Retry-After, and gets the first answer', async () => {
    const key = randomUUID()
    const first = direct(key, { item: 'book', slow: true })
    await started

    const answer = await client.post('/orders', {
      body: { item: 'book', slow: true },
      headers: { 'Idempotency-Key': key },
    })

    const sent = fromSdk(key)
    expect(sent.map((entry) => entry.status)).toEqual([409, 201])
    // Retry-After: 1 (inProgressRetryAfterMs), not the SDK's own half-second backoff.
    expect((sent[1] as Received).at - (sent[0] as Received).at).toBeGreaterThanOrEqual(950)
    expect(answer).toEqual(await (await first).json())
    expect(runs).toBe(1)
  })

  it('does not retry a 503 recovery-required: the SDK gets it at once', async () => {
    const key = randomUUID()
    expect((await direct(key, { item: 'book', fail: true })).status).toBe(500)

    const refused = await client
      .post('/orders', { body: { item: 'book', fail: true }, headers: { 'Idempotency-Key': key } })
      .catch((error: unknown) => error)

    expect(refused).toBeInstanceOf(APIError)
    expect((refused as APIError).status).toBe(503)
    expect((refused as APIError).headers?.get('idempotency-status')).toBe('recovery-required')
    expect((refused as APIError).headers?.get('x-should-retry')).toBe('false')
    expect(fromSdk(key).map((entry) => entry.status)).toEqual([503])
    expect(runs).toBe(1)
  })

  it('does not retry a 422 key-reused', async () => {
    const key = randomUUID()
    expect((await direct(key, { item: 'book' })).status).toBe(201)

    const refused = await client
      .post('/orders', { body: { item: 'pen' }, headers: { 'Idempotency-Key': key } })
      .catch((error: unknown) => error)

    expect((refused as APIError).status).toBe(422)
    expect(fromSdk(key).map((entry) => entry.status)).toEqual([422])
    expect(runs).toBe(1)
  })
})
