/**
 * The fault app (test/faults/apps/fault-app.ts) on Hono, for the faults that run on every
 * adapter: the idempotency middleware on the Redis store, served by @hono/node-server. Every
 * handler execution is appended to EXECUTION_LOG (one JSON line, written before the handler does
 * anything else), a count kept outside the system under test.
 *
 * Env: PORT, HOST, REDIS_URL (or REDIS_CLUSTER, REDIS_SENTINELS: see common.ts),
 * IDEMPOTENCY_SECRET, IDEMPOTENCY_LEASE_MS,
 * IDEMPOTENCY_FAILURE_RETENTION_MS, IDEMPOTENCY_CLAIM_TIMEOUT_MS, IDEMPOTENCY_WAIT_MS,
 * REDIS_COMMAND_TIMEOUT_MS (2000), EXECUTION_LOG, UNSAFE_EVICTION ('refuse' | 'warn'),
 * VERIFY_AT_STARTUP ('0' to skip `store.verify()`), LOG_LEVEL ('warn'), EXTRA_DELAY_MS (0).
 *
 * Routes: POST /orders (expiredExecution 'recover'), POST /orders-takeover ('takeover'), both
 * with `{ item, qty, delayMs?, fail?, pad? }`; GET /orders; GET /_status (no auth): the Redis
 * client's status. Not here (Fastify app only): the fencing sink, the rate limit and
 * PostgreSQL.
 */

import { serve } from '@hono/node-server'
import { Hono } from 'hono'
import idempotency, { type HonoIdempotencyEnv } from '../../../plugins/hono/index.js'
import { env, idempotencyOptionsFromEnv, isOrder, type OrderBody, placeOrder, redisFromEnv } from './common.js'

type Logger = Record<'info' | 'warn' | 'error', (object: object, message: string) => void>
type Env = { Variables: HonoIdempotencyEnv['Variables'] & { user: string; logger: Logger } }

const LEVELS = { info: 30, warn: 40, error: 50 } as const
const threshold = LEVELS[(env.LOG_LEVEL ?? 'warn') as keyof typeof LEVELS] ?? 40
const line = (level: number) => (object: object, msg: string) => {
  if (level >= threshold) process.stderr.write(`${JSON.stringify({ level, time: Date.now(), ...object, msg })}\n`)
}
const logger: Logger = { info: line(30), warn: line(40), error: line(50) }

async function main(): Promise<void> {
  const { redis, store } = await redisFromEnv((event) => logger.warn({ idempotency: event }, event.message))

  const app = new Hono<Env>()
  app.get('/_status', (c) => c.json({ redis: redis.status }))
  app.use(async (c, next) => {
    c.set('logger', logger)
    const match = /^Bearer ([A-Za-z0-9._~+/-]{1,64})$/.exec(c.req.header('authorization') ?? '')
    if (!match) return c.json({ error: 'Send Authorization: Bearer <name>.' }, 401)
    c.set('user', match[1] as string)
    await next()
  })
  const idem = idempotency({
    store,
    ...idempotencyOptionsFromEnv(),
    principal: (c) => c.get('user'),
  })
  for (const [url, expiredExecution] of [
    ['/orders', 'recover'],
    ['/orders-takeover', 'takeover'],
  ] as const) {
    app.post(
      url,
      async (c, next) => {
        const body = await c.req.json().catch(() => undefined)
        return isOrder(body) ? next() : c.json({ error: 'invalid body' }, 400)
      },
      idem({ expiredExecution }),
      async (c) => {
        const token = c.get('idempotency')?.fencingToken ?? 0
        const execution = { route: url, key: c.req.header('idempotency-key'), case: c.req.header('x-case'), token }
        const order = await placeOrder((await c.req.json()) as OrderBody, { ...execution, user: c.get('user') })
        return c.json(order, 201)
      },
    )
  }
  app.get('/orders', (c) => c.json({ ok: true }))
  app.onError((error, c) => {
    const status = (error as { statusCode?: number }).statusCode ?? 500
    return c.json({ statusCode: status, message: error.message }, status as 500)
  })

  const server = serve({ fetch: app.fetch, port: Number(env.PORT), hostname: env.HOST ?? '127.0.0.1' })
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      server.close()
      void store.close().then(() => {
        redis.disconnect()
        process.exit(0)
      })
    })
  }
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
