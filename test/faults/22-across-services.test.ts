/**
 * Fault 22: two services, each behind idemkit in its own process (the example's order service,
 * examples/fastify-app.ts, and its payment service, examples/payments-app.ts), one on Redis and
 * the other on PostgreSQL, then the other way round. The order service is SIGKILLed at each
 * point of its checkout in turn (before the charge, after it, before its completion) and started
 * again; the client's retries (idempotentFetch, one key) end with one 201, the payment service
 * charged once, and the stored answer replays byte for byte. The checkout is `resume: true`: no
 * retry is answered 503 recovery-required; a killed run is resumed once its lease runs out, and
 * one that threw after the charge is resumed by the very next retry.
 */
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { idempotentFetch } from '../../src/client/index.js'
import { type AppProcess, startAppProcess } from '../helpers/app-process.js'
import { recordFigures } from '../helpers/figures.js'

const SECRET = 'x'.repeat(32)
const CRASH_POINTS = ['before-charge', 'after-reserve', 'after-charge', 'before-completion'] as const

type Store = 'redis' | 'postgres'

function storeEnv(store: Store): Record<string, string> {
  return store === 'redis' ? { REDIS_URL: inject('redisUrl') } : { DATABASE_URL: inject('postgresUrl') }
}

describe.each([
  ['redis', 'postgres'],
  ['postgres', 'redis'],
] as const)(
  'fault 22: orders on %s, payments on %s, the order service SIGKILLed mid-checkout',
  (ordersStore, paymentsStore) => {
    let payments: AppProcess

    beforeAll(async () => {
      payments = await startAppProcess('examples/payments-app.ts', {
        ...storeEnv(paymentsStore as Store),
        IDEMPOTENCY_SECRET: `${SECRET}-payments`,
      })
    })

    afterAll(async () => {
      await payments?.stop()
    })

    function startOrders(): Promise<AppProcess> {
      return startAppProcess('examples/fastify-app.ts', {
        ...storeEnv(ordersStore as Store),
        IDEMPOTENCY_SECRET: SECRET,
        PAYMENTS_URL: payments.url,
      })
    }

    // The order service on Redis has no reservation step: `after-reserve` is `before-charge` there.
    const points = CRASH_POINTS.filter((point) => ordersStore === 'postgres' || point !== 'after-reserve')

    /**
     * The user's charges at the payment service: one, the one the answer names; and on
     * PostgreSQL their reservations: one, the one the answer names.
     */
    async function expectOneEffect(orders: AppProcess, user: string, answered: Buffer) {
      const { charges } = (await (await fetch(`${payments.url}/charges`)).json()) as {
        charges: { id: string; customer: string }[]
      }
      const mine = charges.filter((charge) => charge.customer === user)
      expect(mine).toHaveLength(1)
      const answer = JSON.parse(answered.toString())
      expect(answer.charge.id).toBe(mine[0]?.id)
      const reservation = answer.reservation as { reservationId: string } | undefined
      if (ordersStore === 'redis') {
        expect(reservation).toBeUndefined()
        return
      }
      const listed = await fetch(`${orders.url}/reservations`, { headers: { authorization: `Bearer ${user}` } })
      const { reservations } = (await listed.json()) as { reservations: { reservationId: string }[] }
      expect(reservations).toHaveLength(1)
      expect(reservation?.reservationId).toBe(reservations[0]?.reservationId)
    }

    it.for(points)('killed %s: the retries end with one 201, one charge, one stored answer', async (point, context) => {
      const user = `fault22-${randomUUID().slice(0, 8)}`
      const key = randomUUID()
      const body = JSON.stringify({ item: 'book', qty: 1, amount: 1200 })
      const headers = { authorization: `Bearer ${user}`, 'content-type': 'application/json' }
      let orders = await startOrders()
      try {
        const died = new Promise<NodeJS.Signals | null>((resolve) =>
          orders.child.once('exit', (_code, signal) => resolve(signal)),
        )
        // The first attempt: the handler kills its own process at `point` (a real SIGKILL).
        const first = await fetch(`${orders.url}/checkouts`, {
          method: 'POST',
          headers: { ...headers, 'idempotency-key': key, 'x-crash-at': point },
          body,
        }).catch((error: unknown) => error)
        expect(first).toBeInstanceOf(Error)
        expect(await died).toBe('SIGKILL')

        // The service comes back (a supervisor's restart) and the client retries with the key.
        orders = await startOrders()
        const started = performance.now()
        const retries: number[] = []
        const answer = await idempotentFetch.with({
          deadlineMs: 60_000,
          initialDelayMs: 100,
          maxDelayMs: 1_000,
          maxAttempts: 100,
          onRetry: (event) => retries.push(event.status ?? 0),
        })(`${orders.url}/checkouts`, { method: 'POST', headers, body, idempotencyKey: key })
        const resumedMs = performance.now() - started
        const answered = Buffer.from(await answer.arrayBuffer())
        recordFigures(context, '22', `orders on ${ordersStore}, payments on ${paymentsStore}, killed ${point}`, {
          'ms from the restart to the 201': Math.round(resumedMs),
          '409s retried': retries.filter((status) => status === 409).length,
          'other retries': retries.filter((status) => status !== 409).length,
        })

        expect(answer.status).toBe(201)
        // A retry before the killed run's lease (5 s) ran out answered 409 (never 503
        // recovery-required); then one resumed the checkout.
        expect(retries.every((status) => status === 409)).toBe(true)
        expect(answer.headers.get('idempotent-replayed')).not.toBe('true')
        await expectOneEffect(orders, user, answered)

        for (let replay = 0; replay < 2; replay++) {
          const again = await fetch(`${orders.url}/checkouts`, {
            method: 'POST',
            headers: { ...headers, 'idempotency-key': key },
            body,
          })
          expect(again.status).toBe(201)
          expect(again.headers.get('idempotent-replayed')).toBe('true')
          expect(Buffer.from(await again.arrayBuffer()).equals(answered)).toBe(true)
        }
      } finally {
        await orders.stop()
      }
    })

    it('an error thrown after the charge: the next retry resumes at once, one charge', async () => {
      const user = `fault22-${randomUUID().slice(0, 8)}`
      const key = randomUUID()
      const body = JSON.stringify({ item: 'book', qty: 1, amount: 1200 })
      const headers = { authorization: `Bearer ${user}`, 'content-type': 'application/json', 'idempotency-key': key }
      const orders = await startOrders()
      try {
        const thrown = await fetch(`${orders.url}/checkouts`, {
          method: 'POST',
          headers: { ...headers, 'x-crash-at': 'error-after-charge' },
          body,
        })
        expect(thrown.status).toBe(500)
        const resumed = await fetch(`${orders.url}/checkouts`, { method: 'POST', headers, body })
        const answered = Buffer.from(await resumed.arrayBuffer())
        expect(resumed.status).toBe(201)
        await expectOneEffect(orders, user, answered)
        const again = await fetch(`${orders.url}/checkouts`, { method: 'POST', headers, body })
        expect(again.headers.get('idempotent-replayed')).toBe('true')
        expect(Buffer.from(await again.arrayBuffer()).equals(answered)).toBe(true)
      } finally {
        await orders.stop()
      }
    })
  },
)
