import { randomUUID } from 'node:crypto'
import Fastify from 'fastify'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import idempotency, { memoryStore } from '../../plugins/fastify/index.js'
import { exampleApp, headers, SECRET, type TestApp } from '../helpers/example-app.js'
import { STORES, type TestStore } from '../helpers/stores.js'

const order = { item: 'book', qty: 1 }

describe.each(STORES)('Fastify plugin on the %s store', (_name, create) => {
  let backing: TestStore
  let t: TestApp

  beforeEach(async () => {
    backing = await create()
    t = await exampleApp(backing.store)
  })

  afterEach(async () => {
    await t.app.close()
    await backing.teardown()
  })

  const post = (user: string, key: string | undefined, body: object = order, url = '/orders') =>
    t.app.inject({ method: 'POST', url, headers: headers(user, key), payload: body })
  const count = async (user: string) =>
    (await t.app.inject({ url: '/orders', headers: headers(user) })).json().orders.length as number

  describe('docs/design.md §5 rows', () => {
    it('answers 400 IDEMPOTENCY_KEY_MISSING without a key, and runs nothing', async () => {
      const response = await post('alice', undefined)

      expect(response.statusCode).toBe(400)
      expect(response.headers['content-type']).toBe('application/problem+json; charset=utf-8')
      expect(response.json()).toMatchObject({
        type: 'urn:idemkit:problem:key-missing',
        status: 400,
        code: 'IDEMPOTENCY_KEY_MISSING',
      })
      expect(await count('alice')).toBe(0)
    })

    it.each([
      ['empty', ''],
      ['longer than 255', 'k'.repeat(256)],
      ['with a space', 'a b'],
      ['with a control byte', 'a\u007fb'],
      ['a list', 'a, b'],
      ['a quoted key with parameters', '"abc";x=1'],
      ['an unterminated quote', '"abc'],
      ['an empty quoted key', '""'],
    ])('answers 400 IDEMPOTENCY_KEY_INVALID for a key that is %s', async (_case, key) => {
      const response = await post('alice', key)

      expect(response.statusCode).toBe(400)
      expect(response.json()).toMatchObject({
        code: 'IDEMPOTENCY_KEY_INVALID',
        type: 'urn:idemkit:problem:key-invalid',
      })
      expect(await count('alice')).toBe(0)
    })

    it('replays the stored status, headers and body with Idempotent-Replayed: true', async () => {
      const key = randomUUID()
      const first = await post('alice', key)

      const second = await post('alice', key)

      expect(first.statusCode).toBe(201)
      expect(first.headers['idempotent-replayed']).toBeUndefined()
      expect(second.statusCode).toBe(201)
      expect(second.headers['idempotent-replayed']).toBe('true')
      expect(second.headers.location).toBe(first.headers.location)
      expect(second.headers['content-type']).toBe(first.headers['content-type'])
      expect(second.body).toBe(first.body)
      expect(await count('alice')).toBe(1)
    })

    it('answers 409 IDEMPOTENCY_IN_FLIGHT with Retry-After while the first request runs', async () => {
      const key = randomUUID()
      // Sent together: whichever claims first runs (300 ms), the other is answered while it runs.
      // (A fixed head start would not say which claims first on a loaded machine.)
      const answers = await Promise.all([
        post('alice', key, { ...order, delayMs: 300 }),
        post('alice', key, { ...order, delayMs: 300 }),
      ])
      const refused = answers.find((answer) => answer.statusCode !== 201)

      expect(answers.map((answer) => answer.statusCode).sort()).toEqual([201, 409])
      expect(refused?.json()).toMatchObject({ code: 'IDEMPOTENCY_IN_FLIGHT' })
      expect(Number(refused?.headers['retry-after'])).toBeGreaterThanOrEqual(1)
      expect(await count('alice')).toBe(1)
    })

    it('answers 422 IDEMPOTENCY_KEY_REUSED for the same key with another body, then still replays the original', async () => {
      const key = randomUUID()
      const first = await post('alice', key)

      const reused = await post('alice', key, { item: 'pen', qty: 2 })
      const again = await post('alice', key)

      expect(reused.statusCode).toBe(422)
      expect(reused.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED' })
      expect(again.statusCode).toBe(201)
      expect(again.body).toBe(first.body)
      expect(await count('alice')).toBe(1)
    })

    it('answers 503 IDEMPOTENCY_RECOVERY_REQUIRED after a failure with an unknown effect', async () => {
      const key = randomUUID()
      const first = await post('alice', key, { ...order, fail: 'unknown' })

      const retry = await post('alice', key, { ...order, fail: 'unknown' })

      expect(first.statusCode).toBe(500)
      expect(retry.statusCode).toBe(503)
      expect(retry.json()).toMatchObject({ code: 'IDEMPOTENCY_RECOVERY_REQUIRED' })
      expect(retry.headers['retry-after']).toBeUndefined()
    })
  })

  describe('classification', () => {
    it('lets a retry run again after a failure the handler marked retryable', async () => {
      const key = randomUUID()
      const failed = await post('alice', key, { ...order, fail: 'retryable' })

      const retried = await t.app.inject({
        method: 'POST',
        url: '/orders',
        headers: headers('alice', key),
        payload: { ...order, fail: 'retryable' },
      })

      expect(failed.statusCode).toBe(503)
      expect(retried.statusCode).toBe(503)
      expect(retried.headers['idempotent-replayed']).toBeUndefined()
    })

    it('stores a 4xx answer of the handler as the result', async () => {
      const app = Fastify()
      let runs = 0
      await app.register(idempotency, {
        store: backing.store,
        secrets: { current: 1, keys: { 1: SECRET } },
        anonymous: true,
      })
      app.post('/pay', { config: { idempotency: true } }, async (_request, reply) => {
        runs++
        return reply.code(402).send({ declined: true })
      })
      const send = () => app.inject({ method: 'POST', url: '/pay', headers: { 'idempotency-key': 'k' }, payload: {} })

      const first = await send()
      const second = await send()
      await app.close()

      expect(first.statusCode).toBe(402)
      expect(second.statusCode).toBe(402)
      expect(second.headers['idempotent-replayed']).toBe('true')
      expect(runs).toBe(1)
    })
  })

  describe('scopes', () => {
    it('keeps two principals with the same key and body apart', async () => {
      const key = randomUUID()

      const alice = await post('alice', key)
      const bob = await post('bob', key)

      expect(alice.statusCode).toBe(201)
      expect(bob.statusCode).toBe(201)
      expect(bob.headers['idempotent-replayed']).toBeUndefined()
      expect(bob.json().id).not.toBe(alice.json().id)
      expect((await post('bob', key)).json().id).toBe(bob.json().id)
      expect(await count('alice')).toBe(1)
      expect(await count('bob')).toBe(1)
    })

    it('treats the same key on two routes as two scopes', async () => {
      const key = randomUUID()

      const orderResponse = await post('alice', key)
      const deposit = await post('alice', key, { amount: 5 }, '/accounts/1/deposits')

      expect(orderResponse.statusCode).toBe(201)
      expect(deposit.statusCode).toBe(201)
      expect(deposit.json()).toMatchObject({ accountId: '1', amount: 5, balance: 5 })
    })

    it('answers 422 for the same key on /accounts/1 and /accounts/2', async () => {
      const key = randomUUID()
      await post('alice', key, { amount: 5 }, '/accounts/1/deposits')

      const other = await post('alice', key, { amount: 5 }, '/accounts/2/deposits')

      expect(other.statusCode).toBe(422)
      const balance = await t.app.inject({ url: '/accounts/2', headers: headers('alice') })
      expect(balance.json().balance).toBe(0)
    })

    it('treats a quoted key and the same bare key as one key', async () => {
      const first = await post('alice', 'abc-123')

      const quoted = await post('alice', '"abc-123"')

      expect(quoted.headers['idempotent-replayed']).toBe('true')
      expect(quoted.body).toBe(first.body)
    })

    it('treats JSON bodies that differ only in key order and spacing as the same request', async () => {
      const key = randomUUID()
      await t.app.inject({
        method: 'POST',
        url: '/orders',
        headers: headers('alice', key),
        payload: '{"item":"book","qty":1}',
      })

      const reordered = await t.app.inject({
        method: 'POST',
        url: '/orders',
        headers: headers('alice', key),
        payload: '{ "qty": 1,  "item": "book" }',
      })

      expect(reordered.headers['idempotent-replayed']).toBe('true')
    })
  })

  describe('validation and authentication come first', () => {
    it('holds no key after a 400 from schema validation', async () => {
      const key = randomUUID()
      const invalid = await post('alice', key, { item: 'book', qty: 0 })

      const valid = await post('alice', key, { item: 'book', qty: 3 })

      expect(invalid.statusCode).toBe(400)
      expect(valid.statusCode).toBe(201)
      expect(valid.headers['idempotent-replayed']).toBeUndefined()
    })

    it('answers 401 from the app before the plugin sees the key', async () => {
      const response = await t.app.inject({
        method: 'POST',
        url: '/orders',
        headers: { 'idempotency-key': 'k', 'content-type': 'application/json' },
        payload: order,
      })

      expect(response.statusCode).toBe(401)
    })
  })

  describe('logs', () => {
    it('logs one outcome line with the digest prefix and never the key or the principal', async () => {
      const key = `secret-key-${randomUUID()}`
      await post('principal-zed', key)
      await post('principal-zed', key)

      const outcomes = t.logs.filter((line) => line.includes('idempotency outcome')).map((line) => JSON.parse(line))
      const text = t.logs.join('\n')

      expect(outcomes.map((line) => line.idempotency.outcome)).toEqual(['EXECUTED', 'REPLAYED'])
      expect(outcomes[0].idempotency.digest).toMatch(/^[0-9a-f]{12}$/)
      expect(outcomes[0].idempotency.attempt).toBe(1)
      expect(text).not.toContain(key)
      expect(text).not.toContain('principal-zed')
    })
  })
})

describe('Fastify plugin registration', () => {
  const secrets = { current: 1, keys: { 1: SECRET } }

  it.each([
    ['no store', { secrets, anonymous: true }, 'store'],
    ['no secrets', { store: memoryStore(), anonymous: true }, 'secrets'],
    ['no principal and not anonymous', { store: memoryStore(), secrets }, 'principal'],
    ['an unknown option', { store: memoryStore(), secrets, anonymous: true, leaseMS: 5 }, 'leaseMS'],
    ['a bad lease', { store: memoryStore(), secrets, anonymous: true, leaseMs: -1 }, 'leaseMs'],
    ['inFlight as a word', { store: memoryStore(), secrets, anonymous: true, inFlight: 'wait' }, 'inFlight'],
    ['inFlight without waitMs', { store: memoryStore(), secrets, anonymous: true, inFlight: {} }, 'inFlight'],
    ['a zero waitMs', { store: memoryStore(), secrets, anonymous: true, inFlight: { waitMs: 0 } }, 'inFlight'],
    [
      'a waitMs over ten minutes',
      { store: memoryStore(), secrets, anonymous: true, inFlight: { waitMs: 600_001 } },
      'inFlight',
    ],
    [
      'an unknown inFlight member',
      { store: memoryStore(), secrets, anonymous: true, inFlight: { waitMs: 10, pollMs: 5 } },
      'inFlight',
    ],
  ])('refuses %s with a coded error naming the option', async (_case, options, name) => {
    const app = Fastify()

    await expect(app.register(idempotency, options as never).ready()).rejects.toMatchObject({
      code: 'ERR_IDEM_INVALID_OPTION',
      message: expect.stringContaining(name),
    })
    await app.close()
  })

  it('refuses a short secret', async () => {
    const app = Fastify()

    await expect(
      app
        .register(idempotency, { store: memoryStore(), secrets: { current: 1, keys: { 1: 'short' } }, anonymous: true })
        .ready(),
    ).rejects.toMatchObject({ code: 'ERR_IDEM_INVALID_SECRET' })
    await app.close()
  })

  it('refuses a route with an invalid idempotency config when it is added', async () => {
    const app = Fastify()
    await app.register(idempotency, { store: memoryStore(), secrets, anonymous: true })

    expect(() => app.post('/x', { config: { idempotency: { leaseMs: 'soon' as never } } }, async () => 'x')).toThrow(
      /route \/x: .*leaseMs/,
    )
    expect(() => app.post('/y', { config: { idempotency: 'yes' as never } }, async () => 'y')).toThrow(/idempotency/)
    expect(() => app.post('/z', { config: { idempotency: { inFlight: { waitMs: 1.5 } } } }, async () => 'z')).toThrow(
      /route \/z: .*inFlight/,
    )
    // 'reject' is accepted per route, over a plugin-wide wait.
    app.post('/w', { config: { idempotency: { inFlight: 'reject' } } }, async () => 'w')
    await app.close()
  })

  it('refuses requests to an idempotent route registered before the plugin', async () => {
    const app = Fastify()
    let runs = 0
    app.post('/early', { config: { idempotency: true } }, async () => {
      runs++
      return 'ran'
    })
    await app.register(idempotency, { store: memoryStore(), secrets, anonymous: true })

    const response = await app.inject({ method: 'POST', url: '/early', headers: { 'idempotency-key': 'k' } })
    await app.close()

    expect(response.statusCode).toBe(500)
    expect(response.json()).toMatchObject({ code: 'IDEMPOTENCY_ROUTE_UNPROTECTED' })
    expect(runs).toBe(0)
  })

  it('leaves unannotated routes untouched and lets optional keys pass', async () => {
    const app = Fastify()
    await app.register(idempotency, { store: memoryStore(), secrets, anonymous: true })
    app.post('/plain', async (request) => ({ idempotency: request.idempotency }))
    app.post('/optional', { config: { idempotency: { required: false } } }, async (request) => ({
      idempotency: request.idempotency,
    }))

    const plain = await app.inject({ method: 'POST', url: '/plain', headers: { 'idempotency-key': 'k' } })
    const optional = await app.inject({ method: 'POST', url: '/optional' })
    const withKey = await app.inject({ method: 'POST', url: '/optional', headers: { 'idempotency-key': 'k' } })
    await app.close()

    expect(plain.json()).toEqual({ idempotency: null })
    expect(optional.json()).toEqual({ idempotency: null })
    expect(withKey.json().idempotency).toMatchObject({
      fencingToken: 1,
      replayed: false,
      digest: expect.stringMatching(/^[0-9a-f]{12}$/),
    })
  })
})

describe('Fastify plugin encapsulation', () => {
  const secrets = { current: 1, keys: { 1: SECRET } }

  it('refuses an idempotent route in a sibling context the plugin cannot see, and protects its own', async () => {
    const app = Fastify()
    let runs = 0
    await app.register(async (withPlugin) => {
      await withPlugin.register(idempotency, { store: memoryStore(), secrets, anonymous: true })
      withPlugin.post('/inside', { config: { idempotency: true } }, async () => ++runs)
    })
    await app.register(async (sibling) => {
      sibling.post('/outside', { config: { idempotency: true } }, async () => ++runs)
    })
    app.post('/plain', async () => 'plain')

    const inside = await app.inject({ method: 'POST', url: '/inside', headers: { 'idempotency-key': 'k' } })
    const insideAgain = await app.inject({ method: 'POST', url: '/inside', headers: { 'idempotency-key': 'k' } })
    const outside = await app.inject({ method: 'POST', url: '/outside', headers: { 'idempotency-key': 'k' } })
    const plain = await app.inject({ method: 'POST', url: '/plain' })
    await app.close()

    expect(inside.statusCode).toBe(200)
    expect(insideAgain.headers['idempotent-replayed']).toBe('true')
    expect(outside.statusCode).toBe(500)
    expect(outside.json()).toMatchObject({ code: 'IDEMPOTENCY_ROUTE_UNPROTECTED' })
    expect(plain.body).toBe('plain')
    expect(runs).toBe(1)
  })
})

describe('Fastify plugin hooks per route', () => {
  const secrets = { current: 1, keys: { 1: SECRET } }

  it('adds preValidation only to a route that validates or has hooks of its own before the claim', async () => {
    const app = Fastify()
    await app.register(idempotency, { store: memoryStore(), secrets, anonymous: true })
    app.post('/plain', { config: { idempotency: true } }, async () => 'plain')
    app.post('/body', { config: { idempotency: true }, schema: { body: { type: 'object' } } }, async () => 'body')
    app.post('/headers', { config: { idempotency: true }, schema: { headers: { type: 'object' } } }, async () => 'h')
    app.post('/hooked', { config: { idempotency: true }, preHandler: async () => {} }, async () => 'hooked')
    await app.ready()
    const routes = app.printRoutes({ includeHooks: true, commonPrefix: false })
    await app.close()

    const hooksOf = (url: string) => routes.split(/\n(?=[├└])/).find((block) => block.includes(`${url} (POST)`)) ?? ''
    expect(hooksOf('/plain')).toContain('idempotencyPreHandler')
    expect(hooksOf('/plain')).not.toContain('preValidation')
    expect(hooksOf('/body')).toContain('idempotencyPreValidation')
    expect(hooksOf('/headers')).toContain('idempotencyPreValidation')
    expect(hooksOf('/hooked')).toContain('idempotencyPreValidation')
    for (const url of ['/plain', '/body', '/headers', '/hooked']) expect(hooksOf(url)).not.toContain('onResponse')
  })

  it('fingerprints the body as sent when a route-level preHandler hook rewrites it before the claim', async () => {
    const app = Fastify()
    await app.register(idempotency, { store: memoryStore(), secrets, anonymous: true })
    let runs = 0
    app.post(
      '/rewritten',
      {
        config: { idempotency: true },
        preHandler: async (request) => {
          ;(request.body as { qty: number }).qty = 99
        },
      },
      async (request) => ({ run: ++runs, body: request.body }),
    )
    const send = (payload: object) =>
      app.inject({ method: 'POST', url: '/rewritten', headers: { 'idempotency-key': 'k' }, payload })

    const first = await send({ item: 'book', qty: 1 })
    const retry = await send({ item: 'book', qty: 1 })
    const rewrittenBody = await send({ item: 'book', qty: 99 })
    await app.close()

    expect(first.json()).toEqual({ run: 1, body: { item: 'book', qty: 99 } })
    expect(retry.headers['idempotent-replayed']).toBe('true')
    expect(rewrittenBody.statusCode).toBe(422)
    expect(runs).toBe(1)
  })
})

describe('Fastify plugin unprotected-route check', () => {
  const secrets = { current: 1, keys: { 1: SECRET } }

  it('adds no onRequest hook to any route when the plugin comes before every route', async () => {
    const app = Fastify()
    await app.register(idempotency, { store: memoryStore(), secrets, anonymous: true })
    app.post('/protected', { config: { idempotency: true } }, async () => 'protected')
    app.post('/plain', async () => 'plain')
    await app.register(async (child) => {
      child.post('/child', { config: { idempotency: true } }, async () => 'child')
    })
    await app.ready()
    const routes = app.printRoutes({ includeHooks: true, commonPrefix: false })
    const protectedRun = await app.inject({ method: 'POST', url: '/child', headers: { 'idempotency-key': 'k' } })
    await app.close()

    expect(routes).toContain('/child (POST)')
    expect(routes).not.toContain('onRequest')
    expect(protectedRun.statusCode).toBe(200)
  })

  it('refuses an idempotent route added above the context that registered the plugin, after it', async () => {
    const app = Fastify()
    let runs = 0
    await app.register(async (outer) => {
      await outer.register(async (inner) => {
        await inner.register(idempotency, { store: memoryStore(), secrets, anonymous: true })
        inner.post('/inner', { config: { idempotency: true } }, async () => ++runs)
      })
      outer.post('/outer', { config: { idempotency: true } }, async () => ++runs)
      outer.post('/outer-plain', async () => 'plain')
    })
    app.post('/root', { config: { idempotency: true } }, async () => ++runs)

    const inner = await app.inject({ method: 'POST', url: '/inner', headers: { 'idempotency-key': 'k' } })
    const outer = await app.inject({ method: 'POST', url: '/outer', headers: { 'idempotency-key': 'k' } })
    const root = await app.inject({ method: 'POST', url: '/root' })
    const plain = await app.inject({ method: 'POST', url: '/outer-plain' })
    await app.close()

    expect(inner.statusCode).toBe(200)
    expect(outer.statusCode).toBe(500)
    expect(outer.json()).toMatchObject({ code: 'IDEMPOTENCY_ROUTE_UNPROTECTED' })
    expect(root.statusCode).toBe(500)
    expect(root.json()).toMatchObject({ code: 'IDEMPOTENCY_ROUTE_UNPROTECTED' })
    expect(plain.body).toBe('plain')
    expect(runs).toBe(1)
  })

  it('refuses an idempotent route added before the plugin in another context, and protects later ones', async () => {
    const app = Fastify()
    let runs = 0
    await app.register(async (early) => {
      early.post('/early', { config: { idempotency: true } }, async () => ++runs)
    })
    await app.register(idempotency, { store: memoryStore(), secrets, anonymous: true })
    app.post('/later', { config: { idempotency: true } }, async () => ++runs)

    const early = await app.inject({ method: 'POST', url: '/early', headers: { 'idempotency-key': 'k' } })
    const later = await app.inject({ method: 'POST', url: '/later', headers: { 'idempotency-key': 'k' } })
    const again = await app.inject({ method: 'POST', url: '/later', headers: { 'idempotency-key': 'k' } })
    await app.close()

    expect(early.statusCode).toBe(500)
    expect(early.json()).toMatchObject({ code: 'IDEMPOTENCY_ROUTE_UNPROTECTED' })
    expect(later.statusCode).toBe(200)
    expect(again.headers['idempotent-replayed']).toBe('true')
    expect(runs).toBe(1)
  })
})
