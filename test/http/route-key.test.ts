/**
 * A route's `key` function (docs/options.md#keys-from-the-request), on every adapter: a webhook
 * delivered again with the same event id and no Idempotency-Key runs its handler once; what the
 * function returns is checked like the header (a 400 problem, never a 500), and scoped by the
 * principal like the header's key. Every answer of a protected route says what it is in
 * `Idempotency-Status`, and the layer's refusals say whether a retry can help.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { memoryStore } from '../../src/stores/memory/index.js'
import { ADAPTERS, type RunningApp, send, type TestResponse } from '../helpers/adapters.js'

const PROBLEM_JSON = 'application/problem+json; charset=utf-8'

function expectRefusal(response: TestResponse, status: number, code: string, slug: string): void {
  expect(response.status).toBe(status)
  expect(response.headers.get('content-type')).toBe(PROBLEM_JSON)
  expect(response.json()).toMatchObject({ status, code, retryable: false })
  expect(response.headers.get('idempotency-status')).toBe(slug)
  expect(response.headers.get('x-should-retry')).toBe('false')
}

describe.each(ADAPTERS)('a route key function on %s', (_name, adapter) => {
  let app: RunningApp
  let runs: unknown[]

  beforeEach(async () => {
    runs = []
    app = await adapter.custom(memoryStore(), [
      {
        path: '/webhooks',
        keyFromBody: 'id',
        reply: ({ body }) => {
          runs.push(body)
          return {
            status: 200,
            headers: { 'content-type': 'application/json' },
            chunks: [JSON.stringify({ received: runs.length })],
          }
        },
      },
      {
        path: '/orders',
        reply: () => {
          runs.push('order')
          return {
            status: 201,
            headers: { 'content-type': 'application/json' },
            chunks: [JSON.stringify({ order: runs.length })],
          }
        },
      },
    ])
  })

  afterEach(async () => {
    await app.close()
  })

  const deliver = (body: unknown, principal = 'stripe', headers: Record<string, string> = {}) =>
    send(app, 'POST', '/webhooks', {
      headers: { authorization: principal, 'content-type': 'application/json', ...headers },
      body,
    })

  it('runs a delivery sent three times (same event id, no Idempotency-Key) once; the others get the stored answer', async () => {
    const event = { id: 'evt_1NG8Du2eZvKYlo2CUI79vXWy', type: 'payment_intent.succeeded' }

    const first = await deliver(event)
    const second = await deliver(event)
    const third = await deliver(event)

    expect(runs).toEqual([event])
    expect([first.status, second.status, third.status]).toEqual([200, 200, 200])
    expect(second.text).toBe(first.text)
    expect(third.text).toBe(first.text)
    expect(first.headers.get('idempotency-status')).toBe('executed')
    expect(first.headers.get('idempotent-replayed')).toBeNull()
    for (const replay of [second, third]) {
      expect(replay.headers.get('idempotency-status')).toBe('replayed')
      expect(replay.headers.get('idempotent-replayed')).toBe('true')
    }
  })

  it('takes the key from the function, not from the Idempotency-Key header', async () => {
    const event = { id: 'evt_header_ignored', type: 'charge.refunded' }

    await deliver(event, 'stripe', { 'idempotency-key': 'a' })
    const again = await deliver(event, 'stripe', { 'idempotency-key': 'b' })

    expect(runs).toHaveLength(1)
    expect(again.headers.get('idempotency-status')).toBe('replayed')
  })

  it('scopes the key by principal, and refuses the same key with another body (422)', async () => {
    const event = { id: 'evt_scoped', type: 'invoice.paid' }

    await deliver(event, 'stripe')
    const other = await deliver(event, 'github')
    const reused = await deliver({ ...event, type: 'invoice.voided' }, 'stripe')

    expect(runs).toHaveLength(2)
    expect(other.headers.get('idempotency-status')).toBe('executed')
    expectRefusal(reused, 422, 'IDEMPOTENCY_KEY_REUSED', 'key-reused')
  })

  it('answers 400 key-invalid for what the function returns that the header rules refuse, and runs nothing', async () => {
    const answers = [
      await deliver({ id: 'evt with a space' }),
      await deliver({ id: 'x'.repeat(256) }),
      await deliver({ id: 'évt_1' }),
      await deliver({ id: '' }),
      await deliver({ id: { nested: true } }),
    ]

    for (const answer of answers) expectRefusal(answer, 400, 'IDEMPOTENCY_KEY_INVALID', 'key-invalid')
    expect(answers.map((answer) => answer.json().detail)).toEqual([
      'The idempotency key must be visible ASCII characters only.',
      'The idempotency key is longer than 255 characters.',
      'The idempotency key must be visible ASCII characters only.',
      'The idempotency key is empty.',
      'The idempotency key of this request is not a string.',
    ])
    expect(runs).toHaveLength(0)
  })

  it('answers 400 key-missing when the function finds no key on a required route', async () => {
    const answer = await deliver({ type: 'ping' })

    expectRefusal(answer, 400, 'IDEMPOTENCY_KEY_MISSING', 'key-missing')
    expect(runs).toHaveLength(0)
  })

  it('marks the answers of a header route: executed, replayed, and the refusals with x-should-retry', async () => {
    const headers = { authorization: 'alice', 'content-type': 'application/json', 'idempotency-key': 'order-1' }

    const first = await send(app, 'POST', '/orders', { headers, body: { item: 'book' } })
    const replay = await send(app, 'POST', '/orders', { headers, body: { item: 'book' } })
    const missing = await send(app, 'POST', '/orders', {
      headers: { authorization: 'alice', 'content-type': 'application/json' },
      body: { item: 'book' },
    })
    const anonymous = await send(app, 'POST', '/orders', {
      headers: { 'content-type': 'application/json', 'idempotency-key': 'order-2' },
      body: { item: 'book' },
    })

    expect(first.status).toBe(201)
    expect(first.headers.get('idempotency-status')).toBe('executed')
    expect(replay.headers.get('idempotency-status')).toBe('replayed')
    expect(replay.headers.get('idempotent-replayed')).toBe('true')
    expectRefusal(missing, 400, 'IDEMPOTENCY_KEY_MISSING', 'key-missing')
    expectRefusal(anonymous, 401, 'IDEMPOTENCY_PRINCIPAL_REQUIRED', 'principal-required')
    expect(runs).toEqual(['order'])
  })
})
