/**
 * Every outcome observable, on Fastify and Express: the plugin's `onEvent`, the `idemkit:outcome` and
 * `idemkit:event` diagnostics channels, and the `idemkit:store` tracing channel around each
 * store call; never the raw key or the principal in any of them.
 */

import { randomUUID } from 'node:crypto'
import diagnostics from 'node:diagnostics_channel'
import { createServer } from 'node:http'
import express from 'express'
import Fastify from 'fastify'
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { idempotency as expressIdempotency } from '../../plugins/express/index.js'
import fastifyIdempotency from '../../plugins/fastify/index.js'
import { EVENT_CHANNEL, OUTCOME_CHANNEL, STORE_CHANNEL } from '../../src/core/channels.js'
import type { IdempotencyEvent } from '../../src/core/outcomes.js'
import { memoryStore } from '../../src/stores/memory/index.js'
import { listen, type RunningApp, send } from '../helpers/adapters.js'
import { SECRET } from '../helpers/example-app.js'
import { type FaultyStore, faultyStore } from '../helpers/faulty-store.js'
import { sleep } from '../helpers/sleep.js'

const secrets = { current: 1, keys: { 1: SECRET } }
/** Marks the principal and the key: neither may show up in any event. */
const PRINCIPAL = 'principal-NEVER-IN-EVENTS'
const MARK = 'KEY-NEVER-IN-EVENTS'

type Build = (store: FaultyStore, onEvent: (event: IdempotencyEvent) => void) => Promise<RunningApp>

const fastifyApp: Build = async (store, onEvent) => {
  const app = Fastify()
  await app.register(fastifyIdempotency, { store, secrets, principal: () => PRINCIPAL, onEvent, leaseMs: 300 })
  app.post('/orders', { config: { idempotency: true } }, async (request, reply) => {
    await sleep(Number(request.headers['x-hold-ms'] ?? 0))
    return reply.code(201).send({ ok: true })
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const address = app.server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0
  return { url: `http://127.0.0.1:${port}`, port, logs: [], close: () => app.close() }
}

const expressApp: Build = async (store, onEvent) => {
  const app = express()
  const idem = expressIdempotency({ store, secrets, principal: () => PRINCIPAL, onEvent, leaseMs: 300 })
  app.use(express.json(), idem.captureBody)
  app.post('/orders', idem(), async (req, res) => {
    await sleep(Number(req.headers['x-hold-ms'] ?? 0))
    res.status(201).json({ ok: true })
  })
  app.use(idem.errors)
  const server = createServer(app)
  return listen(server)
}

/** What a message looks like as text, errors included (their message and stack). */
const text = (value: unknown) =>
  JSON.stringify(value, (_key, item) =>
    item instanceof Error ? { name: item.name, message: item.message, stack: item.stack, cause: item.cause } : item,
  )

describe.each([
  ['fastify', fastifyApp],
  ['express', expressApp],
] as const)('events on %s', (_name, build) => {
  let store: FaultyStore
  let app: RunningApp
  const received: IdempotencyEvent[] = []
  const published: { channel: string; message: unknown }[] = []
  const listeners = {
    outcome: (message: unknown) => published.push({ channel: OUTCOME_CHANNEL, message }),
    event: (message: unknown) => published.push({ channel: EVENT_CHANNEL, message }),
  }
  const traced = {
    end: () => undefined,
    asyncStart: () => undefined,
    start: (message: unknown) => published.push({ channel: 'store:start', message: { ...(message as object) } }),
    asyncEnd: (message: unknown) => published.push({ channel: 'store:asyncEnd', message: { ...(message as object) } }),
    error: (message: unknown) => published.push({ channel: 'store:error', message: { ...(message as object) } }),
  }

  beforeAll(async () => {
    store = faultyStore(memoryStore())
    app = await build(store, (event) => received.push(event))
  })

  afterAll(async () => {
    await app.close()
    await store.close()
  })

  beforeEach(() => {
    received.length = 0
    published.length = 0
    diagnostics.subscribe(OUTCOME_CHANNEL, listeners.outcome)
    diagnostics.subscribe(EVENT_CHANNEL, listeners.event)
    diagnostics.tracingChannel(STORE_CHANNEL).subscribe(traced)
  })

  afterEach(() => {
    diagnostics.unsubscribe(OUTCOME_CHANNEL, listeners.outcome)
    diagnostics.unsubscribe(EVENT_CHANNEL, listeners.event)
    diagnostics.tracingChannel(STORE_CHANNEL).unsubscribe(traced)
  })

  const post = (key: string, body: unknown, holdMs = 0) =>
    send(app, 'POST', '/orders', {
      headers: { 'content-type': 'application/json', 'idempotency-key': key, 'x-hold-ms': String(holdMs) },
      body,
    })
  const outcomes = () => received.filter((event) => event.type === 'outcome')

  it('reports one outcome per request: 201, replay, 409, 422 and 503, with durations', async () => {
    const key = `${MARK}-${randomUUID()}`
    expect((await post(key, { n: 1 })).status).toBe(201)
    expect((await post(key, { n: 1 })).status).toBe(201)
    expect((await post(key, { n: 2 })).status).toBe(422)
    const slowKey = `${MARK}-${randomUUID()}`
    const slow = post(slowKey, { n: 1 }, 500)
    await sleep(100)
    expect((await post(slowKey, { n: 1 })).status).toBe(409)
    expect((await slow).status).toBe(201)
    store.inject('claim', 'not-sent')
    expect((await post(`${MARK}-${randomUUID()}`, { n: 1 })).status).toBe(503)

    const seen = outcomes().map((event) => (event.type === 'outcome' ? event.outcome : ''))
    expect(seen).toEqual([
      'EXECUTED',
      'REPLAYED',
      'FINGERPRINT_MISMATCH',
      'IN_PROGRESS',
      'EXECUTED',
      'STORE_UNAVAILABLE',
    ])
    for (const event of outcomes()) {
      expect(event).toMatchObject({ operation: 'POST /orders', method: 'POST', route: '/orders' })
      expect(event.digest).toMatch(/^[0-9a-f]{12}$/)
      if (event.type !== 'outcome') continue
      expect(event.durationMs).toBeGreaterThanOrEqual(0)
      expect(event.storeMs).toBeGreaterThanOrEqual(0)
      expect(event.storeMs).toBeLessThanOrEqual(event.durationMs)
    }
    const executed = outcomes().filter((event) => event.type === 'outcome' && event.outcome === 'EXECUTED')
    expect(executed.map((event) => event.type === 'outcome' && event.attempt)).toEqual([1, 1])
    // The slow run held the key 500 ms and renewed its 300 ms lease meanwhile.
    const slowRun = executed[1]
    expect(slowRun?.type === 'outcome' && slowRun.executionMs).toBeGreaterThanOrEqual(450)
    expect(received.some((event) => event.type === 'renewed')).toBe(true)
    expect(received.some((event) => event.type === 'store-error')).toBe(true)

    // The channels carried the same outcomes, and a trace for each store call.
    const channelled = published.filter((entry) => entry.channel === OUTCOME_CHANNEL)
    expect(channelled.map((entry) => (entry.message as { outcome: string }).outcome)).toEqual(seen)
    const calls = published.filter((entry) => entry.channel === 'store:asyncEnd')
    expect(new Set(calls.map((entry) => (entry.message as { call: string }).call))).toEqual(
      new Set(['claim', 'complete', 'renew']),
    )
    expect(published.filter((entry) => entry.channel === 'store:error')).toHaveLength(1)
    expect(published.some((entry) => entry.channel === EVENT_CHANNEL)).toBe(true)
  })

  it('never carries the raw key or the principal, in any event of any type', async () => {
    const key = `${MARK}-${randomUUID()}`
    await post(key, { n: 1 })
    await post(key, { n: 1 })
    await post(key, { n: 3 })
    store.inject('complete', 'lost-reply')
    await post(`${MARK}-${randomUUID()}`, { n: 1 })
    store.inject('claim', 'not-sent')
    await post(`${MARK}-${randomUUID()}`, { n: 1 })
    // A run that renews its 300 ms lease: the first renewal fails, the next ones go through.
    store.inject('renew', 'not-sent')
    await post(`${MARK}-${randomUUID()}`, { n: 1 }, 450)

    const types = new Set([...received.map((event) => event.type), ...published.map((entry) => entry.channel)])
    expect(types).toEqual(
      new Set([
        'outcome',
        'claim',
        'recorded',
        'reconcile',
        'store-error',
        'renew-failed',
        'renewed',
        OUTCOME_CHANNEL,
        EVENT_CHANNEL,
        'store:start',
        'store:asyncEnd',
        'store:error',
      ]),
    )
    for (const item of [...received, ...published]) {
      const serialised = text(item)
      expect(serialised).not.toContain(MARK)
      expect(serialised).not.toContain(PRINCIPAL)
    }
  })
})
