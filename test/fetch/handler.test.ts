/**
 * Behaviour of `idemkit/fetch` of its own: option errors, `idempotencyOf(request)`, the handler's
 * own arguments and Request passed through, reads let through, the body read once from a clone,
 * response capture of a streamed Response, and what a thrown error, a failing stream and a client
 * that leaves do. Served on Node through @hono/node-server's `getRequestListener`, and called with
 * a Request and no server at all. The docs/design.md §5 table for every adapter is in
 * test/http/table.test.ts; the same table under Bun and Deno in test/runtimes.
 */
import { randomUUID } from 'node:crypto'
import { createServer } from 'node:http'
import { getRequestListener } from '@hono/node-server'
import { afterEach, beforeEach, describe, expect, expectTypeOf, it, vi } from 'vitest'
import { idempotency as expressIdempotency } from '../../plugins/express/index.js'
import idempotency, {
  fetchIdempotency,
  type IdempotencyInfo,
  idempotencyOf,
  memoryStore,
  withIdempotency,
} from '../../plugins/fetch/index.js'
import type { IdempotencyStore } from '../../src/core/store.js'
import { honoAdapter, listen, type RunningApp, send, sendRaw } from '../helpers/adapters.js'
import { SECRET } from '../helpers/example-app.js'
import { gate } from '../helpers/executor-harness.js'
import { faultyStore } from '../helpers/faulty-store.js'
import { sleep } from '../helpers/sleep.js'
import { STORES, type TestStore } from '../helpers/stores.js'

const secrets = { current: 1, keys: { 1: SECRET } }

type Handler = (request: Request) => Response | Promise<Response>

/** Serves a handler on a free port through @hono/node-server; closing also drops keep-alive connections. */
function serve(handler: Handler): Promise<RunningApp> {
  return listen(createServer(getRequestListener(handler)))
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

describe('idemkit/fetch options', () => {
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
    const fetch = caught(() => idempotency(options as never))
    const wrapped = caught(() => withIdempotency(() => new Response(), options as never))

    expect(express).toBeDefined()
    expect(fetch).toMatchObject({ name: express?.name, code: express?.code, message: express?.message })
    expect(wrapped).toMatchObject({ name: express?.name, code: express?.code, message: express?.message })
  })

  it('validates route options when a handler is wrapped, and refuses what is not a handler', () => {
    const idem = idempotency({ store, secrets, anonymous: true })
    const handler = () => new Response()

    expect(() => idem(handler, { leaseMs: 'soon' as never })).toThrow(
      expect.objectContaining({ code: 'ERR_IDEM_INVALID_OPTION', message: expect.stringMatching(/leaseMs/) }),
    )
    expect(() => idem(handler, { colour: 'red' } as never)).toThrow(/colour/)
    expect(() => idem(handler, { transaction: true })).toThrow(/transaction/)
    expect(() => idem({ leaseMs: 1 } as never)).toThrow(TypeError)
  })

  it('is the default export and the named fetchIdempotency', () => {
    expect(fetchIdempotency).toBe(idempotency)
  })

  it("keeps the handler's own signature: its Request type and the arguments after it", () => {
    interface RouteContext {
      params: Promise<{ id: string }>
    }
    const idem = idempotency({ store, secrets, anonymous: true })
    const handler = async (_request: Request, _context: RouteContext) => new Response()

    const wrapped = idem(handler)

    expectTypeOf(wrapped).parameters.toEqualTypeOf<[Request, RouteContext]>()
    expectTypeOf(wrapped).returns.toEqualTypeOf<Promise<Response>>()
  })
})

describe.each(STORES)('idemkit/fetch on the %s store', (_name, create) => {
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

  /** A server whose POST /op is `handler` wrapped with the given options; runs are counted. */
  async function appWith(
    handler: Handler,
    options: { store?: IdempotencyStore; recordRetryMs?: number; leaseMs?: number } = {},
  ): Promise<{ app: RunningApp; runs: () => number }> {
    let runs = 0
    const idem = idempotency({ store: options.store ?? backing.store, secrets, anonymous: true, ...options })
    running = await serve(
      idem((request) => {
        runs++
        return handler(request)
      }),
    )
    return { app: running, runs: () => runs }
  }

  const post = (app: RunningApp, key: string, body: unknown = { a: 1 }, path = '/op') =>
    send(app, 'POST', path, { headers: keyed(key), body })

  describe('what the handler throws or returns', () => {
    it('lets a retry run again when the handler throws an error marked retryable, and throws it on', async () => {
      const { app, runs } = await appWith(() => {
        throw httpError(503, true)
      })
      const key = randomUUID()

      const first = await post(app, key)
      const retry = await post(app, key)

      // The server's own answer to a thrown error (@hono/node-server: 500).
      expect(first.status).toBe(500)
      expect(retry.status).toBe(500)
      expect(retry.headers.get('content-type') ?? '').not.toMatch(/problem/)
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

      await post(app, key)
      const retry = await post(app, key)

      expect(retry.json()).toMatchObject({ code: 'IDEMPOTENCY_RECOVERY_REQUIRED' })
      expect(runs()).toBe(1)
    })

    it('stores and replays an error answer the handler returns with a 4xx status', async () => {
      const { app, runs } = await appWith(() => Response.json({ message: 'card declined' }, { status: 402 }))
      const key = randomUUID()

      const first = await post(app, key)
      const retry = await post(app, key)

      expect(first.status).toBe(402)
      expect(retry.status).toBe(402)
      expect(retry.headers.get('idempotent-replayed')).toBe('true')
      expect(retry.body.equals(first.body)).toBe(true)
      expect(runs()).toBe(1)
    })

    it('lets a retry run again when the handler answers a retryable status (429)', async () => {
      const { app, runs } = await appWith(() => Response.json({ slow: 'down' }, { status: 429 }))
      const key = randomUUID()

      await post(app, key)
      const retry = await post(app, key)

      expect(retry.status).toBe(429)
      expect(runs()).toBe(2)
    })

    it('ends the execution as unknown and throws a TypeError when the handler returns no Response', async () => {
      const idem = idempotency({ store: backing.store, secrets, anonymous: true })
      const handler = idem((() => ({ status: 201 })) as never)
      const request = () => new Request('http://x/op', { method: 'POST', headers: keyed('k1'), body: '{}' })

      const first = handler(request())
      await expect(first).rejects.toThrow(TypeError)
      const retry = await handler(request())

      expect(retry.status).toBe(503)
      expect(await retry.json()).toMatchObject({ code: 'IDEMPOTENCY_RECOVERY_REQUIRED' })
    })
  })

  describe('idempotencyOf(request)', () => {
    it('holds the fencing token, signal and digest prefix while the handler runs, and null where nothing was protected', async () => {
      let seen: IdempotencyInfo | null | undefined
      const idem = idempotency({ store: backing.store, secrets, anonymous: true })
      const guarded = idem((request) => {
        seen = idempotencyOf(request)
        return Response.json({ ok: true })
      })
      const optional = idem((request) => Response.json({ idempotency: idempotencyOf(request) }), { required: false })
      running = await serve((request) =>
        new URL(request.url).pathname === '/op' ? guarded(request) : optional(request),
      )

      await post(running, randomUUID())
      const withoutKey = await send(running, 'POST', '/optional')

      expect(seen).toMatchObject({ fencingToken: 1, replayed: false, digest: expect.stringMatching(/^[0-9a-f]{12}$/) })
      expect(seen?.signal).toBeInstanceOf(AbortSignal)
      expect(seen?.signal.aborted).toBe(false)
      expect(withoutKey.json()).toEqual({ idempotency: null })
      expect(idempotencyOf(new Request('http://x/'))).toBeNull()
    })

    it('marks the request replayed when a stored response is sent', async () => {
      const idem = idempotency({ store: backing.store, secrets, anonymous: true })
      const handler = idem(() => Response.json({ ok: true }))
      const seen: (IdempotencyInfo | null)[] = []
      running = await serve(async (request) => {
        const response = await handler(request)
        seen.push(idempotencyOf(request))
        return response
      })
      const key = randomUUID()

      await post(running, key)
      await post(running, key)

      expect(seen.map((info) => info?.replayed)).toEqual([false, true])
      expect(seen[1]?.digest).toBe(seen[0]?.digest)
    })
  })

  describe('what passes through', () => {
    it('lets GET, HEAD and OPTIONS through untouched, without a key', async () => {
      const { app, runs } = await appWith((request) =>
        Response.json({ method: request.method, idempotency: idempotencyOf(request) }),
      )

      const get = await send(app, 'GET', '/op')
      const head = await send(app, 'HEAD', '/op')
      const options = await send(app, 'OPTIONS', '/op')
      const post = await send(app, 'POST', '/op')

      expect(get.json()).toEqual({ method: 'GET', idempotency: null })
      expect(head.status).toBe(200)
      expect(options.json()).toEqual({ method: 'OPTIONS', idempotency: null })
      expect(post.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_MISSING' })
      expect(runs()).toBe(3)
    })

    it("hands the handler the runtime's own Request object and every argument after it, as Next.js passes { params }", async () => {
      class RouteRequest extends Request {
        readonly route = 'accounts'
      }
      const seen: unknown[] = []
      const idem = idempotency({ store: backing.store, secrets, anonymous: true })
      const handler = idem(async (request: RouteRequest, context: { params: Promise<{ id: string }> }) => {
        seen.push(request.route, (await context.params).id, await request.json())
        return Response.json({ ok: true }, { status: 201 })
      })
      const request = new RouteRequest('http://x/accounts/7', { method: 'POST', headers: keyed('k2'), body: '{"a":1}' })

      const response = await handler(request, { params: Promise.resolve({ id: '7' }) })

      expect(response.status).toBe(201)
      expect(seen).toEqual(['accounts', '7', { a: 1 }])
    })

    it('guards a request once when it goes through two wrapped handlers', async () => {
      let runs = 0
      const idem = idempotency({ store: backing.store, secrets, anonymous: true })
      const inner = idem(() => {
        runs++
        return Response.json({ n: runs })
      })
      const { app } = await appWith(idem(inner))
      const key = randomUUID()

      const first = await post(app, key)
      const second = await post(app, key)

      expect(first.json()).toEqual({ n: 1 })
      expect(second.headers.get('idempotent-replayed')).toBe('true')
      expect(runs).toBe(1)
    })

    it("scopes a key by the request's path by default, and by the handler's operation when it names one", async () => {
      const idem = idempotency({ store: backing.store, secrets, anonymous: true })
      let runs = 0
      const byPath = idem(() => Response.json({ n: ++runs }, { status: 201 }))
      const named = idem(() => Response.json({ n: ++runs }, { status: 201 }), { operation: 'POST /named/:id' })
      running = await serve((request) => (request.url.includes('/named/') ? named(request) : byPath(request)))
      const key = randomUUID()

      const one = await post(running, key, { a: 1 }, '/paths/1')
      const two = await post(running, key, { a: 1 }, '/paths/2')
      const namedOne = await post(running, key, { a: 1 }, '/named/1')
      const namedTwo = await post(running, key, { a: 1 }, '/named/2')

      expect([one.status, two.status, namedOne.status]).toEqual([201, 201, 201])
      expect(two.headers.get('idempotent-replayed')).toBeNull()
      expect(namedTwo.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED' })
      expect(runs).toBe(3)
    })
  })

  describe('the request body', () => {
    it('leaves the body readable by the handler and fingerprints JSON as a value, not as bytes', async () => {
      const bodies: unknown[] = []
      const { app, runs } = await appWith(async (request) => {
        bodies.push(await request.json())
        return Response.json({ ok: true }, { status: 201 })
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
      const { app, runs } = await appWith(
        async (request) => new Response(`got ${await request.text()}`, { status: 201 }),
      )
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
      const { app, runs } = await appWith(async (request) => Response.json(await request.json(), { status: 201 }))
      const key = randomUUID()

      const broken = await post(app, key, '{"a":')
      const valid = await post(app, key, { a: 1 })

      expect(broken.status).toBe(400)
      expect(broken.json()).toMatchObject({ code: 'IDEMPOTENCY_BODY_INVALID' })
      expect(valid.status).toBe(201)
      expect(valid.headers.get('idempotent-replayed')).toBeNull()
      expect(runs()).toBe(1)
    })

    it("uses the handler's own fingerprint function instead of the body", async () => {
      let runs = 0
      const idem = idempotency({ store: backing.store, secrets, anonymous: true })
      running = await serve(
        idem(
          async (request) => {
            runs++
            return Response.json({ body: await request.text() })
          },
          { fingerprint: (request) => request.headers.get('x-order') ?? '' },
        ),
      )
      const key = randomUUID()

      const first = await send(running, 'POST', '/op', { headers: keyed(key, { 'x-order': '7' }), body: 'one' })
      const second = await send(running, 'POST', '/op', { headers: keyed(key, { 'x-order': '7' }), body: 'two' })

      expect(first.json()).toEqual({ body: 'one' })
      expect(second.headers.get('idempotent-replayed')).toBe('true')
      expect(second.json()).toEqual({ body: 'one' })
      expect(runs).toBe(1)
    })

    it('refuses a key sent on two header lines, which the Fetch request holds as one list', async () => {
      const { app, runs } = await appWith(() => Response.json({ ok: true }))

      const response = await sendRaw(
        app,
        ['POST /op HTTP/1.1', `Host: 127.0.0.1:${app.port}`, 'Idempotency-Key: a', 'Idempotency-Key: a'],
        '{}',
      )

      expect(response.status).toBe(400)
      expect(JSON.parse(response.body)).toMatchObject({ code: 'IDEMPOTENCY_KEY_INVALID' })
      expect(runs()).toBe(0)
    })

    it('replays on Hono the answer this handler stored for the same request, the fingerprints being the same', async () => {
      const hono = await honoAdapter.example(backing.store)
      const idem = idempotency({
        store: backing.store,
        secrets,
        principal: (request) => request.headers.get('authorization')?.replace('Bearer ', ''),
      })
      running = await serve(
        idem(async (request) =>
          Response.json({ id: randomUUID(), ...((await request.json()) as object) }, { status: 201 }),
        ),
      )
      const key = randomUUID()
      const order = (app: RunningApp, body: string) =>
        send(app, 'POST', '/orders?src=x', {
          headers: { authorization: 'Bearer alice', 'content-type': 'application/json', 'idempotency-key': key },
          body,
        })

      const first = await order(running, '{"item":"book","qty":1}')
      const onHono = await order(hono, '{ "qty": 1, "item": "book" }')
      await hono.close()

      expect(first.status).toBe(201)
      expect(onHono.headers.get('idempotent-replayed')).toBe('true')
      expect(onHono.body.equals(first.body)).toBe(true)
    })
  })

  describe('response capture', () => {
    it('replays a streamed response byte for byte, with the allowlisted headers only', async () => {
      const { app, runs } = await appWith(() => {
        const chunks = [Buffer.from('{"part":'), Buffer.from([0x31, 0xc3]), Buffer.from([0xa9, 0x7d])]
        const body = new ReadableStream<Uint8Array>({
          async pull(controller) {
            const chunk = chunks.shift()
            await sleep(5)
            if (chunk === undefined) controller.close()
            else controller.enqueue(chunk)
          },
        })
        return new Response(body, {
          status: 202,
          headers: { 'content-type': 'application/json', location: '/jobs/1', 'x-trace': 't1' },
        })
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
      const { app, runs } = await appWith(() => new Response(null, { status: 204 }))
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
      const { app } = await appWith(() => Response.json({ ok: true }), { store: slow })

      await post(app, randomUUID())
      events.push('response received')

      expect(events).toEqual(['completion written', 'response received'])
    })

    it('sends 503 store-unavailable instead of the handler response when the completion cannot be written', async () => {
      const failing = faultyStore(backing.store)
      failing.block('complete', 'not-sent')
      const errors = vi.spyOn(console, 'error').mockImplementation(() => {})
      const { app } = await appWith(
        () => Response.json({ secret: 'the handler answer' }, { status: 201, headers: { 'x-handler': 'yes' } }),
        { store: failing, recordRetryMs: 100 },
      )

      const response = await post(app, randomUUID())

      expect(response.status).toBe(503)
      expect(response.headers.get('content-type')).toBe('application/problem+json; charset=utf-8')
      expect(response.json()).toMatchObject({ code: 'IDEMPOTENCY_STORE_UNAVAILABLE' })
      expect(response.text).not.toContain('the handler answer')
      expect(response.headers.get('x-handler')).toBeNull()
      expect(Number(response.headers.get('retry-after'))).toBeGreaterThanOrEqual(1)
      // No logger comes with a Request: the layer's error line goes to the console.
      expect(errors).toHaveBeenCalledWith('idempotency store failed', expect.anything())
    })

    it('warns on the console when a lease renewal fails', async () => {
      const warnings = vi.spyOn(console, 'warn').mockImplementation(() => {})
      const failing = faultyStore(backing.store)
      const { app } = await appWith(
        async () => {
          failing.block('renew', 'not-sent')
          await sleep(180)
          return Response.json({ ok: true })
        },
        { store: failing, leaseMs: 300 },
      )

      const response = await post(app, randomUUID())

      expect(response.status).toBe(200)
      expect(warnings).toHaveBeenCalledWith('idempotency lease renewal failed', expect.anything())
    })

    it('ends the execution as unknown when the response stream fails while it is read', async () => {
      const { app, runs } = await appWith(() => {
        const body = new ReadableStream<Uint8Array>({
          start(controller) {
            controller.enqueue(Buffer.from('partial '))
            controller.error(new Error('the source broke'))
          },
        })
        return new Response(body, { status: 200 })
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
      const outcomes: string[] = []
      let runs = 0
      const idem = idempotency({
        store: backing.store,
        secrets,
        anonymous: true,
        onEvent: (event) => void (event.type === 'outcome' && outcomes.push(event.outcome)),
      })
      running = await serve(
        idem(async () => {
          runs++
          await left.promise
          return Response.json({ late: true })
        }),
      )
      const key = randomUUID()
      const aborted = new AbortController()
      const first = send(running, 'POST', '/op', { headers: keyed(key), body: {}, signal: aborted.signal })
      await vi.waitFor(() => expect(runs).toBe(1))

      aborted.abort()
      await expect(first).rejects.toThrow()
      left.open()
      await vi.waitFor(() => expect(outcomes).toContain('EXECUTED'))
      const retry = await post(running, key, {})

      expect(retry.status).toBe(200)
      expect(retry.headers.get('idempotent-replayed')).toBe('true')
      expect(retry.json()).toEqual({ late: true })
      expect(runs).toBe(1)
    })
  })
})

describe('withIdempotency', () => {
  it('wraps one handler with its own options, its route options among them', async () => {
    const store = memoryStore()
    let runs = 0
    const handler = withIdempotency(
      (request: Request) => {
        runs++
        return Response.json({ fencingToken: idempotencyOf(request)?.fencingToken }, { status: 201 })
      },
      { store, secrets, anonymous: true, required: false },
    )
    const request = (key?: string) =>
      new Request('http://x/orders', {
        method: 'POST',
        headers: key === undefined ? {} : { 'idempotency-key': key },
        body: 'x',
      })

    const first = await handler(request('k'))
    const replay = await handler(request('k'))
    const unprotected = await handler(request())
    await store.close()

    expect(await first.json()).toEqual({ fencingToken: 1 })
    expect(replay.headers.get('idempotent-replayed')).toBe('true')
    expect(unprotected.status).toBe(201)
    expect(runs).toBe(2)
  })
})
