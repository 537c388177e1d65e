/**
 * The fault app (test/faults/apps/fault-app.ts) on Hono, for the faults that run on every
 * adapter: the idempotency middleware on the Redis store, served by @hono/node-server. Every
 * handler execution is appended to EXECUTION_LOG (one JSON line, written before the handler does
 * anything else), a count kept outside the system under test.
 *
 * Env: PORT, HOST, REDIS_URL, IDEMPOTENCY_SECRET, IDEMPOTENCY_LEASE_MS,
 * IDEMPOTENCY_FAILURE_RETENTION_MS, IDEMPOTENCY_CLAIM_TIMEOUT_MS, IDEMPOTENCY_WAIT_MS,
 * REDIS_COMMAND_TIMEOUT_MS (2000), EXECUTION_LOG, UNSAFE_EVICTION ('refuse' | 'warn'),
 * VERIFY_AT_STARTUP ('0' to skip `store.verify()`), LOG_LEVEL ('warn'), EXTRA_DELAY_MS (0).
 *
 * Routes: POST /orders (expiredExecution 'recover'), POST /orders-takeover ('takeover'), both
 * with `{ item, qty, delayMs?, fail?, pad? }`; GET /orders; GET /_status (no auth): the Redis
 * client's status. Not here (Fastify app only): the fencing sink, the rate limit, Redis Cluster
 * and PostgreSQL.
 */

import { randomUUID } from 'node:crypto'
import { appendFileSync } from 'node:fs'
import { serve } from '@hono/node-server'
import { Hono } from 'hono'
import { Redis } from 'ioredis'
import idempotency, { type HonoIdempotencyEnv, redisStore } from '../../../plugins/hono/index.js'

interface OrderBody {
  item: string
  qty: number
  delayMs?: number
  fail?: 'retryable' | 'unknown'
}

class RetryableError extends Error {
  readonly statusCode = 503
  readonly retryable = true
}

type Logger = Record<'info' | 'warn' | 'error', (object: object, message: string) => void>
type Env = { Variables: HonoIdempotencyEnv['Variables'] & { user: string; logger: Logger } }

const env = process.env
const executionLog = env.EXECUTION_LOG
if (!executionLog) throw new Error('EXECUTION_LOG is required')

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
const optionalNumber = (value: string | undefined) => (value ? Number(value) : undefined)

function record(line: object): void {
  appendFileSync(executionLog as string, `${JSON.stringify(line)}\n`)
}

const LEVELS = { info: 30, warn: 40, error: 50 } as const
const threshold = LEVELS[(env.LOG_LEVEL ?? 'warn') as keyof typeof LEVELS] ?? 40
const line = (level: number) => (object: object, msg: string) => {
  if (level >= threshold) process.stderr.write(`${JSON.stringify({ level, time: Date.now(), ...object, msg })}\n`)
}
const logger: Logger = { info: line(30), warn: line(40), error: line(50) }

/** `{ item, qty, delayMs?, fail?, pad? }`, as the Fastify app's schema. */
function isOrder(body: unknown): body is OrderBody {
  if (typeof body !== 'object' || body === null) return false
  const { item, qty, delayMs, fail, ...rest } = body as Record<string, unknown>
  return (
    Object.keys(rest).every((name) => name === 'pad') &&
    typeof item === 'string' &&
    Number.isSafeInteger(qty) &&
    (delayMs === undefined || (Number.isSafeInteger(delayMs) && (delayMs as number) <= 30_000)) &&
    (fail === undefined || fail === 'retryable' || fail === 'unknown')
  )
}

async function main(): Promise<void> {
  const redis = new Redis(env.REDIS_URL as string, {
    commandTimeout: Number(env.REDIS_COMMAND_TIMEOUT_MS ?? 2_000),
    maxRetriesPerRequest: 1,
    autoResendUnfulfilledCommands: false,
  })
  redis.on('error', () => {})
  await new Promise<void>((resolve, reject) => {
    redis.once('ready', resolve)
    setTimeout(() => reject(new Error('Redis did not become ready within 20 s')), 20_000).unref()
  })
  const store = redisStore({
    redis,
    unsafeEviction: env.UNSAFE_EVICTION === 'warn' ? 'warn' : 'refuse',
    onEvent: (event) => logger.warn({ idempotency: event }, event.message),
  })
  if (env.VERIFY_AT_STARTUP !== '0') await store.verify()

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
    secrets: { current: 1, keys: { 1: env.IDEMPOTENCY_SECRET as string } },
    principal: (c) => c.get('user'),
    leaseMs: optionalNumber(env.IDEMPOTENCY_LEASE_MS),
    failureRetentionMs: optionalNumber(env.IDEMPOTENCY_FAILURE_RETENTION_MS),
    claimTimeoutMs: optionalNumber(env.IDEMPOTENCY_CLAIM_TIMEOUT_MS),
    inFlight: env.IDEMPOTENCY_WAIT_MS ? { waitMs: Number(env.IDEMPOTENCY_WAIT_MS) } : undefined,
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
        const { item, qty, delayMs = 0, fail } = (await c.req.json()) as OrderBody
        const token = c.get('idempotency')?.fencingToken ?? 0
        const key = c.req.header('idempotency-key')
        const user = c.get('user')
        record({ type: 'execution', route: url, key, case: c.req.header('x-case'), user, pid: process.pid, token })
        const delay = delayMs + Number(env.EXTRA_DELAY_MS ?? 0)
        if (delay > 0) await sleep(delay)
        if (fail === 'retryable') throw new RetryableError('busy; nothing was done')
        if (fail === 'unknown') throw new Error('failed; the effect is unknown')
        return c.json({ id: randomUUID(), item, qty, token, pid: process.pid }, 201)
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
