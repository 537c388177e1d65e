/**
 * docs/design.md §5 over a listening server, one table run unchanged against every adapter on
 * every framework major it supports, each in its example app (ADAPTERS in test/helpers/adapters.ts:
 * the Fastify plugin on Fastify 5 and 4, the Express middleware on Express 5 and 4, the Hono
 * middleware on @hono/node-server 2 and 1, the NestJS module on platform-express and
 * platform-fastify), and every store (STORES in test/helpers/stores.ts: memory, Redis, PostgreSQL).
 * vitest.runtimes.config.ts runs the same table on `idemkit/fetch` under Bun and Deno instead
 * (test/helpers/table-targets.ts).
 */
import { randomUUID } from 'node:crypto'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { type Adapter, authHeaders, type RunningApp, send, sendRaw, type TestResponse } from '../helpers/adapters.js'
import { createRedisStore, type TestStore, unreachableRedisStore } from '../helpers/stores.js'
import { tableTargets } from '../helpers/table-targets.js'

const order = { item: 'book', qty: 1 }
const PROBLEM_JSON = 'application/problem+json; charset=utf-8'

const { adapters: ADAPTERS, stores: STORES } = tableTargets()

const CASES = ADAPTERS.flatMap(([adapterName, adapter]) =>
  STORES.map(([storeName, create]) => [adapterName, storeName, adapter, create] as const),
)

/** Request helpers bound to one running app. */
function client(app: () => RunningApp) {
  const post = (user: string, key: string | undefined, body: unknown = order, path = '/orders') =>
    send(app(), 'POST', path, { headers: authHeaders(user, key), body })
  const count = async (user: string): Promise<number> =>
    (await send(app(), 'GET', '/orders', { headers: authHeaders(user) })).json().orders.length
  return { post, count }
}

function expectProblem(response: TestResponse, status: number, code: string): void {
  expect(response.status).toBe(status)
  expect(response.headers.get('content-type')).toBe(PROBLEM_JSON)
  expect(response.json()).toMatchObject({ status, code, type: expect.stringMatching(/^urn:idemkit:problem:/) })
}

describe.each(CASES)('HTTP table on %s with the %s store', (_adapterName, _storeName, adapter, create) => {
  let backing: TestStore
  let app: RunningApp
  const { post, count } = client(() => app)

  beforeEach(async () => {
    backing = await create()
    app = await adapter.example(backing.store)
  })

  afterEach(async () => {
    await app.close()
    await backing.teardown()
  })

  describe('docs/design.md §5 rows', () => {
    it('answers 400 IDEMPOTENCY_KEY_MISSING and runs nothing when the key is missing', async () => {
      const response = await post('alice', undefined)

      expectProblem(response, 400, 'IDEMPOTENCY_KEY_MISSING')
      expect(response.json().type).toBe('urn:idemkit:problem:key-missing')
      expect(await count('alice')).toBe(0)
    })

    it.each([
      ['empty', ''],
      ['longer than 255 characters', 'k'.repeat(256)],
      ['holding a space', 'a b'],
      ['a list', 'a, b'],
      ['a quoted key with parameters', '"abc";x=1'],
      ['an unterminated quote', '"abc'],
      ['an empty quoted key', '""'],
    ])('answers 400 IDEMPOTENCY_KEY_INVALID and runs nothing when the key is %s', async (_case, key) => {
      const response = await post('alice', key)

      expectProblem(response, 400, 'IDEMPOTENCY_KEY_INVALID')
      expect(response.json().type).toBe('urn:idemkit:problem:key-invalid')
      expect(await count('alice')).toBe(0)
    })

    it.each([
      ['sent on two header lines', ['Idempotency-Key: same', 'Idempotency-Key: same']],
      // Node's parser refuses control bytes itself (400); obs-text bytes reach the layer.
      ['holding a byte outside visible ASCII', ['Idempotency-Key: caf\u00e9']],
    ])('answers 400 IDEMPOTENCY_KEY_INVALID when the key is %s', async (_case, keyLines) => {
      const body = JSON.stringify(order)

      const response = await sendRaw(
        app,
        [
          'POST /orders HTTP/1.1',
          `Host: 127.0.0.1:${app.port}`,
          'Authorization: Bearer alice',
          'Content-Type: application/json',
          ...keyLines,
        ],
        body,
      )

      expect(response.status).toBe(400)
      expect(JSON.parse(response.body)).toMatchObject({ code: 'IDEMPOTENCY_KEY_INVALID' })
      expect(await count('alice')).toBe(0)
    })

    it('answers 409 IDEMPOTENCY_IN_FLIGHT with Retry-After when the same scope is still executing', async () => {
      const key = randomUUID()
      const slow = { ...order, delayMs: 1_000 }
      // Sent together: whichever claims first runs, the other finds it executing (a head start
      // does not decide the order on a loaded machine).
      const answers = await Promise.all([post('alice', key, slow), post('alice', key, slow)])
      const second = answers.find((answer) => answer.status === 409)
      if (second === undefined) throw new Error(`expected a 409, got ${answers.map((a) => a.status)}`)

      expectProblem(second, 409, 'IDEMPOTENCY_IN_FLIGHT')
      expect(Number(second.headers.get('retry-after'))).toBeGreaterThanOrEqual(1)
      expect(answers.map((answer) => answer.status).sort()).toEqual([201, 409])
      expect(await count('alice')).toBe(1)
    })

    it('answers 422 IDEMPOTENCY_KEY_REUSED when the key comes with another body, and still replays the original', async () => {
      const key = randomUUID()
      const first = await post('alice', key)

      const reused = await post('alice', key, { item: 'pen', qty: 2 })
      const again = await post('alice', key)

      expectProblem(reused, 422, 'IDEMPOTENCY_KEY_REUSED')
      expect(again.status).toBe(201)
      expect(again.headers.get('idempotent-replayed')).toBe('true')
      expect(again.body.equals(first.body)).toBe(true)
      expect(await count('alice')).toBe(1)
    })

    it('replays the stored status, allowlisted headers and body with Idempotent-Replayed: true when the request is repeated', async () => {
      const key = randomUUID()
      const first = await post('alice', key)

      const second = await post('alice', key)

      expect(first.status).toBe(201)
      expect(first.headers.get('idempotent-replayed')).toBeNull()
      expect(first.headers.get('location')).toMatch(/^\/orders\/[0-9a-f-]{36}$/)
      expect(second.status).toBe(201)
      expect(second.headers.get('idempotent-replayed')).toBe('true')
      expect(second.headers.get('location')).toBe(first.headers.get('location'))
      expect(second.headers.get('content-type')).toBe(first.headers.get('content-type'))
      expect(second.body.equals(first.body)).toBe(true)
      expect(await count('alice')).toBe(1)
    })

    it('answers 503 IDEMPOTENCY_RECOVERY_REQUIRED without Retry-After when an earlier attempt failed with an unknown effect', async () => {
      const key = randomUUID()
      const failing = { ...order, fail: 'unknown' }
      const first = await post('alice', key, failing)

      const retry = await post('alice', key, failing)

      expect(first.status).toBe(500)
      expectProblem(retry, 503, 'IDEMPOTENCY_RECOVERY_REQUIRED')
      expect(retry.headers.get('retry-after')).toBeNull()
    })

    it('runs the handler again when the earlier failure was marked retryable', async () => {
      const key = randomUUID()
      const failing = { ...order, fail: 'retryable' }
      const first = await post('alice', key, failing)

      const retry = await post('alice', key, failing)

      expect(first.status).toBe(503)
      expect(retry.status).toBe(503)
      expect(retry.headers.get('content-type')).not.toBe(PROBLEM_JSON)
      expect(retry.headers.get('idempotent-replayed')).toBeNull()
      expect(app.logs.join('')).toContain('"attempt":2')
    })
  })

  describe('scopes', () => {
    it('executes once per principal and never shows one the other response when two principals send the same key and body', async () => {
      const key = randomUUID()

      const alice = await post('alice', key)
      const bob = await post('bob', key)
      const bobAgain = await post('bob', key)

      expect(alice.status).toBe(201)
      expect(bob.status).toBe(201)
      expect(bob.headers.get('idempotent-replayed')).toBeNull()
      expect(bob.json().id).not.toBe(alice.json().id)
      expect(bobAgain.headers.get('idempotent-replayed')).toBe('true')
      expect(bobAgain.json().id).toBe(bob.json().id)
      expect(await count('alice')).toBe(1)
      expect(await count('bob')).toBe(1)
    })

    it('treats the key as two scopes when it is used on two routes', async () => {
      const key = randomUUID()

      const created = await post('alice', key)
      const deposit = await post('alice', key, { amount: 5 }, '/accounts/1/deposits')

      expect(created.status).toBe(201)
      expect(deposit.status).toBe(201)
      expect(deposit.headers.get('idempotent-replayed')).toBeNull()
      expect(deposit.json()).toMatchObject({ accountId: '1', amount: 5, balance: 5 })
    })

    it('answers 422 when the key is used on /accounts/1/deposits and then /accounts/2/deposits', async () => {
      const key = randomUUID()
      await post('alice', key, { amount: 5 }, '/accounts/1/deposits')

      const other = await post('alice', key, { amount: 5 }, '/accounts/2/deposits')

      expectProblem(other, 422, 'IDEMPOTENCY_KEY_REUSED')
      const balance = await send(app, 'GET', '/accounts/2', { headers: authHeaders('alice') })
      expect(balance.json()).toEqual({ accountId: '2', balance: 0 })
    })
  })

  describe('validation and authentication come first', () => {
    it('holds no key when validation answers 400', async () => {
      const key = randomUUID()
      const invalid = await post('alice', key, { item: 'book', qty: 0 })

      const valid = await post('alice', key, { item: 'book', qty: 3 })

      expect(invalid.status).toBe(400)
      expect(invalid.headers.get('content-type')).toMatch(/^application\/json/)
      expect(invalid.json()).toMatchObject({ statusCode: 400, error: 'Bad Request' })
      expect(valid.status).toBe(201)
      expect(valid.headers.get('idempotent-replayed')).toBeNull()
    })

    it('answers 401 problem+json and runs nothing when Authorization is missing', async () => {
      const response = await send(app, 'POST', '/orders', {
        headers: { 'content-type': 'application/json', 'idempotency-key': randomUUID() },
        body: order,
      })

      expect(response.status).toBe(401)
      expect(response.headers.get('content-type')).toBe(PROBLEM_JSON)
      expect(response.headers.get('www-authenticate')).toBe('Bearer')
      expect(response.json()).toMatchObject({ status: 401, title: 'Unauthorized' })
    })
  })

  describe('response capture', () => {
    let custom: RunningApp | undefined

    afterEach(async () => {
      await custom?.close()
      custom = undefined
    })

    it('sends a response larger than maxResponseBytes once, stores nothing, and answers 503 recovery-required to the retry', async () => {
      let runs = 0
      const large = Buffer.alloc(4096, 'x')
      custom = await adapter.custom(backing.store, [
        {
          path: '/large',
          options: { maxResponseBytes: 1024 },
          reply: () => {
            runs++
            return { status: 200, headers: { 'content-type': 'text/plain; charset=utf-8' }, chunks: [large] }
          },
        },
      ])
      const key = randomUUID()
      const request = () =>
        send(custom as RunningApp, 'POST', '/large', { headers: authHeaders('alice', key), body: {} })

      const first = await request()
      const retry = await request()

      expect(first.status).toBe(200)
      expect(first.body.equals(large)).toBe(true)
      expectProblem(retry, 503, 'IDEMPOTENCY_RECOVERY_REQUIRED')
      expect(runs).toBe(1)
    })

    it('replays a response written in chunks byte for byte when it is requested again', async () => {
      let runs = 0
      const chunks = ['{"part":1,', Buffer.from([0x22, 0x62, 0x22, 0x3a]), '"\u00e9\u4e2d"}']
      custom = await adapter.custom(backing.store, [
        {
          path: '/chunked',
          reply: () => {
            runs++
            return {
              status: 202,
              headers: { 'content-type': 'application/json; charset=utf-8', location: '/jobs/7', 'x-not-stored': 'a' },
              chunks,
            }
          },
        },
      ])
      const key = randomUUID()
      const request = () =>
        send(custom as RunningApp, 'POST', '/chunked', { headers: authHeaders('alice', key), body: {} })

      const first = await request()
      const second = await request()

      expect(first.status).toBe(202)
      expect(first.body.equals(Buffer.concat(chunks.map((chunk) => Buffer.from(chunk))))).toBe(true)
      expect(second.status).toBe(202)
      expect(second.headers.get('idempotent-replayed')).toBe('true')
      expect(second.headers.get('content-type')).toBe(first.headers.get('content-type'))
      expect(second.headers.get('location')).toBe('/jobs/7')
      expect(second.headers.get('x-not-stored')).toBeNull()
      expect(second.body.equals(first.body)).toBe(true)
      expect(runs).toBe(1)
    })
  })
})

describe.each(ADAPTERS)('HTTP table on %s with Redis only', (_name, adapter: Adapter) => {
  it('answers 503 IDEMPOTENCY_STORE_UNAVAILABLE with Retry-After and runs nothing when Redis cannot be reached', async () => {
    const backing = await unreachableRedisStore()
    const app = await adapter.example(backing.store)
    const { post, count } = client(() => app)

    const response = await post('alice', randomUUID())
    const orders = await count('alice')
    await app.close()
    await backing.teardown()

    expectProblem(response, 503, 'IDEMPOTENCY_STORE_UNAVAILABLE')
    expect(Number(response.headers.get('retry-after'))).toBeGreaterThanOrEqual(1)
    expect(orders).toBe(0)
  })

  it('executes once and answers the others 409 or the replay, never a 5xx, when 50 requests share one key', async () => {
    const backing = await createRedisStore()
    const app = await adapter.example(backing.store)
    const { post, count } = client(() => app)
    const key = randomUUID()
    const body = { ...order, delayMs: 200 }

    const responses = await Promise.all(Array.from({ length: 50 }, () => post('alice', key, body)))
    const orders = await count('alice')
    await app.close()
    await backing.teardown()

    const executed = responses.filter((r) => r.status === 201 && r.headers.get('idempotent-replayed') === null)
    const replayed = responses.filter((r) => r.status === 201 && r.headers.get('idempotent-replayed') === 'true')
    const inFlight = responses.filter((r) => r.status === 409)
    expect(executed).toHaveLength(1)
    expect(replayed.length + inFlight.length).toBe(49)
    expect(responses.every((r) => r.status < 500)).toBe(true)
    expect(replayed.every((r) => r.body.equals(executed[0]?.body as Buffer))).toBe(true)
    expect(orders).toBe(1)
  })
})
