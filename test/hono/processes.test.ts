/**
 * The Hono example in two processes on one Redis: 50 concurrent identical requests, one execution.
 */
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { type AppProcess, startAppProcess } from '../helpers/app-process.js'

const SECRET = 'p'.repeat(32)

describe('two Hono app processes sharing one Redis', () => {
  let apps: AppProcess[] = []

  beforeAll(async () => {
    const env = { REDIS_URL: inject('redisUrl'), IDEMPOTENCY_SECRET: SECRET }
    apps = await Promise.all([
      startAppProcess('examples/hono-app.ts', env),
      startAppProcess('examples/hono-app.ts', env),
    ])
  }, 60_000)

  afterAll(async () => {
    await Promise.all(apps.map((app) => app.stop()))
  })

  it('runs the handler once for 50 concurrent requests with one key, answering the rest 409 or replay', async () => {
    const user = `u-${randomUUID()}`
    const key = randomUUID()
    const body = JSON.stringify({ item: 'book', qty: 1, delayMs: 100 })
    const headers = { authorization: `Bearer ${user}`, 'content-type': 'application/json', 'idempotency-key': key }

    const responses = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        fetch(`${apps[i % 2]?.url}/orders`, { method: 'POST', headers, body }).then(async (response) => ({
          status: response.status,
          replayed: response.headers.get('idempotent-replayed'),
          body: await response.text(),
        })),
      ),
    )
    const counts = await Promise.all(
      apps.map(async (app) => {
        const response = await fetch(`${app.url}/orders`, { headers: { authorization: `Bearer ${user}` } })
        return ((await response.json()) as { orders: unknown[] }).orders.length
      }),
    )

    const created = responses.filter((response) => response.status === 201)
    expect(counts.reduce((a, b) => a + b, 0)).toBe(1)
    expect(responses.filter((response) => response.status >= 500)).toEqual([])
    expect(responses.every((response) => response.status === 201 || response.status === 409)).toBe(true)
    expect(created.filter((response) => response.replayed !== 'true')).toHaveLength(1)
    expect(new Set(created.map((response) => response.body)).size).toBe(1)
  })
})
