/**
 * Two app processes of each framework's example sharing one Redis (NestJS: one on each
 * platform): 50 concurrent identical requests, split between them, run the handler once; the
 * rest answer 409 or the one stored answer.
 */
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { type AppProcess, startAppProcess } from '../helpers/app-process.js'

const SECRET = 'p'.repeat(32)

/** Per framework: the two processes, as (script, extra environment). */
const PAIRS: readonly (readonly [string, readonly (readonly [string, Record<string, string>])[]])[] = [
  [
    'Fastify',
    [
      ['examples/fastify-app.ts', {}],
      ['examples/fastify-app.ts', {}],
    ],
  ],
  [
    'Express',
    [
      ['examples/express-app.ts', {}],
      ['examples/express-app.ts', {}],
    ],
  ],
  [
    'Hono',
    [
      ['examples/hono-app.ts', {}],
      ['examples/hono-app.ts', {}],
    ],
  ],
  [
    'Nest (platform-express and platform-fastify)',
    [
      ['examples/nest-app.ts', { NEST_PLATFORM: 'express' }],
      ['examples/nest-app.ts', { NEST_PLATFORM: 'fastify' }],
    ],
  ],
]

describe.each(PAIRS)('two %s app processes sharing one Redis', (_name, pair) => {
  let apps: AppProcess[] = []

  beforeAll(async () => {
    const env = { REDIS_URL: inject('redisUrl'), IDEMPOTENCY_SECRET: SECRET }
    apps = await Promise.all(pair.map(([script, extra]) => startAppProcess(script, { ...env, ...extra })))
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
