/**
 * Koa-only behaviour of the middleware: option errors, what a thrown error becomes through Koa's
 * and the app's error handling, `ctx.state.idempotency`, mounting on @koa/router and on the app,
 * the body fingerprinted from the raw body the body parser kept, response capture on Koa's Node
 * response, and a client that leaves before Koa writes. The docs/design.md §5 table for every
 * adapter is in test/http/table.test.ts.
 */
import { randomUUID } from 'node:crypto'
import { createServer } from 'node:http'
import { Readable } from 'node:stream'
import { bodyParser } from '@koa/bodyparser'
import Router from '@koa/router'
import Koa, { type Middleware } from 'koa'
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { idempotency as expressIdempotency } from '../../plugins/express/index.js'
import idempotency, {
  type IdempotencyInfo,
  type KoaIdempotencyState,
  koaIdempotency,
  memoryStore,
} from '../../plugins/koa/index.js'
import type { IdempotencyStore } from '../../src/core/store.js'
import { authHeaders, expressAdapter, listen, type RunningApp, send, sendRaw } from '../helpers/adapters.js'
import { SECRET } from '../helpers/example-app.js'
import { gate } from '../helpers/executor-harness.js'
import { faultyStore } from '../helpers/faulty-store.js'
import { sleep } from '../helpers/sleep.js'
import { STORES, type TestStore } from '../helpers/stores.js'

const secrets = { current: 1, keys: { 1: SECRET } }

type App = Koa<KoaIdempotencyState>

function serve(app: App): Promise<RunningApp> {
  // Errors are answered and checked here; Koa's 'error' event would print each to the console.
  app.silent = true
  return listen(createServer(app.callback()))
}

const keyed = (key: string, extra: Record<string, string> = {}) => ({
  'idempotency-key': key,
  'content-type': 'application/json',
  ...extra,
})

/** An error as handlers throw them: a status and, when nothing was done, `retryable: true`. */
function httpError(status: number, retryable?: boolean): Error {
  return Object.assign(new Error(`failed with ${status}`), {
    status,
    expose: true,
    ...(retryable ? { retryable } : {}),
  })
}

describe('Koa middleware options', () => {
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
    const koa = caught(() => idempotency(options as never))

    expect(express).toBeDefined()
    expect(koa).toMatchObject({ name: express?.name, code: express?.code, message: express?.message })
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

  it('is the default export and the named koaIdempotency', () => {
    expect(koaIdempotency).toBe(idempotency)
  })
})

describe.each(STORES)('Koa middleware on the %s store', (_name, create) => {
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
    handler: Middleware<KoaIdempotencyState>,
    options: { store?: IdempotencyStore; recordRetryMs?: number; leaseMs?: number; before?: Middleware[] } = {},
  ): Promise<{ app: RunningApp; runs: () => number }> {
    let runs = 0
    const app: App = new Koa()
    for (const middleware of options.before ?? []) app.use(middleware)
    app.use(bodyParser({ enableTypes: ['json', 'text'] }))
    const { before: _before, store, ...rest } = options
    const idem = idempotency({ store: store ?? backing.store, secrets, anonymous: true, ...rest })
    const router = new Router<KoaIdempotencyState>()
    router.post('/op', idem(), (ctx, next) => {
      runs++
      return handler(ctx, next)
    })
    app.use(router.routes())
    running = await serve(app)
    return { app: running, runs: () => runs }
  }

  const post = (app: RunningApp, key: string, body: unknown = { a: 1 }, path = '/op') =>
    send(app, 'POST', path, { headers: keyed(key), body })

  describe('error classification', () => {
    it("lets a retry run again when the handler throws an error marked retryable, answered by Koa's onerror", async () => {
      const { app, runs } = await appWith(() => {
        throw httpError(503, true)
      })
      const key = randomUUID()

      const first = await post(app, key)
      const retry = await post(app, key)

      expect(first.status).toBe(503)
      expect(first.text).toBe('failed with 503')
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

    it("stores and replays Koa's own answer to ctx.throw(402)", async () => {
      const { app, runs } = await appWith((ctx) => ctx.throw(402, 'card declined'))
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

    it("stores and replays the answer of the app's error handler before the middleware, classified by the error", async () => {
      const errors: Middleware = async (ctx, next) => {
        try {
          await next()
        } catch (error) {
          ctx.status = (error as { status?: number }).status ?? 500
          ctx.body = { problem: (error as Error).message }
        }
      }
      let fail = httpError(409)
      const { app, runs } = await appWith(
        () => {
          throw fail
        },
        { before: [errors] },
      )
      const key = randomUUID()

      const conflict = await post(app, key)
      fail = httpError(422)
      const refused = await post(app, key)
      const replay = await post(app, key)

      // 409 says "not processed": the retry runs again; its 422 is an answer, stored and replayed.
      expect(conflict.status).toBe(409)
      expect(refused.json()).toEqual({ problem: 'failed with 422' })
      expect(replay.status).toBe(422)
      expect(replay.headers.get('idempotent-replayed')).toBe('true')
      expect(replay.body.equals(refused.body)).toBe(true)
      expect(runs()).toBe(2)
    })

    it('lets a retry run again when the handler answers a retryable status (429)', async () => {
      const { app, runs } = await appWith((ctx) => {
        ctx.status = 429
        ctx.body = { slow: 'down' }
      })
      const key = randomUUID()

      await post(app, key)
      const retry = await post(app, key)

      expect(retry.status).toBe(429)
      expect(runs()).toBe(2)
    })
  })

  describe('ctx.state.idempotency', () => {
    it('holds the fencing token, signal and digest prefix when the handler runs, and null without a key on an optional route', async () => {
      let seen: IdempotencyInfo | null | undefined
      const app: App = new Koa()
      app.use(bodyParser())
      const idem = idempotency({ store: backing.store, secrets, anonymous: true })
      const router = new Router<KoaIdempotencyState>()
      router.post('/op', idem(), (ctx) => {
        seen = ctx.state.idempotency
        ctx.body = { ok: true }
      })
      router.post('/optional', idem({ required: false }), (ctx) => {
        ctx.body = { idempotency: ctx.state.idempotency }
      })
      app.use(router.routes())
      running = await serve(app)

      await post(running, randomUUID())
      const optional = await send(running, 'POST', '/optional')

      expect(seen).toMatchObject({ fencingToken: 1, replayed: false, digest: expect.stringMatching(/^[0-9a-f]{12}$/) })
      expect(seen?.signal).toBeInstanceOf(AbortSignal)
      expect(typeof seen?.keyFor).toBe('function')
      expect(optional.json()).toEqual({ idempotency: null })
    })

    it('marks the request replayed when a stored response is sent', async () => {
      const seen: (IdempotencyInfo | null)[] = []
      const { app } = await appWith(
        (ctx) => {
          ctx.body = { ok: true }
        },
        {
          before: [
            async (ctx, next) => {
              await next()
              seen.push(ctx.state.idempotency)
            },
          ],
        },
      )
      const key = randomUUID()

      await post(app, key)
      await post(app, key)

      expect(seen.map((info) => info?.replayed)).toEqual([false, true])
      expect(seen[1]?.digest).toBe(seen[0]?.digest)
    })
  })

  describe('mounting', () => {
    it("protects the unsafe methods below a router and lets reads through when mounted with router.use, as each route's operation", async () => {
      let runs = 0
      const app: App = new Koa()
      app.use(bodyParser())
      const router = new Router<KoaIdempotencyState>({ prefix: '/accounts' })
      router.use(idempotency({ store: backing.store, secrets, anonymous: true })())
      router.post('/:id/deposits', (ctx) => {
        runs++
        ctx.status = 201
        ctx.body = { account: ctx.params.id, n: runs }
      })
      router.get('/:id', (ctx) => {
        ctx.body = { runs, idempotency: ctx.state.idempotency ?? null }
      })
      app.use(router.routes())
      running = await serve(app)
      const key = randomUUID()

      const missing = await send(running, 'POST', '/accounts/1/deposits', {
        headers: { 'content-type': 'application/json' },
        body: {},
      })
      const first = await post(running, key, { amount: 5 }, '/accounts/1/deposits')
      const replay = await post(running, key, { amount: 5 }, '/accounts/1/deposits')
      const otherAccount = await post(running, key, { amount: 5 }, '/accounts/2/deposits')
      const read = await send(running, 'GET', '/accounts/1')

      expect(missing.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_MISSING' })
      expect(first.status).toBe(201)
      expect(replay.headers.get('idempotent-replayed')).toBe('true')
      // One operation ('POST /accounts/:id/deposits', the prefix included): the fingerprint tells the paths apart.
      expect(otherAccount.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED' })
      expect(read.json()).toEqual({ runs: 1, idempotency: null })
    })

    it('uses METHOD / as the operation when mounted on the app before any router, so a key reused on another path is a 422', async () => {
      let runs = 0
      const app: App = new Koa()
      app.use(bodyParser())
      app.use(idempotency({ store: backing.store, secrets, anonymous: true })())
      app.use((ctx) => {
        runs++
        ctx.status = 201
        ctx.body = { path: ctx.path }
      })
      running = await serve(app)
      const key = randomUUID()

      const first = await post(running, key, { a: 1 }, '/one')
      const other = await post(running, key, { a: 1 }, '/two')

      expect(first.status).toBe(201)
      expect(other.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED' })
      expect(runs).toBe(1)
    })

    it('guards a request once when the middleware is mounted on the app and on the route', async () => {
      let runs = 0
      const idem = idempotency({ store: backing.store, secrets, anonymous: true })
      const app: App = new Koa()
      app.use(bodyParser())
      app.use(idem())
      const router = new Router<KoaIdempotencyState>()
      router.post('/op', idem(), (ctx) => {
        runs++
        ctx.body = { n: runs }
      })
      app.use(router.routes())
      running = await serve(app)
      const key = randomUUID()

      const first = await post(running, key)
      const second = await post(running, key)

      expect(first.json()).toEqual({ n: 1 })
      expect(second.headers.get('idempotent-replayed')).toBe('true')
      expect(runs).toBe(1)
    })
  })

  describe('the request body', () => {
    it('fingerprints the raw body the parser kept: a validator that rewrites ctx.request.body changes nothing', async () => {
      const coerce: Middleware = async (ctx, next) => {
        const body = ctx.request.body as { qty?: unknown }
        // A validator that coerces and strips, assigning its result back.
        ctx.request.body = { qty: Number(body.qty) }
        await next()
      }
      let runs = 0
      const app: App = new Koa()
      app.use(bodyParser())
      const router = new Router<KoaIdempotencyState>()
      router.post('/op', coerce, idempotency({ store: backing.store, secrets, anonymous: true })(), (ctx) => {
        runs++
        ctx.status = 201
        ctx.body = { got: ctx.request.body }
      })
      app.use(router.routes())
      running = await serve(app)
      const key = randomUUID()

      const first = await post(running, key, '{"qty":1}')
      const coerced = await post(running, key, '{"qty":"1"}')
      const stripped = await post(running, key, '{"qty":1,"note":"x"}')
      const reordered = await post(running, key, '{ "qty": 1 }')

      expect(first.status).toBe(201)
      expect(coerced.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED' })
      expect(stripped.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED' })
      expect(reordered.headers.get('idempotent-replayed')).toBe('true')
      expect(runs).toBe(1)
    })

    it('fingerprints a text body as its bytes', async () => {
      const { app, runs } = await appWith((ctx) => {
        ctx.status = 201
        ctx.body = `got ${ctx.request.body}`
      })
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

    it('fingerprints the parsed body when a parser kept no raw body, as koa-body does without includeUnparsed', async () => {
      // A parser of the app's own that reads the stream and keeps only what it parsed.
      const ownParser: Middleware = async (ctx, next) => {
        let text = ''
        for await (const chunk of ctx.req) text += chunk
        ctx.request.body = JSON.parse(text)
        await next()
      }
      let runs = 0
      const app: App = new Koa()
      app.use(ownParser)
      const router = new Router<KoaIdempotencyState>()
      router.post('/op', idempotency({ store: backing.store, secrets, anonymous: true })(), (ctx) => {
        runs++
        ctx.body = { got: ctx.request.body }
      })
      app.use(router.routes())
      running = await serve(app)
      const key = randomUUID()

      await post(running, key, '{"a":1,"b":2}')
      const reordered = await post(running, key, '{"b":2,"a":1}')
      const other = await post(running, key, '{"a":2,"b":2}')

      expect(reordered.headers.get('idempotent-replayed')).toBe('true')
      expect(other.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED' })
      expect(runs).toBe(1)
    })

    it.each([
      ['no body parser', [] as Middleware[]],
      ['a body parser that does not parse this content type', [bodyParser()]],
    ])('answers 415 IDEMPOTENCY_BODY_UNREAD and runs nothing with %s', async (_case, parsers) => {
      let runs = 0
      const app: App = new Koa()
      for (const parser of parsers) app.use(parser)
      const router = new Router<KoaIdempotencyState>()
      router.post('/op', idempotency({ store: backing.store, secrets, anonymous: true })(), (ctx) => {
        runs++
        ctx.body = { ok: true }
      })
      app.use(router.routes())
      running = await serve(app)

      const response = await send(running, 'POST', '/op', {
        headers: keyed(randomUUID(), { 'content-type': 'application/octet-stream' }),
        body: 'bytes',
      })

      expect(response.status).toBe(415)
      expect(response.json()).toMatchObject({ code: 'IDEMPOTENCY_BODY_UNREAD' })
      expect(runs).toBe(0)
    })

    it("uses the route's own fingerprint function instead of the body, read or not", async () => {
      let runs = 0
      const app: App = new Koa()
      const router = new Router<KoaIdempotencyState>()
      const idem = idempotency({ store: backing.store, secrets, anonymous: true })
      router.post('/op', idem({ fingerprint: (ctx) => ctx.get('x-order') }), (ctx) => {
        runs++
        ctx.body = { n: runs }
      })
      app.use(router.routes())
      running = await serve(app)
      const key = randomUUID()

      const first = await send(running, 'POST', '/op', { headers: keyed(key, { 'x-order': '7' }), body: 'one' })
      const second = await send(running, 'POST', '/op', { headers: keyed(key, { 'x-order': '7' }), body: 'two' })

      expect(first.json()).toEqual({ n: 1 })
      expect(second.headers.get('idempotent-replayed')).toBe('true')
      expect(runs).toBe(1)
    })

    it('refuses a key sent on two header lines as such, from the raw header lines', async () => {
      const { app, runs } = await appWith((ctx) => {
        ctx.body = { ok: true }
      })

      const response = await sendRaw(
        app,
        ['POST /op HTTP/1.1', `Host: 127.0.0.1:${app.port}`, 'Idempotency-Key: a', 'Idempotency-Key: a'],
        '',
      )

      expect(response.status).toBe(400)
      expect(JSON.parse(response.body)).toMatchObject({
        code: 'IDEMPOTENCY_KEY_INVALID',
        detail: 'The Idempotency-Key header must be sent once.',
      })
      expect(runs()).toBe(0)
    })

    it('replays on Express the answer Koa stored for the same request, the fingerprints being the same', async () => {
      const express = await expressAdapter.example(backing.store)
      const app: App = new Koa()
      app.use(bodyParser())
      const router = new Router<KoaIdempotencyState>()
      const idem = idempotency({
        store: backing.store,
        secrets,
        principal: (ctx) => /^Bearer (\w+)$/.exec(ctx.get('authorization'))?.[1],
      })
      router.post('/orders', idem(), (ctx) => {
        ctx.status = 201
        ctx.body = { id: randomUUID(), ...(ctx.request.body as object) }
      })
      app.use(router.routes())
      running = await serve(app)
      const key = randomUUID()
      const order = (to: RunningApp, body: string) =>
        send(to, 'POST', '/orders?src=x', { headers: authHeaders('alice', key), body })

      const first = await order(running, '{"item":"book","qty":1}')
      const onExpress = await order(express, '{ "qty": 1, "item": "book" }')
      await express.close()

      expect(first.status).toBe(201)
      expect(onExpress.headers.get('idempotent-replayed')).toBe('true')
      expect(onExpress.body.equals(first.body)).toBe(true)
    })
  })

  describe('response capture', () => {
    it('replays a streamed body byte for byte, with the allowlisted headers only', async () => {
      const { app, runs } = await appWith((ctx) => {
        ctx.status = 202
        ctx.set({ 'content-type': 'application/json', location: '/jobs/1', 'x-trace': 't1' })
        ctx.body = Readable.from([Buffer.from('{"part":'), Buffer.from([0x31, 0xc3]), Buffer.from([0xa9, 0x7d])])
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
      const { app, runs } = await appWith((ctx) => {
        ctx.status = 204
      })
      const key = randomUUID()

      const first = await post(app, key)
      const second = await post(app, key)

      expect(first.status).toBe(204)
      expect(second.status).toBe(204)
      expect(second.headers.get('idempotent-replayed')).toBe('true')
      expect(second.body.byteLength).toBe(0)
      expect(runs()).toBe(1)
    })

    it('records what the handler writes itself with ctx.respond = false', async () => {
      const { app, runs } = await appWith((ctx) => {
        ctx.respond = false
        ctx.res.writeHead(201, { 'content-type': 'text/plain' })
        ctx.res.write('one,')
        ctx.res.end('two')
      })
      const key = randomUUID()

      const first = await post(app, key)
      const second = await post(app, key)

      expect(first.text).toBe('one,two')
      expect(second.status).toBe(201)
      expect(second.headers.get('idempotent-replayed')).toBe('true')
      expect(second.text).toBe('one,two')
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
      const { app } = await appWith(
        (ctx) => {
          ctx.body = { ok: true }
        },
        { store: slow },
      )

      await post(app, randomUUID())
      events.push('response received')

      expect(events).toEqual(['completion written', 'response received'])
    })

    it('sends 503 store-unavailable instead of the handler response, keeping headers set before the handler, when the completion cannot be written', async () => {
      const failing = faultyStore(backing.store)
      failing.block('complete', 'not-sent')
      const errors = vi.spyOn(console, 'error').mockImplementation(() => {})
      const { app } = await appWith(
        (ctx) => {
          ctx.set('x-handler', 'yes')
          ctx.status = 201
          ctx.body = { secret: 'the handler answer' }
        },
        {
          store: failing,
          recordRetryMs: 100,
          before: [
            async (ctx, next) => {
              ctx.set('x-request-id', 'r1')
              await next()
            },
          ],
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
      // Without a logger on ctx.log, the layer's error line goes to the console.
      expect(errors).toHaveBeenCalledWith('idempotency store failed', expect.anything())
    })

    it('ends the execution as unknown when the body stream fails while Koa pipes it', async () => {
      const { app, runs } = await appWith((ctx) => {
        ctx.body = new Readable({
          read() {
            this.push('partial ')
            this.destroy(new Error('the source broke'))
          },
        })
      })
      const key = randomUUID()

      await post(app, key).catch(() => undefined)
      const retry = await post(app, key)

      expect(retry.json()).toMatchObject({ code: 'IDEMPOTENCY_RECOVERY_REQUIRED' })
      expect(runs()).toBe(1)
    })

    it('stores the answer of a handler that finishes after the client left, so the retry replays it', async () => {
      const left = gate()
      const outcomes: string[] = []
      const { app, runs } = await appWith(
        async (ctx) => {
          await left.promise
          ctx.body = { late: true }
        },
        {
          before: [
            async (ctx, next) => {
              const line = (object: { idempotency?: { outcome?: string } }) =>
                void (object.idempotency?.outcome && outcomes.push(object.idempotency.outcome))
              ;(ctx as { log?: object }).log = { info: line, warn: line, error: line }
              await next()
            },
          ],
        },
      )
      const key = randomUUID()
      const aborted = new AbortController()
      const first = send(app, 'POST', '/op', { headers: keyed(key), body: {}, signal: aborted.signal })
      await vi.waitFor(() => expect(runs()).toBe(1))

      aborted.abort()
      await expect(first).rejects.toThrow()
      // The socket is gone before the handler answers: Koa sees the response unwritable.
      await sleep(50)
      left.open()
      await vi.waitFor(() => expect(outcomes).toContain('EXECUTED'))
      const retry = await post(app, key, {})

      expect(retry.status).toBe(200)
      expect(retry.headers.get('idempotent-replayed')).toBe('true')
      expect(retry.json()).toEqual({ late: true })
      expect(runs()).toBe(1)
    })
  })
})
