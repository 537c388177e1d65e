/**
 * Hono-only behaviour of the middleware: option errors, error classification through Hono's
 * onError, `c.get('idempotency')`, mounting with `app.use`, the body read for the fingerprint,
 * response capture. The docs/design.md §5 table for every adapter is in test/http/table.test.ts.
 */
import { randomUUID } from 'node:crypto'
import { createServer } from 'node:http'
import { getRequestListener } from '@hono/node-server'
import { type Context, Hono, type MiddlewareHandler } from 'hono'
import { HTTPException } from 'hono/http-exception'
import { afterEach, beforeEach, describe, expect, expectTypeOf, it, vi } from 'vitest'
import { idempotency as expressIdempotency } from '../../plugins/express/index.js'
import idempotency, {
  type HonoIdempotencyEnv,
  honoIdempotency,
  type IdempotencyInfo,
  memoryStore,
} from '../../plugins/hono/index.js'
import type { IdempotencyStore } from '../../src/core/store.js'
import {
  authHeaders,
  fastifyAdapter,
  honoAdapter,
  listen as listenServer,
  type RunningApp,
  send,
  sendRaw,
} from '../helpers/adapters.js'
import { SECRET } from '../helpers/example-app.js'
import { gate } from '../helpers/executor-harness.js'
import { faultyStore } from '../helpers/faulty-store.js'
import { sleep } from '../helpers/sleep.js'
import { STORES, type TestStore } from '../helpers/stores.js'

const secrets = { current: 1, keys: { 1: SECRET } }

type Env = { Variables: HonoIdempotencyEnv['Variables'] & { logger: object } }

/** Listens on a free port through @hono/node-server; closing also drops keep-alive connections. */
async function listen(app: Hono<Env>): Promise<RunningApp> {
  const server = createServer(getRequestListener(app.fetch))
  return listenServer(server)
}

const keyed = (key: string, extra: Record<string, string> = {}) => ({
  'idempotency-key': key,
  'content-type': 'application/json',
  ...extra,
})

/** An error as handlers throw them: a status and, when nothing was done, `retryable: true`. */
function httpError(status: number, retryable?: boolean): Error {
  return Object.assign(new Error(`failed with ${status}`), { status, ...(retryable ? { retryable } : {}) })
}

/** The app's error answer, as JSON with the error's status. */
function jsonErrors(error: Error, c: Context): Response {
  if (error instanceof HTTPException) return error.getResponse()
  const status = (error as { status?: number }).status ?? 500
  return c.json({ message: error.message }, status as 500)
}

/** A logger that keeps its lines, for `c.var.logger`. */
function lineSink(): { lines: string[]; logger: MiddlewareHandler<Env> } {
  const lines: string[] = []
  const line = (level: number) => (object: object, msg: string) => lines.push(JSON.stringify({ level, ...object, msg }))
  const log = { info: line(30), warn: line(40), error: line(50) }
  return {
    lines,
    logger: async (c, next) => {
      c.set('logger', log)
      await next()
    },
  }
}

describe('Hono middleware options', () => {
  const store = memoryStore()

  it.each([
    ['no store', { secrets, anonymous: true }],
    ['no secrets', { store, anonymous: true }],
    ['no principal and not anonymous', { store, secrets }],
    ['an unknown option', { store, secrets, anonymous: true, leaseMS: 5 }],
    ['a bad lease', { store, secrets, anonymous: true, leaseMs: -1 }],
    ['a plugin-wide operation', { store, secrets, anonymous: true, operation: 'x' }],
    ['a short secret', { store, secrets: { current: 1, keys: { 1: 'short' } }, anonymous: true }],
    ['a forbidden stored header', { store, secrets, anonymous: true, storedHeaders: ['set-cookie'] }],
  ])('throws the same coded error as the Express middleware when the options have %s', (_case, options) => {
    const caught = (build: () => unknown) => {
      try {
        build()
      } catch (error) {
        return error as Error & { code?: string }
      }
      return undefined
    }

    const express = caught(() => expressIdempotency(options as never))
    const hono = caught(() => idempotency(options as never))

    expect(express).toBeDefined()
    expect(hono).toMatchObject({ name: express?.name, code: express?.code, message: express?.message })
  })

  it('validates route options when idem(...) is called', () => {
    const idem = idempotency({ store, secrets, anonymous: true })

    expect(() => idem({ leaseMs: 'soon' as never })).toThrow(
      expect.objectContaining({ code: 'ERR_IDEM_INVALID_OPTION', message: expect.stringMatching(/leaseMs/) }),
    )
    expect(() => idem({ colour: 'red' } as never)).toThrow(/colour/)
    expect(() => idem('yes' as never)).toThrow(/idempotency/)
    expect(() => idem({ transaction: true })).toThrow(/transaction/)
  })

  it('is the default export and the named honoIdempotency', () => {
    expect(honoIdempotency).toBe(idempotency)
  })

  it("types c.get('idempotency') in the handlers after it, beside the app's own variables", async () => {
    const app = new Hono<{ Variables: { user: string } }>()
    const idem = idempotency({ store, secrets, principal: (c) => c.get('user') })
    app.post('/x', idem({ required: false }), (c) => {
      expectTypeOf(c.get('idempotency')).toEqualTypeOf<IdempotencyInfo | null>()
      expectTypeOf(c.get('user')).toEqualTypeOf<string>()
      return c.json({ idempotency: c.get('idempotency') })
    })

    const response = await app.request('/x', { method: 'POST' })

    expect(await response.json()).toEqual({ idempotency: null })
  })
})

describe('Hono beside Fastify on one store', () => {
  it('replays on Hono the answer Fastify stored for the same request, and the other way round', async () => {
    const store = memoryStore()
    const fastify = await fastifyAdapter.example(store)
    const hono = await honoAdapter.example(store)
    const order = (app: RunningApp, key: string, body: string) =>
      send(app, 'POST', '/orders?src=x', { headers: authHeaders('alice', key), body })
    const [first, second] = [randomUUID(), randomUUID()]

    const onFastify = await order(fastify, first, '{"item":"book","qty":1}')
    const onHono = await order(hono, first, '{ "qty": 1, "item": "book" }')
    const fromHono = await order(hono, second, '{"item":"pen","qty":2}')
    const onFastifyAgain = await order(fastify, second, '{"item":"pen","qty":2}')
    await Promise.all([fastify.close(), hono.close()])
    await store.close()

    expect(onFastify.status).toBe(201)
    expect(onHono.headers.get('idempotent-replayed')).toBe('true')
    expect(onHono.body.equals(onFastify.body)).toBe(true)
    expect(fromHono.status).toBe(201)
    expect(onFastifyAgain.headers.get('idempotent-replayed')).toBe('true')
    expect(onFastifyAgain.body.equals(fromHono.body)).toBe(true)
  })
})

describe.each(STORES)('Hono middleware on the %s store', (_name, create) => {
  let backing: TestStore
  let running: RunningApp | undefined

  beforeEach(async () => {
    backing = await create()
  })

  afterEach(async () => {
    await running?.close()
    running = undefined
    await backing.teardown()
    vi.restoreAllMocks()
  })

  /** An app with one idempotent POST /op whose handler is `handler`; runs are counted. */
  async function appWith(
    handler: (c: Context<Env>) => Response | Promise<Response>,
    options: { store?: IdempotencyStore; recordRetryMs?: number; before?: MiddlewareHandler<Env> } = {},
  ): Promise<{ app: RunningApp; runs: () => number }> {
    let runs = 0
    const app = new Hono<Env>()
    if (options.before !== undefined) app.use(options.before)
    const idem = idempotency({
      store: options.store ?? backing.store,
      secrets,
      anonymous: true,
      recordRetryMs: options.recordRetryMs,
    })
    app.post('/op', idem(), (c) => {
      runs++
      return handler(c)
    })
    app.onError(jsonErrors)
    running = await listen(app)
    return { app: running, runs: () => runs }
  }

  const post = (app: RunningApp, key: string, body: unknown = { a: 1 }, path = '/op') =>
    send(app, 'POST', path, { headers: keyed(key), body })

  describe('error classification', () => {
    it('lets a retry run again when the handler throws an error marked retryable', async () => {
      const { app, runs } = await appWith(() => {
        throw httpError(503, true)
      })
      const key = randomUUID()

      const first = await post(app, key)
      const retry = await post(app, key)

      expect(first.status).toBe(503)
      expect(first.json()).toEqual({ message: 'failed with 503' })
      expect(retry.status).toBe(503)
      expect(runs()).toBe(2)
    })

    it('answers retries 503 recovery-required when the handler throws an unmarked error', async () => {
      const { app, runs } = await appWith(async () => {
        throw new Error('the effect is unknown')
      })
      const key = randomUUID()

      const first = await post(app, key)
      const retry = await post(app, key)

      expect(first.status).toBe(500)
      expect(retry.status).toBe(503)
      expect(retry.json()).toMatchObject({ code: 'IDEMPOTENCY_RECOVERY_REQUIRED' })
      expect(runs()).toBe(1)
    })

    it('answers retries 503 recovery-required when the handler throws something that is not an Error', async () => {
      const { app, runs } = await appWith(() => {
        throw 'a string'
      })
      const key = randomUUID()

      const first = await post(app, key)
      const retry = await post(app, key)

      expect(first.status).toBe(500)
      expect(retry.json()).toMatchObject({ code: 'IDEMPOTENCY_RECOVERY_REQUIRED' })
      expect(runs()).toBe(1)
    })

    it('stores and replays the error answer when the thrown error is an HTTPException with a 4xx status', async () => {
      const { app, runs } = await appWith(() => {
        throw new HTTPException(402, { message: 'card declined' })
      })
      const key = randomUUID()

      const first = await post(app, key)
      const retry = await post(app, key)

      expect(first.status).toBe(402)
      expect(first.text).toBe('card declined')
      expect(retry.status).toBe(402)
      expect(retry.headers.get('idempotent-replayed')).toBe('true')
      expect(retry.body.equals(first.body)).toBe(true)
      expect(runs()).toBe(1)
    })

    it('lets a retry run again when the handler answers a retryable status (429)', async () => {
      const { app, runs } = await appWith((c) => c.json({ slow: 'down' }, 429))
      const key = randomUUID()

      await post(app, key)
      const retry = await post(app, key)

      expect(retry.status).toBe(429)
      expect(runs()).toBe(2)
    })

    it('ends the execution as unknown when the handler returns no response', async () => {
      const { app, runs } = await appWith((() => undefined) as never)
      const key = randomUUID()

      const first = await post(app, key)
      const retry = await post(app, key)

      expect(first.status).toBe(500)
      expect(retry.json()).toMatchObject({ code: 'IDEMPOTENCY_RECOVERY_REQUIRED' })
      expect(runs()).toBe(1)
    })
  })

  describe("c.get('idempotency')", () => {
    it('holds the fencing token, signal and digest prefix when the handler runs, and null without a key on an optional route', async () => {
      let seen: IdempotencyInfo | null | undefined
      const app = new Hono<Env>()
      const idem = idempotency({ store: backing.store, secrets, anonymous: true })
      app.post('/op', idem(), (c) => {
        seen = c.get('idempotency')
        return c.json({ ok: true })
      })
      app.post('/optional', idem({ required: false }), (c) => c.json({ idempotency: c.get('idempotency') }))
      running = await listen(app)

      await post(running, randomUUID())
      const optional = await send(running, 'POST', '/optional')

      expect(seen).toMatchObject({ fencingToken: 1, replayed: false, digest: expect.stringMatching(/^[0-9a-f]{12}$/) })
      expect(seen?.signal).toBeInstanceOf(AbortSignal)
      expect(seen?.signal.aborted).toBe(false)
      expect(optional.json()).toEqual({ idempotency: null })
    })

    it('marks the request replayed when a stored response is sent', async () => {
      const seen: (IdempotencyInfo | null)[] = []
      const { app } = await appWith((c) => c.json({ ok: true }), {
        before: async (c, next) => {
          await next()
          seen.push(c.get('idempotency'))
        },
      })
      const key = randomUUID()

      await post(app, key)
      await post(app, key)

      expect(seen.map((info) => info?.replayed)).toEqual([false, true])
      expect(seen[1]?.digest).toBe(seen[0]?.digest)
    })
  })

  describe('mounting', () => {
    it("protects the unsafe methods below a path and lets reads through when mounted with app.use, as operation 'METHOD <pattern>'", async () => {
      let runs = 0
      const app = new Hono<Env>()
      app.use('/orders/*', idempotency({ store: backing.store, secrets, anonymous: true })())
      app.post('/orders/:kind', (c) => {
        runs++
        return c.json({ n: runs }, 201)
      })
      app.get('/orders/:kind', (c) => c.json({ runs, idempotency: c.get('idempotency') ?? null }))
      running = await listen(app)
      const key = randomUUID()

      const missing = await send(running, 'POST', '/orders/book', { headers: { 'content-type': 'application/json' } })
      const first = await post(running, key, { a: 1 }, '/orders/book')
      const replay = await post(running, key, { a: 1 }, '/orders/book')
      const otherPath = await post(running, key, { a: 1 }, '/orders/pen')
      const read = await send(running, 'GET', '/orders/book')

      expect(missing.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_MISSING' })
      expect(first.status).toBe(201)
      expect(replay.headers.get('idempotent-replayed')).toBe('true')
      // One operation ('POST /orders/*') for every path below it: the fingerprint tells them apart.
      expect(otherPath.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED' })
      expect(read.json()).toEqual({ runs: 1, idempotency: null })
    })

    it('guards a request once when the middleware is mounted on the path and on the route', async () => {
      let runs = 0
      const app = new Hono<Env>()
      const idem = idempotency({ store: backing.store, secrets, anonymous: true })
      app.use('/op', idem())
      app.post('/op', idem(), (c) => {
        runs++
        return c.json({ n: runs })
      })
      running = await listen(app)
      const key = randomUUID()

      const first = await post(running, key)
      const second = await post(running, key)

      expect(first.json()).toEqual({ n: 1 })
      expect(second.headers.get('idempotent-replayed')).toBe('true')
      expect(runs).toBe(1)
    })

    it('passes HEAD requests to a guarded GET route through untouched', async () => {
      const app = new Hono<Env>()
      app.get('/op', idempotency({ store: backing.store, secrets, anonymous: true })(), (c) =>
        c.body(null, 200, { 'x-head': 'yes' }),
      )
      running = await listen(app)

      const head = await send(running, 'HEAD', '/op')
      const get = await send(running, 'GET', '/op')

      expect(head.status).toBe(200)
      expect(head.headers.get('x-head')).toBe('yes')
      expect(get.status).toBe(400)
    })
  })

  describe('the request body', () => {
    it('leaves the body readable by the handler and fingerprints JSON as a value, not as bytes', async () => {
      const bodies: unknown[] = []
      const { app, runs } = await appWith(async (c) => {
        bodies.push(await c.req.json())
        return c.json({ ok: true }, 201)
      })
      const key = randomUUID()

      const first = await post(app, key, '{"a":1,"b":[1,2]}')
      const reordered = await post(app, key, '{ "b": [1, 2],  "a": 1 }')
      const other = await post(app, key, '{"a":2,"b":[1,2]}')

      expect(first.status).toBe(201)
      expect(reordered.headers.get('idempotent-replayed')).toBe('true')
      expect(other.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED' })
      expect(bodies).toEqual([{ a: 1, b: [1, 2] }])
      expect(runs()).toBe(1)
    })

    it('fingerprints a body that is not JSON as its bytes', async () => {
      const { app, runs } = await appWith(async (c) => c.text(`got ${await c.req.text()}`, 201))
      const key = randomUUID()
      const text = (body: string) =>
        send(app, 'POST', '/op', { headers: keyed(key, { 'content-type': 'text/plain' }), body })

      const first = await text('hello')
      const again = await text('hello')
      const other = await text('hello!')

      expect(first.text).toBe('got hello')
      expect(again.headers.get('idempotent-replayed')).toBe('true')
      expect(other.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED' })
      expect(runs()).toBe(1)
    })

    it('answers 400 IDEMPOTENCY_BODY_INVALID and holds no key when a JSON body does not parse', async () => {
      const { app, runs } = await appWith(async (c) => c.json(await c.req.json(), 201))
      const key = randomUUID()

      const broken = await post(app, key, '{"a":')
      const valid = await post(app, key, { a: 1 })

      expect(broken.status).toBe(400)
      expect(broken.json()).toMatchObject({ code: 'IDEMPOTENCY_BODY_INVALID' })
      expect(valid.status).toBe(201)
      expect(valid.headers.get('idempotent-replayed')).toBeNull()
      expect(runs()).toBe(1)
    })

    it("uses the route's own fingerprint function instead of the body", async () => {
      let runs = 0
      const app = new Hono<Env>()
      const idem = idempotency({ store: backing.store, secrets, anonymous: true })
      app.post('/op', idem({ fingerprint: (c) => c.req.header('x-order') ?? '' }), async (c) => {
        runs++
        return c.json({ body: await c.req.text() })
      })
      running = await listen(app)
      const key = randomUUID()

      const first = await send(running, 'POST', '/op', { headers: keyed(key, { 'x-order': '7' }), body: 'one' })
      const second = await send(running, 'POST', '/op', { headers: keyed(key, { 'x-order': '7' }), body: 'two' })

      expect(first.json()).toEqual({ body: 'one' })
      expect(second.headers.get('idempotent-replayed')).toBe('true')
      expect(second.json()).toEqual({ body: 'one' })
      expect(runs).toBe(1)
    })

    it('refuses a key sent on two header lines as such, from the raw header lines', async () => {
      const { app, runs } = await appWith((c) => c.json({ ok: true }))

      const response = await sendRaw(
        app,
        ['POST /op HTTP/1.1', `Host: 127.0.0.1:${app.port}`, 'Idempotency-Key: a', 'Idempotency-Key: a'],
        '{}',
      )

      expect(response.status).toBe(400)
      expect(JSON.parse(response.body)).toMatchObject({
        code: 'IDEMPOTENCY_KEY_INVALID',
        detail: 'The Idempotency-Key header must be sent once.',
      })
      expect(runs()).toBe(0)
    })

    it('works from the Fetch request alone on a runtime without a Node request (app.request)', async () => {
      let runs = 0
      const app = new Hono<Env>()
      app.post('/op', idempotency({ store: backing.store, secrets, anonymous: true })(), async (c) => {
        runs++
        return c.json({ query: c.req.query('q'), body: await c.req.json() }, 201)
      })
      const key = randomUUID()
      const request = (query: string) =>
        app.request(`/op?q=${query}`, { method: 'POST', headers: keyed(key), body: '{"a":1}' })

      const first = await request('1')
      const replay = await request('1')
      const otherQuery = await request('2')

      expect(first.status).toBe(201)
      expect(await first.json()).toEqual({ query: '1', body: { a: 1 } })
      expect(replay.headers.get('idempotent-replayed')).toBe('true')
      expect(await otherQuery.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED' })
      expect(runs).toBe(1)
    })
  })

  describe('response capture', () => {
    it('replays a streamed response byte for byte, with the allowlisted headers only', async () => {
      const chunks = [Buffer.from('{"part":'), Buffer.from([0x31, 0xc3]), Buffer.from([0xa9, 0x7d])]
      const { app, runs } = await appWith((c) => {
        const body = new ReadableStream<Uint8Array>({
          pull(controller) {
            const chunk = chunks.shift()
            if (chunk === undefined) controller.close()
            else controller.enqueue(chunk)
          },
        })
        return c.body(body, 202, { 'content-type': 'application/json', location: '/jobs/1', 'x-trace': 't1' })
      })
      const key = randomUUID()

      const first = await post(app, key)
      const second = await post(app, key)

      expect(first.status).toBe(202)
      expect(first.text).toBe('{"part":1é}')
      expect(first.headers.get('x-trace')).toBe('t1')
      expect(second.status).toBe(202)
      expect(second.headers.get('idempotent-replayed')).toBe('true')
      expect(second.headers.get('location')).toBe('/jobs/1')
      expect(second.headers.get('content-type')).toBe('application/json')
      expect(second.headers.get('x-trace')).toBeNull()
      expect(second.body.equals(first.body)).toBe(true)
      expect(runs()).toBe(1)
    })

    it('replays a 204 without a body', async () => {
      const { app, runs } = await appWith((c) => c.body(null, 204))
      const key = randomUUID()

      const first = await post(app, key)
      const second = await post(app, key)

      expect(first.status).toBe(204)
      expect(second.status).toBe(204)
      expect(second.headers.get('idempotent-replayed')).toBe('true')
      expect(second.body.byteLength).toBe(0)
      expect(runs()).toBe(1)
    })

    it('writes the completion before the response leaves', async () => {
      const events: string[] = []
      const slow = faultyStore(backing.store)
      const complete = slow.complete
      slow.complete = async (...args) => {
        await sleep(100)
        const result = await complete(...args)
        events.push('completion written')
        return result
      }
      const { app } = await appWith((c) => c.json({ ok: true }), { store: slow })

      await post(app, randomUUID())
      events.push('response received')

      expect(events).toEqual(['completion written', 'response received'])
    })

    it('sends 503 store-unavailable instead of the handler response, keeping headers set before the handler, when the completion cannot be written', async () => {
      const failing = faultyStore(backing.store)
      failing.block('complete', 'not-sent')
      const errors = vi.spyOn(console, 'error').mockImplementation(() => {})
      const { app } = await appWith(
        (c) => {
          c.header('x-handler', 'yes')
          return c.json({ secret: 'the handler answer' }, 201)
        },
        {
          store: failing,
          recordRetryMs: 100,
          before: async (c, next) => {
            c.header('x-request-id', 'r1')
            await next()
          },
        },
      )

      const response = await post(app, randomUUID())

      expect(response.status).toBe(503)
      expect(response.headers.get('content-type')).toBe('application/problem+json; charset=utf-8')
      expect(response.json()).toMatchObject({ code: 'IDEMPOTENCY_STORE_UNAVAILABLE' })
      expect(response.text).not.toContain('the handler answer')
      expect(response.headers.get('x-handler')).toBeNull()
      expect(response.headers.get('x-request-id')).toBe('r1')
      expect(Number(response.headers.get('retry-after'))).toBeGreaterThanOrEqual(1)
      // Without a logger in c.var, the layer's error line goes to the console.
      expect(errors).toHaveBeenCalledWith('idempotency store failed', expect.anything())
    })

    it('warns on the console, without a logger, when a lease renewal fails', async () => {
      const warnings = vi.spyOn(console, 'warn').mockImplementation(() => {})
      const failing = faultyStore(backing.store)
      const app = new Hono<Env>()
      const idem = idempotency({ store: failing, secrets, anonymous: true, leaseMs: 300 })
      app.post('/op', idem(), async (c) => {
        failing.block('renew', 'not-sent')
        await sleep(180)
        return c.json({ ok: true })
      })
      running = await listen(app)

      const response = await post(running, randomUUID())

      expect(response.status).toBe(200)
      expect(warnings).toHaveBeenCalledWith('idempotency lease renewal failed', expect.anything())
    })

    it('ends the execution as unknown when the response stream fails while it is read', async () => {
      const { app, runs } = await appWith((c) => {
        const body = new ReadableStream<Uint8Array>({
          start(controller) {
            controller.enqueue(Buffer.from('partial '))
            controller.error(new Error('the source broke'))
          },
        })
        return c.body(body, 200)
      })
      const key = randomUUID()

      const first = await post(app, key)
      const retry = await post(app, key)

      expect(first.status).toBe(500)
      expect(retry.json()).toMatchObject({ code: 'IDEMPOTENCY_RECOVERY_REQUIRED' })
      expect(runs()).toBe(1)
    })

    it('stores the answer of a handler that finishes after the client left, so the retry replays it', async () => {
      const left = gate()
      const recorded = gate()
      const { lines, logger } = lineSink()
      const app = new Hono<Env>()
      app.use(logger)
      let runs = 0
      app.post('/op', idempotency({ store: backing.store, secrets, anonymous: true })(), async (c) => {
        runs++
        await left.promise
        return c.json({ late: true })
      })
      app.use(async (_c, next) => {
        await next()
      })
      running = await listen(app)
      const key = randomUUID()
      const aborted = new AbortController()
      const first = send(running, 'POST', '/op', { headers: keyed(key), body: {}, signal: aborted.signal })
      await vi.waitFor(() => expect(runs).toBe(1))

      aborted.abort()
      await expect(first).rejects.toThrow()
      left.open()
      await vi.waitFor(() => expect(lines.join('')).toContain('"outcome":"EXECUTED"'))
      recorded.open()
      const retry = await post(running, key, {})

      expect(retry.status).toBe(200)
      expect(retry.headers.get('idempotent-replayed')).toBe('true')
      expect(retry.json()).toEqual({ late: true })
      expect(runs).toBe(1)
    })
  })
})
