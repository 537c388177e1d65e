/**
 * The example API on Fastify: orders and account deposits behind Idempotency-Key.
 *
 *   npm run example                       # in-memory store
 *   REDIS_URL=redis://127.0.0.1:6379 npm run example
 *
 * Env: PORT (3000), HOST (127.0.0.1), REDIS_URL, IDEMPOTENCY_SECRET, IDEMPOTENCY_LEASE_MS (30000).
 * `Authorization: Bearer <name>` makes <name> the principal; without it every route answers 401.
 */
import { randomUUID } from 'node:crypto'
import { pathToFileURL } from 'node:url'
import Fastify, { type FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import idempotency, { type IdempotencyStore, memoryStore, redisStore } from '../plugins/fastify/index.js'

declare module 'fastify' {
  interface FastifyRequest {
    user: string | null
  }
}

export interface ExampleOptions {
  readonly store: IdempotencyStore
  readonly secret: string
  readonly leaseMs?: number
  readonly logger?: boolean | object
}

interface Order {
  id: string
  item: string
  qty: number
  createdAt: string
}

/** A retryable failure: the handler did nothing, a retry may run again (FAILED_RETRYABLE). */
class RetryableError extends Error {
  readonly statusCode = 503
  readonly retryable = true
}

const sleep = (ms: number, signal?: AbortSignal | null) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms)
    signal?.addEventListener('abort', () => {
      clearTimeout(timer)
      resolve()
    })
  })

/** Builds the example app (not listening). */
export async function buildExampleApp(options: ExampleOptions): Promise<FastifyInstance> {
  const app = Fastify({ logger: options.logger ?? false })
  const orders = new Map<string, Order[]>()
  const balances = new Map<string, number>()

  app.decorateRequest('user', null)
  app.addHook('onRequest', async (request, reply) => {
    const match = /^Bearer ([A-Za-z0-9._~+/-]{1,64})$/.exec(request.headers.authorization ?? '')
    if (!match) {
      return reply
        .code(401)
        .type('application/problem+json')
        .header('www-authenticate', 'Bearer')
        .send({
          type: 'about:blank',
          title: 'Unauthorized',
          status: 401,
          detail: 'Send Authorization: Bearer <name>.',
        })
    }
    request.user = match[1] as string
  })

  await app.register(idempotency, {
    store: options.store,
    secrets: { current: 1, keys: { 1: options.secret } },
    principal: (request) => request.user ?? undefined,
    leaseMs: options.leaseMs,
  })

  app.post<{ Body: { item: string; qty: number; delayMs?: number; fail?: 'retryable' | 'unknown' } }>(
    '/orders',
    {
      config: { idempotency: true },
      schema: {
        body: {
          type: 'object',
          required: ['item', 'qty'],
          additionalProperties: false,
          properties: {
            item: { type: 'string', minLength: 1, maxLength: 200 },
            qty: { type: 'integer', minimum: 1 },
            delayMs: { type: 'integer', minimum: 0, maximum: 30_000 },
            fail: { type: 'string', enum: ['retryable', 'unknown'] },
          },
        },
      },
    },
    async (request, reply) => {
      const { item, qty, delayMs = 0, fail } = request.body
      await sleep(delayMs, request.idempotency?.signal)
      if (fail === 'retryable') throw new RetryableError('The order service is busy; nothing was created.')
      if (fail === 'unknown') throw new Error('The order service failed; the order may or may not exist.')
      const order: Order = { id: randomUUID(), item, qty, createdAt: new Date().toISOString() }
      const list = orders.get(request.user as string) ?? []
      list.push(order)
      orders.set(request.user as string, list)
      return reply.code(201).header('location', `/orders/${order.id}`).send(order)
    },
  )

  app.get('/orders', async (request) => ({ orders: orders.get(request.user as string) ?? [] }))

  app.post<{ Params: { id: string }; Body: { amount: number } }>(
    '/accounts/:id/deposits',
    {
      config: { idempotency: true },
      schema: {
        params: { type: 'object', properties: { id: { type: 'string', pattern: '^[A-Za-z0-9_-]{1,64}$' } } },
        body: {
          type: 'object',
          required: ['amount'],
          additionalProperties: false,
          properties: { amount: { type: 'integer', minimum: 1 } },
        },
      },
    },
    async (request, reply) => {
      const account = `${request.user}/${request.params.id}`
      const balance = (balances.get(account) ?? 0) + request.body.amount
      balances.set(account, balance)
      return reply
        .code(201)
        .send({ accountId: request.params.id, depositId: randomUUID(), amount: request.body.amount, balance })
    },
  )

  app.get<{ Params: { id: string } }>('/accounts/:id', async (request) => ({
    accountId: request.params.id,
    balance: balances.get(`${request.user}/${request.params.id}`) ?? 0,
  }))

  return app
}

async function main(): Promise<void> {
  const port = Number(process.env.PORT ?? 3000)
  const host = process.env.HOST ?? '127.0.0.1'
  const leaseMs = process.env.IDEMPOTENCY_LEASE_MS ? Number(process.env.IDEMPOTENCY_LEASE_MS) : undefined
  const warnings: string[] = []
  let redis: Redis | undefined
  let store: IdempotencyStore
  if (process.env.REDIS_URL) {
    redis = new Redis(process.env.REDIS_URL, { commandTimeout: 2_000, maxRetriesPerRequest: 1 })
    await new Promise<void>((resolve, reject) => {
      redis?.once('ready', resolve)
      redis?.once('error', reject)
    })
    store = redisStore({ redis })
  } else {
    store = memoryStore()
    warnings.push('REDIS_URL is not set: using the in-memory store (one process only, lost on restart)')
  }
  let secret = process.env.IDEMPOTENCY_SECRET
  if (!secret) {
    secret = 'development-secret-do-not-use-in-production-0000'
    warnings.push('IDEMPOTENCY_SECRET is not set: using a development secret')
  }
  const app = await buildExampleApp({ store, secret, leaseMs, logger: true })
  for (const warning of warnings) app.log.warn(warning)
  app.addHook('onClose', async () => {
    await store.close()
    redis?.disconnect()
  })
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      void app.close().then(() => process.exit(0))
    })
  }
  await app.listen({ port, host })
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main().catch((error) => {
    console.error(error)
    process.exit(1)
  })
}
