/**
 * The example app's Stripe webhook (examples/fastify-app.ts): a signed event delivered three
 * times, as Stripe does until it gets a 2xx, with the same event id and no Idempotency-Key, runs
 * its handler once, and the other deliveries get the stored answer; an event id the key rules
 * refuse is a 400 problem, and a delivery whose signature is wrong never reaches the layer.
 */
import type { FastifyInstance } from 'fastify'
import fastify4 from 'fastify4'
import { afterEach, describe, expect, it } from 'vitest'
import { buildExampleApp, EXAMPLE_STRIPE_WEBHOOK_SECRET } from '../../examples/fastify-app.js'
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
