/**
 * Express-only behaviour of the middleware: option errors, error classification through
 * `next(err)` and async throws, `req.idempotency`, router-level mounting, response capture.
 * The docs/design.md §5 table for every adapter is in test/http/table.test.ts.
 */
import { randomUUID } from 'node:crypto'
import { createServer } from 'node:http'
import { pipeline, Readable } from 'node:stream'
import express, { type Express, type RequestHandler } from 'express'
import Fastify from 'fastify'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import idempotency, { type IdempotencyInfo, memoryStore } from '../../plugins/express/index.js'
import fastifyIdempotency from '../../plugins/fastify/index.js'
import type { IdempotencyStore } from '../../src/core/store.js'
import { listen as listenServer, type RunningApp, send } from '../helpers/adapters.js'
import { SECRET } from '../helpers/example-app.js'
import { gate } from '../helpers/executor-harness.js'
import { faultyStore } from '../helpers/faulty-store.js'
import { sleep } from '../helpers/sleep.js'
import { STORES, type TestStore } from '../helpers/stores.js'

const secrets = { current: 1, keys: { 1: SECRET } }

/** Listens on a free port; closing also drops keep-alive connections. */
async function listen(app: Express): Promise<RunningApp> {
  const server = createServer(app)
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

/** Express's default error answer, but as JSON. */
const jsonErrors: express.ErrorRequestHandler = (error, _req, res, _next) => {
  const status = (error as { status?: number }).status ?? 500
  res.status(status).json({ message: (error as Error).message })
}

describe('Express middleware options', () => {
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
  ])('throws the same coded error as the Fastify plugin when the options have %s', async (_case, options) => {
    const app = Fastify()
    const fastifyError = await app
      .register(fastifyIdempotency, options as never)
      .ready()
      .then(
        () => undefined,
        (error: unknown) => error,
      )
    await app.close()

    let expressError: unknown
    try {
      idempotency(options as never)
    } catch (error) {
      expressError = error
    }

    expect(fastifyError).toBeDefined()
    expect(expressError).toMatchObject({
      name: (fastifyError as Error).name,
      code: (fastifyError as { code: string }).code,
      message: (fastifyError as Error).message,
    })
  })

  it('validates route options when idem(...) is called, with the Fastify route error minus its route prefix', async () => {
    const idem = idempotency({ store, secrets, anonymous: true })
    const app = Fastify()
    await app.register(fastifyIdempotency, { store, secrets, anonymous: true })
    let fastifyError: Error | undefined
    try {
      app.post('/x', { config: { idempotency: { leaseMs: 'soon' as never } } }, async () => 'x')
    } catch (error) {
      fastifyError = error as Error
    }
    await app.close()

    expect(() => idem({ leaseMs: 'soon' as never })).toThrow(fastifyError?.message.replace('route /x: ', ''))
    expect(() => idem({ leaseMs: 'soon' as never })).toThrow(
      expect.objectContaining({ code: 'ERR_IDEM_INVALID_OPTION' }),
    )
    expect(() => idem({ colour: 'red' } as never)).toThrow(/colour/)
    expect(() => idem('yes' as never)).toThrow(/idempotency/)
  })
})

describe.each(STORES)('Express middleware on the %s store', (_name, create) => {
  let backing: TestStore
  let running: RunningApp | undefined

  beforeEach(async () => {
    backing = await create()
  })

  afterEach(async () => {
    await running?.close()
    running = undefined
    await backing.teardown()
  })

  /** An app with one idempotent POST /op whose handler is `handler`; runs are counted. */
  async function appWith(
    handler: RequestHandler,
    options: { errors?: boolean; store?: IdempotencyStore; recordRetryMs?: number } = {},
  ): Promise<{ app: RunningApp; runs: () => number }> {
    let runs = 0
    const app = express()
    app.use(express.json())
    const idem = idempotency({
      store: options.store ?? backing.store,
      secrets,
      anonymous: true,
      recordRetryMs: options.recordRetryMs,
    })
    app.post('/op', idem(), (req, res, next) => {
      runs++
      return handler(req, res, next)
    })
    if (options.errors !== false) app.use(idem.errors)
    app.use(jsonErrors)
    running = await listen(app)
    return { app: running, runs: () => runs }
  }

  const post = (app: RunningApp, key: string, body: unknown = { a: 1 }, path = '/op') =>
    send(app, 'POST', path, { headers: keyed(key), body })

  describe('error classification', () => {
    /** The two ways an Express handler hands an error on. */
    const ERROR_PATHS: ReadonlyArray<readonly [string, (error: Error) => RequestHandler]> = [
      ['passed to next(err)', (error) => (_req, _res, next) => next(error)],
      [
        'thrown by an async handler',
        (error) => async () => {
          throw error
        },
      ],
    ]

    it.each(ERROR_PATHS)('lets a retry run again when an error marked retryable is %s', async (_case, handlerFor) => {
      const { app, runs } = await appWith(handlerFor(httpError(503, true)))
      const key = randomUUID()

      const first = await post(app, key)
      const retry = await post(app, key)

      expect(first.status).toBe(503)
      expect(first.json()).toEqual({ message: 'failed with 503' })
      expect(retry.status).toBe(503)
      expect(runs()).toBe(2)
    })

    it.each(ERROR_PATHS)(
      'answers retries 503 recovery-required when an unmarked error is %s',
      async (_case, handlerFor) => {
        const { app, runs } = await appWith(handlerFor(httpError(500)))
        const key = randomUUID()

        const first = await post(app, key)
        const retry = await post(app, key)

        expect(first.status).toBe(500)
        expect(retry.status).toBe(503)
        expect(retry.json()).toMatchObject({ code: 'IDEMPOTENCY_RECOVERY_REQUIRED' })
        expect(runs()).toBe(1)
      },
    )

    it('stores and replays the error answer when the error carries a 4xx status', async () => {
      const { app, runs } = await appWith((_req, _res, next) => next(httpError(402)))
      const key = randomUUID()

      const first = await post(app, key)
      const retry = await post(app, key)

      expect(first.status).toBe(402)
      expect(retry.status).toBe(402)
      expect(retry.headers.get('idempotent-replayed')).toBe('true')
      expect(retry.body.equals(first.body)).toBe(true)
      expect(runs()).toBe(1)
    })

    it('classifies by the written status alone, on the safe side, when idem.errors is not mounted', async () => {
      const { app, runs } = await appWith((_req, _res, next) => next(httpError(503, true)), { errors: false })
      const key = randomUUID()

      await post(app, key)
      const retry = await post(app, key)

      expect(retry.json()).toMatchObject({ code: 'IDEMPOTENCY_RECOVERY_REQUIRED' })
      expect(runs()).toBe(1)
    })

    it('lets a retry run again when the error answer has a retryable status (429)', async () => {
      const { app, runs } = await appWith((_req, _res, next) => next(httpError(429)), { errors: false })
      const key = randomUUID()

      await post(app, key)
      const retry = await post(app, key)

      expect(retry.status).toBe(429)
      expect(runs()).toBe(2)
    })
  })

  describe('req.idempotency', () => {
    it('holds the fencing token, signal and digest prefix when the handler runs, and null on other routes', async () => {
      let seen: IdempotencyInfo | null | undefined
      const app = express()
      app.use(express.json())
      const idem = idempotency({ store: backing.store, secrets, anonymous: true })
      app.post('/op', idem(), (req, res) => {
        seen = req.idempotency
        res.json({ ok: true })
      })
      app.post('/optional', idem({ required: false }), (req, res) => {
        res.json({ idempotency: req.idempotency })
      })
      app.post('/plain', (req, res) => {
        res.json({ idempotency: req.idempotency })
      })
      running = await listen(app)

      await post(running, randomUUID())
      const plain = await send(running, 'POST', '/plain')
      const optional = await send(running, 'POST', '/optional')

      expect(seen).toMatchObject({ fencingToken: 1, replayed: false, digest: expect.stringMatching(/^[0-9a-f]{12}$/) })
      expect(seen?.signal).toBeInstanceOf(AbortSignal)
      expect(seen?.signal.aborted).toBe(false)
      expect(plain.json()).toEqual({ idempotency: null })
      expect(optional.json()).toEqual({ idempotency: null })
    })

    it('marks the request replayed when a stored response is sent', async () => {
      const seen: (IdempotencyInfo | null)[] = []
      const app = express()
      app.use(express.json())
      const idem = idempotency({ store: backing.store, secrets, anonymous: true })
      app.use((req, res, next) => {
        res.on('finish', () => seen.push(req.idempotency))
        next()
      })
      app.post('/op', idem(), (_req, res) => {
        res.json({ ok: true })
      })
      running = await listen(app)
      const key = randomUUID()

      await post(running, key)
      await post(running, key)

      expect(seen.map((info) => info?.replayed)).toEqual([false, true])
      expect(seen[1]?.digest).toBe(seen[0]?.digest)
    })
  })

  describe('mounting', () => {
    it('protects the unsafe methods below a router and lets reads through when mounted with router.use', async () => {
      let runs = 0
      const router = express.Router()
      const idem = idempotency({ store: backing.store, secrets, anonymous: true })
      router.use(express.json(), idem())
      router.post('/orders', (_req, res) => {
        runs++
        res.status(201).json({ n: runs })
      })
      router.get('/orders', (req, res) => {
        res.json({ runs, idempotency: req.idempotency })
      })
      const app = express()
      app.use('/api', router)
      running = await listen(app)
      const key = randomUUID()

      const missing = await send(running, 'POST', '/api/orders', {
        headers: { 'content-type': 'application/json' },
        body: {},
      })
      const first = await post(running, key, {}, '/api/orders')
      const replay = await post(running, key, {}, '/api/orders')
      const read = await send(running, 'GET', '/api/orders')

      expect(missing.status).toBe(400)
      expect(missing.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_MISSING' })
      expect(first.status).toBe(201)
      expect(replay.headers.get('idempotent-replayed')).toBe('true')
      expect(replay.body.equals(first.body)).toBe(true)
      expect(read.json()).toEqual({ runs: 1, idempotency: null })
    })

    it('uses METHOD <mount path> as the operation when mounted on a router, so a key reused on another path below it is a 422', async () => {
      const router = express.Router()
      const idem = idempotency({ store: backing.store, secrets, anonymous: true })
      router.use(express.json(), idem())
      router.post('/a', (_req, res) => {
        res.json({ route: 'a' })
      })
      router.post('/b', (_req, res) => {
        res.json({ route: 'b' })
      })
      const app = express()
      app.use('/api', router)
      running = await listen(app)
      const key = randomUUID()

      await post(running, key, {}, '/api/a')
      const other = await post(running, key, {}, '/api/b')

      expect(other.status).toBe(422)
      expect(other.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED' })
    })

    it('uses the route pattern under the mount path as the operation when mounted on a route', async () => {
      const router = express.Router()
      // One fingerprint for every request: only the operation tells two requests apart here.
      const idem = idempotency({
        store: backing.store,
        secrets,
        anonymous: true,
        fingerprint: () => `f1:${'0'.repeat(64)}`,
      })
      router.post('/accounts/:id/deposits', express.json(), idem(), (req, res) => {
        res.json({ route: 'deposits', id: req.params.id })
      })
      router.post('/accounts/:id/withdrawals', express.json(), idem(), (req, res) => {
        res.json({ route: 'withdrawals', id: req.params.id })
      })
      const app = express()
      app.use('/v1', router)
      running = await listen(app)
      const key = randomUUID()

      const one = await post(running, key, {}, '/v1/accounts/1/deposits')
      const two = await post(running, key, {}, '/v1/accounts/2/deposits')
      const withdrawal = await post(running, key, {}, '/v1/accounts/1/withdrawals')

      expect(one.json()).toEqual({ route: 'deposits', id: '1' })
      // POST /v1/accounts/:id/deposits for both paths: one scope, so the second replays the first.
      expect(two.headers.get('idempotent-replayed')).toBe('true')
      expect(two.json()).toEqual({ route: 'deposits', id: '1' })
      // Another route pattern is another scope.
      expect(withdrawal.headers.get('idempotent-replayed')).toBeNull()
      expect(withdrawal.json()).toEqual({ route: 'withdrawals', id: '1' })
    })

    it('guards a request once when the middleware is mounted on the router and on the route', async () => {
      let runs = 0
      const app = express()
      const idem = idempotency({ store: backing.store, secrets, anonymous: true })
      app.use(express.json(), idem())
      app.post('/op', idem(), (_req, res) => {
        runs++
        res.json({ runs })
      })
      running = await listen(app)
      const key = randomUUID()

      const first = await post(running, key)
      const second = await post(running, key)

      expect(first.json()).toEqual({ runs: 1 })
      expect(second.headers.get('idempotent-replayed')).toBe('true')
      expect(runs).toBe(1)
    })

    it('answers 415 IDEMPOTENCY_BODY_UNREAD and runs nothing when no body parser read the body', async () => {
      let runs = 0
      const app = express()
      const idem = idempotency({ store: backing.store, secrets, anonymous: true })
      app.post('/op', idem(), (_req, res) => {
        runs++
        res.json({ ok: true })
      })
      running = await listen(app)

      const response = await send(running, 'POST', '/op', {
        headers: { 'idempotency-key': randomUUID(), 'content-type': 'text/plain' },
        body: 'a body nobody parsed',
      })

      expect(response.status).toBe(415)
      expect(response.json()).toMatchObject({ code: 'IDEMPOTENCY_BODY_UNREAD' })
      expect(runs).toBe(0)
    })
  })

  describe('response capture', () => {
    it('replays a response written with writeHead and three writes byte for byte, binary bytes included', async () => {
      const chunks = [Buffer.from([0x00, 0xff, 0xfe]), Buffer.from('middle'), Buffer.from([0x80, 0x0a])]
      const { app, runs } = await appWith(async (_req, res) => {
        res.writeHead(201, { 'content-type': 'application/octet-stream', location: '/blobs/1', 'x-trace': 't' })
        for (const chunk of chunks) {
          res.write(chunk)
          await new Promise((resolve) => setImmediate(resolve))
        }
        res.end()
      })
      const key = randomUUID()

      const first = await post(app, key)
      const second = await post(app, key)

      expect(first.status).toBe(201)
      expect(first.body.equals(Buffer.concat(chunks))).toBe(true)
      expect(first.headers.get('x-trace')).toBe('t')
      expect(second.status).toBe(201)
      expect(second.headers.get('idempotent-replayed')).toBe('true')
      expect(second.headers.get('content-type')).toBe('application/octet-stream')
      expect(second.headers.get('location')).toBe('/blobs/1')
      expect(second.headers.get('x-trace')).toBeNull()
      expect(second.body.equals(first.body)).toBe(true)
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
        (_req, res) => {
          res.json({ ok: true })
        },
        { store: slow },
      )

      await post(app, randomUUID())
      events.push('response received')

      expect(events).toEqual(['completion written', 'response received'])
    })

    it('sends 503 store-unavailable instead of the handler response when the completion cannot be written', async () => {
      const failing = faultyStore(backing.store)
      failing.block('complete', 'not-sent')
      const { app } = await appWith(
        (_req, res) => {
          res.status(201).set('x-handler', 'yes').json({ secret: 'the handler answer' })
        },
        { store: failing, recordRetryMs: 100 },
      )

      const response = await post(app, randomUUID())

      expect(response.status).toBe(503)
      expect(response.headers.get('content-type')).toBe('application/problem+json; charset=utf-8')
      expect(response.json()).toMatchObject({ code: 'IDEMPOTENCY_STORE_UNAVAILABLE' })
      expect(response.text).not.toContain('the handler answer')
      expect(Number(response.headers.get('retry-after'))).toBeGreaterThanOrEqual(1)
    })

    it('stores the answer of a handler that finishes after the client left, so the retry replays it', async () => {
      const closed = gate()
      const recorded = gate()
      const app = express()
      app.use((req, _res, next) => {
        req.log = {
          info: (object) => {
            if (JSON.stringify(object).includes('"outcome":"EXECUTED"')) recorded.open()
          },
          warn: () => {},
          error: () => {},
        }
        next()
      })
      app.use(express.json())
      const idem = idempotency({ store: backing.store, secrets, anonymous: true })
      let runs = 0
      app.post('/op', idem(), async (_req, res) => {
        runs++
        res.on('close', () => closed.open())
        await closed.promise
        res.json({ late: true })
      })
      running = await listen(app)
      const key = randomUUID()
      const aborted = new AbortController()
      const first = send(running, 'POST', '/op', { headers: keyed(key), body: {}, signal: aborted.signal })
      await new Promise<void>((resolve) => {
        const poll = () => (runs > 0 ? resolve() : setImmediate(poll))
        poll()
      })

      aborted.abort()
      await expect(first).rejects.toThrow()
      await recorded.promise
      const retry = await post(running, key, {})

      expect(retry.status).toBe(200)
      expect(retry.headers.get('idempotent-replayed')).toBe('true')
      expect(retry.json()).toEqual({ late: true })
      expect(runs).toBe(1)
    })

    it('ends the execution as unknown when the handler destroys the response (a failing pipeline)', async () => {
      const app = express()
      app.use(express.json())
      const idem = idempotency({ store: backing.store, secrets, anonymous: true })
      let runs = 0
      app.post('/op', idem(), (_req, res) => {
        runs++
        res.type('text/plain')
        const failing = new Readable({
          read() {
            this.push('partial ')
            this.destroy(new Error('the source broke'))
          },
        })
        pipeline(failing, res, () => {})
      })
      running = await listen(app)
      const key = randomUUID()

      await expect(post(running, key, {})).rejects.toThrow()
      // The outcome is recorded in the background: a 409 until it is.
      let retry = await post(running, key, {})
      for (let i = 0; i < 50 && retry.status === 409; i++) {
        await sleep(10)
        retry = await post(running, key, {})
      }

      expect(retry.status).toBe(503)
      expect(retry.json()).toMatchObject({ code: 'IDEMPOTENCY_RECOVERY_REQUIRED' })
      expect(runs).toBe(1)
    })
  })
})
