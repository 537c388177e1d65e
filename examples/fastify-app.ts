/**
 * The example API on Fastify: orders and account deposits behind Idempotency-Key.
 *
 *   npm run example                       # in-memory store
 *   REDIS_URL=redis://127.0.0.1:6379 npm run example
 *   DATABASE_URL=postgres://user@127.0.0.1:5432/app npm run example
 *
 * Env: PORT (3000), HOST (127.0.0.1), REDIS_URL or DATABASE_URL, IDEMPOTENCY_SECRET,
 * IDEMPOTENCY_LEASE_MS (30000), IDEMPOTENCY_WAIT_MS (unset: 409 for a duplicate still running).
 * `Authorization: Bearer <name>` makes <name> the principal; without it every route answers 401.
 */
import { pathToFileURL } from 'node:url'
import Fastify, { type FastifyInstance } from 'fastify'
import idempotency, { type IdempotencyStore } from '../plugins/fastify/index.js'
import { exampleEnvironment } from './environment.js'
import { Ledger } from './ledger.js'
import { type OrderInput, Shop } from './shop.js'

declare module 'fastify' {
  interface FastifyRequest {
    user: string | null
  }
}

export interface ExampleOptions {
  readonly store: IdempotencyStore
  readonly secret: string
  readonly leaseMs?: number
  /** Duplicates of a request still running wait this long for its answer (unset: 409 at once). */
  readonly waitMs?: number
  readonly logger?: boolean | object
  /**
   * Balances in PostgreSQL (with the PostgreSQL store): deposits then run in the layer's
   * transaction (`transaction: true`). Without it, balances live in this process's memory.
   */
  readonly ledger?: Ledger
  /** The `fastify` module to build the app with (the tests pass each supported major). */
  readonly fastify?: typeof Fastify
}

/** Builds the example app (not listening). */
export async function buildExampleApp(options: ExampleOptions): Promise<FastifyInstance> {
  const app = (options.fastify ?? Fastify)({ logger: options.logger ?? false })
  const shop = new Shop()

  app.decorateRequest('user', null)
  app.addHook('onRequest', async (request, reply) => {
    const match = /^Bearer ([A-Za-z0-9._~+/-]{1,64})$/.exec(request.headers.authorization ?? '')
    if (!match) {
      return reply.code(401).type('application/problem+json').header('www-authenticate', 'Bearer').send({
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
    inFlight: options.waitMs ? { waitMs: options.waitMs } : undefined,
  })

  app.post<{ Body: OrderInput }>(
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
      const order = await shop.createOrder(request.user as string, request.body, request.idempotency)
      return reply.code(201).header('location', `/orders/${order.id}`).send(order)
    },
  )

  app.get('/orders', async (request) => ({ orders: shop.ordersOf(request.user as string) }))

  const ledger = options.ledger
  app.post<{ Params: { id: string }; Body: { amount: number } }>(
    '/accounts/:id/deposits',
    {
      // On PostgreSQL the deposit and its stored answer commit in one transaction.
      config: { idempotency: ledger ? { transaction: true } : true },
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
      const { user, params, body, idempotency } = request
      const db = idempotency?.db
      const deposit =
        ledger && db
          ? await ledger.deposit(db, user as string, params.id, body.amount)
          : shop.deposit(user as string, params.id, body.amount, idempotency)
      return reply.code(201).send(deposit)
    },
  )

  app.get<{ Params: { id: string } }>('/accounts/:id', async (request) => ({
    accountId: request.params.id,
    balance: ledger
      ? await ledger.balanceOf(request.user as string, request.params.id)
      : shop.balanceOf(request.user as string, request.params.id),
  }))

  return app
}

async function main(): Promise<void> {
  const env = await exampleEnvironment()
  const ledger = env.pool ? new Ledger(env.pool) : undefined
  await ledger?.migrate()
  const app = await buildExampleApp({
    store: env.store,
    secret: env.secret,
    leaseMs: env.leaseMs,
    waitMs: env.waitMs,
    logger: true,
    ledger,
  })
  for (const warning of env.warnings) app.log.warn(warning)
  app.addHook('onClose', () => env.close())
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      void app.close().then(() => process.exit(0))
    })
  }
  await app.listen({ port: env.port, host: env.host })
  app.log.info(env.cliHint)
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main().catch((error) => {
    console.error(error)
    process.exit(1)
  })
}
