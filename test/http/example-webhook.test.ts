/**
 * The example app's webhooks (examples/fastify-app.ts): a signed Stripe event delivered three
 * times, as Stripe does until it gets a 2xx, with the same event id and no Idempotency-Key, runs
 * its handler once, and the other deliveries get the stored answer; so does a GitHub delivery
 * sent again with the same X-GitHub-Delivery header. A key the key rules refuse is a 400
 * problem, and a delivery whose signature is wrong never reaches the layer.
 */
import type { FastifyInstance } from 'fastify'
import fastify4 from 'fastify4'
import { afterEach, describe, expect, it } from 'vitest'
import {
  buildExampleApp,
  EXAMPLE_GITHUB_WEBHOOK_SECRET,
  EXAMPLE_STRIPE_WEBHOOK_SECRET,
} from '../../examples/fastify-app.js'
import { signGitHubPayload } from '../../examples/github-signature.js'
import { signStripePayload } from '../../examples/stripe-signature.js'
import { memoryStore } from '../../src/stores/memory/index.js'
import { SECRET } from '../helpers/example-app.js'

const FRAMEWORKS = [
  ['fastify', undefined],
  ['fastify4', fastify4],
] as const

describe.each(FRAMEWORKS)('the Stripe webhook of the example app on %s', (_name, framework) => {
  let app: FastifyInstance

  afterEach(async () => {
    await app.close()
  })

  async function start(): Promise<void> {
    app = await buildExampleApp({
      store: memoryStore(),
      secret: SECRET,
      fastify: framework as never,
    })
  }

  const deliver = (payload: string, signature = signStripePayload(payload, EXAMPLE_STRIPE_WEBHOOK_SECRET)) =>
    app.inject({
      method: 'POST',
      url: '/webhooks/stripe',
      headers: { 'content-type': 'application/json', 'stripe-signature': signature },
      payload,
    })

  const handled = async () =>
    (
      await app.inject({ method: 'GET', url: '/webhooks/stripe/events', headers: { authorization: 'Bearer ops' } })
    ).json().events

  it('runs an event delivered three times once; the other deliveries get the stored answer', async () => {
    await start()
    const payload = JSON.stringify({ id: 'evt_3MtwBwLkdIwHu7ix28a3tqPa', type: 'payment_intent.succeeded' })

    const deliveries = [await deliver(payload), await deliver(payload), await deliver(payload)]

    expect(deliveries.map((delivery) => delivery.statusCode)).toEqual([200, 200, 200])
    expect(deliveries.map((delivery) => delivery.json())).toEqual([
      { received: 'evt_3MtwBwLkdIwHu7ix28a3tqPa', handled: 1 },
      { received: 'evt_3MtwBwLkdIwHu7ix28a3tqPa', handled: 1 },
      { received: 'evt_3MtwBwLkdIwHu7ix28a3tqPa', handled: 1 },
    ])
    expect(deliveries.map((delivery) => delivery.headers['idempotency-status'])).toEqual([
      'executed',
      'replayed',
      'replayed',
    ])
    expect(deliveries[2]?.headers['idempotent-replayed']).toBe('true')
    expect(await handled()).toHaveLength(1)
  })

  it('answers 400 key-invalid for an event id the key rules refuse, and runs nothing', async () => {
    await start()

    const invalid = await deliver(JSON.stringify({ id: `evt_${'x'.repeat(300)}`, type: 'charge.failed' }))
    const missing = await deliver(JSON.stringify({ type: 'charge.failed' }))

    expect(invalid.statusCode).toBe(400)
    expect(invalid.headers['content-type']).toBe('application/problem+json; charset=utf-8')
    expect(invalid.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_INVALID', retryable: false })
    expect(missing.statusCode).toBe(400)
    expect(missing.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_MISSING' })
    expect(await handled()).toHaveLength(0)
  })

  it('refuses a delivery whose signature does not match before it holds the key', async () => {
    await start()
    const payload = JSON.stringify({ id: 'evt_forged', type: 'payout.paid' })

    const forged = await deliver(payload, signStripePayload(payload, 'whsec_another_secret'))
    const stale = await deliver(
      payload,
      signStripePayload(payload, EXAMPLE_STRIPE_WEBHOOK_SECRET, Math.floor(Date.now() / 1000) - 3600),
    )
    const genuine = await deliver(payload)

    expect(forged.statusCode).toBe(400)
    expect(forged.headers['idempotency-status']).toBeUndefined()
    expect(stale.statusCode).toBe(400)
    expect(genuine.statusCode).toBe(200)
    expect(genuine.headers['idempotency-status']).toBe('executed')
    expect(await handled()).toHaveLength(1)
  })
})

describe.each(FRAMEWORKS)('the GitHub webhook of the example app on %s', (_name, framework) => {
  let app: FastifyInstance

  afterEach(async () => {
    await app.close()
  })

  async function start(): Promise<void> {
    app = await buildExampleApp({ store: memoryStore(), secret: SECRET, fastify: framework as never })
  }

  const PAYLOAD = JSON.stringify({ action: 'opened', number: 1347 })

  const deliver = (
    delivery: string | undefined,
    payload = PAYLOAD,
    signature = signGitHubPayload(payload, EXAMPLE_GITHUB_WEBHOOK_SECRET),
  ) =>
    app.inject({
      method: 'POST',
      url: '/webhooks/github',
      headers: {
        'content-type': 'application/json',
        'x-github-event': 'pull_request',
        'x-hub-signature-256': signature,
        ...(delivery === undefined ? {} : { 'x-github-delivery': delivery }),
      },
      payload,
    })

  const handled = async () =>
    (
      await app.inject({ method: 'GET', url: '/webhooks/github/deliveries', headers: { authorization: 'Bearer ops' } })
    ).json().deliveries

  it('runs a delivery sent three times (same X-GitHub-Delivery) once; the others get the stored answer', async () => {
    await start()
    const id = '72d3162e-cc78-11e3-81ab-4c9367dc0958'

    const deliveries = [await deliver(id), await deliver(id), await deliver(id)]
    const another = await deliver('a1b2c3d4-cc78-11e3-81ab-4c9367dc0958')

    expect(deliveries.map((delivery) => delivery.statusCode)).toEqual([202, 202, 202])
    expect(deliveries.map((delivery) => delivery.json())).toEqual([{ accepted: 1 }, { accepted: 1 }, { accepted: 1 }])
    expect(deliveries.map((delivery) => delivery.headers['idempotency-status'])).toEqual([
      'executed',
      'replayed',
      'replayed',
    ])
    expect(another.json()).toEqual({ accepted: 2 })
    expect(await handled()).toEqual([
      { delivery: id, event: 'pull_request', action: 'opened' },
      { delivery: 'a1b2c3d4-cc78-11e3-81ab-4c9367dc0958', event: 'pull_request', action: 'opened' },
    ])
  })

  it('answers 400 problems for a delivery header the key rules refuse or that is missing, and runs nothing', async () => {
    await start()

    const invalid = await deliver('not a delivery id')
    const long = await deliver('d'.repeat(256))
    const missing = await deliver(undefined)

    for (const answer of [invalid, long, missing]) {
      expect(answer.statusCode).toBe(400)
      expect(answer.headers['content-type']).toBe('application/problem+json; charset=utf-8')
      expect(answer.headers['x-should-retry']).toBe('false')
    }
    expect(invalid.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_INVALID', retryable: false })
    expect(invalid.headers['idempotency-status']).toBe('key-invalid')
    expect(long.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_INVALID' })
    expect(missing.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_MISSING' })
    expect(missing.headers['idempotency-status']).toBe('key-missing')
    expect(await handled()).toHaveLength(0)
  })

  it('refuses a delivery whose signature does not match before it holds the key', async () => {
    await start()
    const id = '0b989ba4-242f-11e5-81e1-c7b6a6a5d3e2'

    const forged = await deliver(id, PAYLOAD, signGitHubPayload(PAYLOAD, 'another secret'))
    const tampered = await deliver(
      id,
      JSON.stringify({ action: 'closed', number: 1347 }),
      signGitHubPayload(PAYLOAD, EXAMPLE_GITHUB_WEBHOOK_SECRET),
    )
    const genuine = await deliver(id)

    expect(forged.statusCode).toBe(401)
    expect(forged.headers['idempotency-status']).toBeUndefined()
    expect(tampered.statusCode).toBe(401)
    expect(genuine.statusCode).toBe(202)
    expect(genuine.headers['idempotency-status']).toBe('executed')
    expect(await handled()).toHaveLength(1)
  })
})
