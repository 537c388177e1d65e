/**
 * The example API on Fastify: orders and account deposits behind Idempotency-Key.
 *
 *   npm run example:orders                # in-memory store (npm run example: with the payment service)
 *   REDIS_URL=redis://127.0.0.1:6379 npm run example:orders
 *   DATABASE_URL=postgres://user@127.0.0.1:5432/app npm run example:orders
 *
 * Env: PORT (3000), HOST (127.0.0.1), REDIS_URL or DATABASE_URL, IDEMPOTENCY_SECRET,
 * IDEMPOTENCY_LEASE_MS (30000), IDEMPOTENCY_WAIT_MS (unset: 409 for a duplicate still running),
 * PAYMENTS_URL (http://127.0.0.1:3001: the payment service of `POST /checkouts`,
 * examples/payments-app.ts; `npm run example` starts both, examples/services.ts),
 * STRIPE_WEBHOOK_SECRET and GITHUB_WEBHOOK_SECRET (unset: development secrets).
 * `Authorization: Bearer <name>` makes <name> the principal; without it every route answers 401,
 * but the webhooks, which are signed instead and keyed by their sender's delivery: the Stripe
 * event's id (STRIPE_WEBHOOK_SECRET), GitHub's X-GitHub-Delivery header (GITHUB_WEBHOOK_SECRET).
 */
import { pathToFileURL } from 'node:url'
import swagger from '@fastify/swagger'
import Fastify, { type FastifyInstance } from 'fastify'
import idempotency, { type IdempotencyStore } from '../plugins/fastify/index.js'
import { idempotentFetch } from '../src/client/index.js'
import { exampleEnvironment } from './environment.js'
import { verifyGitHubSignature } from './github-signature.js'
import { Ledger } from './ledger.js'
import { type OrderInput, Shop } from './shop.js'
import { verifyStripeSignature } from './stripe-signature.js'

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
   * Balances and reservations in PostgreSQL (with the PostgreSQL store): deposits then run in the
   * layer's transaction (`transaction: true`), and a checkout reserves its item in a step before
   * the charge. Without it, balances live in this process's memory and checkouts reserve nothing.
   */
  readonly ledger?: Ledger
  /** The `fastify` module to build the app with (the tests pass each supported major). */
  readonly fastify?: typeof Fastify
  /**
   * The payment service's URL: adds `POST /checkouts`, which charges there with a key derived
   * from the request's (docs/across-services.md). Unset: no checkouts.
   */
  readonly paymentsUrl?: string
  /** The signing secret of `POST /webhooks/stripe` (Stripe's `whsec_...`). */
  readonly stripeWebhookSecret?: string
  /** The secret of `POST /webhooks/github` (the webhook's secret on GitHub). */
  readonly githubWebhookSecret?: string
  /**
   * Documents the API with @fastify/swagger at `GET /openapi.json`, each protected route with its
   * Idempotency-Key header and the layer's answers (docs/openapi.md). @fastify/swagger 9 needs
   * Fastify 5: on by default when `fastify` is not given.
   */
  readonly openapi?: boolean
}

/**
 * Where a checkout may be made to crash (`X-Crash-At`: its process SIGKILLed there, or
 * `error-after-charge`: an error thrown), to watch the retry finish its work. `after-reserve`
 * is after the reservation's step committed (on PostgreSQL; elsewhere there is no step).
 */
const CRASH_POINTS = ['before-charge', 'after-reserve', 'after-charge', 'before-completion'] as const
type CrashPoint = (typeof CRASH_POINTS)[number]

/** A Stripe event as the webhook reads it: the id is its idempotency key. */
interface StripeEvent {
  readonly id: string
  readonly type: string
}

/** A GitHub delivery as the webhook keeps it: the delivery id is its idempotency key. */
interface GitHubDelivery {
  readonly delivery: string
  readonly event: string
  readonly action: string | undefined
}

/** The development signing secret of the Stripe webhook, when none is given. */
export const EXAMPLE_STRIPE_WEBHOOK_SECRET = 'whsec_example_development_secret'

/** The development secret of the GitHub webhook, when none is given. */
export const EXAMPLE_GITHUB_WEBHOOK_SECRET = 'github_example_development_secret'

/** The routes that are signed by their sender instead of authenticated. */
const PUBLIC_ROUTES: ReadonlySet<string | undefined> = new Set([
  '/webhooks/stripe',
  '/webhooks/github',
  '/openapi.json',
])

/** Builds the example app (not listening). */
export async function buildExampleApp(options: ExampleOptions): Promise<FastifyInstance> {
  const app = (options.fastify ?? Fastify)({ logger: options.logger ?? false })
  const shop = new Shop()

  app.decorateRequest('user', null)
  app.addHook('onRequest', async (request, reply) => {
    // The webhooks are signed, not authenticated: their sender is checked on the raw body.
    if (PUBLIC_ROUTES.has(request.routeOptions.url)) return
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

  // Before the routes, as @fastify/swagger asks; before or after the idempotency plugin alike.
  const openapi = options.openapi ?? options.fastify === undefined
  if (openapi) {
    await app.register(swagger, {
      openapi: {
        info: { title: 'idemkit example: orders', version: '1.0.0' },
        components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      },
      // Shared schemas named by their $id (the problem schema: IdempotencyProblem), not def-N.
      refResolver: { buildLocalReference: (json, _base, _fragment, i) => String(json.$id ?? `def-${i}`) },
    })
  }

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
  const paymentsUrl = options.paymentsUrl
  if (paymentsUrl !== undefined) {
    // The payment service answers a retried charge from its record: retry what it says may succeed.
    const payments = idempotentFetch.with({ deadlineMs: 10_000 })
    app.post<{ Body: OrderInput & { amount: number } }>(
      '/checkouts',
      {
        // resume: a run that ended without its answer (killed: once its lease ran out; an error
        // thrown: at once) is run again by the next retry. Its charge goes out with the same
        // derived key, so the payment service charges once. On PostgreSQL the reservation is a
        // step: committed before the charge with its recovery point, skipped by a re-run.
        config: { idempotency: { resume: true, leaseMs: 5_000, ...(ledger ? { transaction: true } : {}) } },
        schema: {
          body: {
            type: 'object',
            required: ['item', 'qty', 'amount'],
            additionalProperties: false,
            properties: {
              item: { type: 'string', minLength: 1, maxLength: 200 },
              qty: { type: 'integer', minimum: 1 },
              amount: { type: 'integer', minimum: 1 },
            },
          },
        },
      },
      async (request, reply) => {
        const idem = request.idempotency
        if (idem === null) throw new Error('unreachable: a protected route')
        const { item, qty, amount } = request.body
        // A demonstration knob: `X-Crash-At: after-charge` kills this process there (SIGKILL).
        const crashAt = request.headers['x-crash-at']
        const crash = (point: CrashPoint) => {
          if (crashAt === point) process.kill(process.pid, 'SIGKILL')
        }
        crash('before-charge')
        // A re-run finds the step committed and gets the same reservation back.
        const reservation = ledger
          ? await idem.step('reserve', (db) => ledger.reserve(db, request.user as string, item, qty))
          : undefined
        crash('after-reserve')
        // The same key and the same body on every run of this checkout: one charge.
        const charged = await payments(`${paymentsUrl}/charges`, {
          method: 'POST',
          headers: { authorization: 'Bearer orders', 'content-type': 'application/json' },
          body: JSON.stringify({ customer: request.user, amount }),
          idempotencyKey: idem.keyFor('charge'),
          signal: idem.signal,
        })
        if (charged.status >= 500) throw new Error(`The payment service answered ${charged.status}.`)
        if (!charged.ok) return reply.code(402).send({ declined: await charged.json() })
        const charge = await charged.json()
        crash('after-charge')
        // `X-Crash-At: error-after-charge` throws here instead: an error not marked retryable.
        if (crashAt === 'error-after-charge') throw new Error('The checkout failed after the charge (X-Crash-At).')
        const order = await shop.createOrder(request.user as string, { item, qty }, idem)
        crash('before-completion')
        return reply.code(201).header('location', `/orders/${order.id}`).send({ order, charge, reservation })
      },
    )
  }

  // A Stripe webhook: Stripe sends an event again (same `id`, no Idempotency-Key) until it gets
  // a 2xx, so the event id is the key and its handler runs once per event.
  const events: StripeEvent[] = []
  const webhookSecret = options.stripeWebhookSecret ?? EXAMPLE_STRIPE_WEBHOOK_SECRET
  // GitHub sends a delivery again with the same X-GitHub-Delivery header: that header is the key.
  const deliveries: GitHubDelivery[] = []
  const githubSecret = options.githubWebhookSecret ?? EXAMPLE_GITHUB_WEBHOOK_SECRET
  await app.register(async (webhooks) => {
    // The signature is of the raw bytes: this context keeps JSON bodies as a Buffer.
    webhooks.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_request, body, done) => {
      done(null, body)
    })
    webhooks.post(
      '/webhooks/stripe',
      {
        config: {
          idempotency: {
            principal: () => 'stripe',
            key: (request) => (request.body as StripeEvent).id,
          },
        },
        // Before the claim: a delivery with a bad signature never holds its key.
        preValidation: async (request, reply) => {
          const raw = request.body as Buffer
          if (!verifyStripeSignature(raw, request.headers['stripe-signature'] as string | undefined, webhookSecret)) {
            return reply.code(400).send({ error: 'bad signature' })
          }
          try {
            request.body = JSON.parse(raw.toString('utf8'))
          } catch {
            return reply.code(400).send({ error: 'the event is not JSON' })
          }
        },
      },
      async (request) => {
        const event = request.body as StripeEvent
        events.push(event)
        return { received: event.id, handled: events.length }
      },
    )
    webhooks.post(
      '/webhooks/github',
      {
        config: {
          idempotency: {
            principal: () => 'github',
            key: (request) => request.headers['x-github-delivery'] as string | undefined,
          },
        },
        preValidation: async (request, reply) => {
          const raw = request.body as Buffer
          const signature = request.headers['x-hub-signature-256'] as string | undefined
          if (!verifyGitHubSignature(raw, signature, githubSecret)) {
            return reply.code(401).send({ error: 'bad signature' })
          }
          try {
            request.body = JSON.parse(raw.toString('utf8'))
          } catch {
            return reply.code(400).send({ error: 'the payload is not JSON' })
          }
        },
      },
      async (request, reply) => {
        const payload = request.body as { action?: string }
        deliveries.push({
          delivery: request.headers['x-github-delivery'] as string,
          event: String(request.headers['x-github-event'] ?? 'unknown'),
          action: payload.action,
        })
        return reply.code(202).send({ accepted: deliveries.length })
      },
    )
  })
  if (openapi) app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger())
  app.get('/webhooks/stripe/events', async () => ({ events }))
  app.get('/webhooks/github/deliveries', async () => ({ deliveries }))
  if (ledger) {
    app.get('/reservations', async (request) => ({ reservations: await ledger.reservationsOf(request.user as string) }))
  }

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
    paymentsUrl: process.env.PAYMENTS_URL ?? 'http://127.0.0.1:3001',
    stripeWebhookSecret: process.env.STRIPE_WEBHOOK_SECRET,
    githubWebhookSecret: process.env.GITHUB_WEBHOOK_SECRET,
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
