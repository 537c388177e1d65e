/**
 * The example API on Hono 4 (@hono/node-server): the same routes, bodies, statuses, headers and
 * environment variables as the Fastify example (examples/fastify-app.ts), so
 * examples/requests.sh runs against it too.
 *
 *   npm run example:hono                       # in-memory store
 *   REDIS_URL=redis://127.0.0.1:6379 npm run example:hono
 *   DATABASE_URL=postgres://user@127.0.0.1:5432/app npm run example:hono
 *
 * Env: PORT (3000), HOST (127.0.0.1), REDIS_URL or DATABASE_URL, IDEMPOTENCY_SECRET,
 * IDEMPOTENCY_LEASE_MS (30000), IDEMPOTENCY_WAIT_MS (unset: 409 for a duplicate still running).
 * `Authorization: Bearer <name>` makes <name> the principal; without it every route answers 401.
 */
import { STATUS_CODES } from 'node:http'
import { pathToFileURL } from 'node:url'
import { serve } from '@hono/node-server'
import { type Context, Hono, type MiddlewareHandler } from 'hono'
import idempotency, { type HonoIdempotencyEnv, type IdempotencyStore } from '../plugins/hono/index.js'
import { exampleEnvironment } from './environment.js'
import { Ledger } from './ledger.js'
import { type LineLogger, type LoggerOption, lineLogger, logStartupReport, optionLogger } from './line-logger.js'
import { depositError, orderError } from './order-checks.js'
import { type OrderInput, Shop } from './shop.js'

export interface HonoExampleOptions {
  readonly store: IdempotencyStore
  readonly secret: string
  readonly leaseMs?: number
  /** Duplicates of a request still running wait this long for its answer (unset: 409 at once). */
  readonly waitMs?: number
  /** `true`: JSON log lines on stdout; `{ stream, level }`: JSON lines written to `stream`. */
  readonly logger?: LoggerOption
  /**
   * Balances in PostgreSQL (with the PostgreSQL store): deposits then run in the layer's
   * transaction (`transaction: true`). Without it, balances live in this process's memory.
   */
  readonly ledger?: Ledger
}

/** The example's variables: the caller (its principal) and the logger the middleware logs through. */
type ExampleEnv = { Variables: HonoIdempotencyEnv['Variables'] & { user: string; logger: LineLogger | undefined } }

const JSON_TYPE = 'application/json; charset=utf-8'
const JSON_MEDIA_TYPE = /^\s*application\/json\s*(;|$)/i
const json = (c: Context, body: unknown, status = 200, headers: Record<string, string> = {}) =>
  c.body(JSON.stringify(body), status as 200, { 'content-type': JSON_TYPE, ...headers })

/** Validation before the idempotency middleware, answered 400 like Fastify's schema validation. */
function validate(check: (body: unknown, id: string) => string | undefined): MiddlewareHandler<ExampleEnv> {
  return async (c, next) => {
    let body: unknown
    // Media types are case-insensitive (RFC 9110 §8.3.1): APPLICATION/JSON is JSON, as on the other examples.
    if (JSON_MEDIA_TYPE.test(c.req.header('content-type') ?? '')) {
      try {
        body = await c.req.json()
      } catch {
        return json(
          c,
          { statusCode: 400, code: 'INVALID_JSON', error: 'Bad Request', message: 'body is not JSON' },
          400,
        )
      }
    }
    const message = check(body, c.req.param('id') ?? '')
    if (message === undefined) return next()
    return json(c, { statusCode: 400, code: 'VALIDATION', error: 'Bad Request', message }, 400)
  }
}

/** Builds the example app (not listening): `serve({ fetch: app.fetch, port })`. */
export async function buildHonoExampleApp(options: HonoExampleOptions): Promise<Hono<ExampleEnv>> {
  const app = new Hono<ExampleEnv>()
  const shop = new Shop()
  const log = optionLogger(options.logger)

  // Authentication first: the principal must be known before the idempotency middleware runs.
  app.use(async (c, next) => {
    c.set('logger', log)
    const match = /^Bearer ([A-Za-z0-9._~+/-]{1,64})$/.exec(c.req.header('authorization') ?? '')
    if (!match) {
      const problem = {
        type: 'about:blank',
        title: 'Unauthorized',
        status: 401,
        detail: 'Send Authorization: Bearer <name>.',
      }
      return c.body(JSON.stringify(problem), 401, {
        'content-type': 'application/problem+json; charset=utf-8',
        'www-authenticate': 'Bearer',
      })
    }
    c.set('user', match[1] as string)
    return next()
  })
  const idem = idempotency({
    store: options.store,
    secrets: { current: 1, keys: { 1: options.secret } },
    principal: (c) => c.get('user'),
    leaseMs: options.leaseMs,
    inFlight: options.waitMs ? { waitMs: options.waitMs } : undefined,
  })

  // Per route: validation, then the middleware, then the handler.
  app.post('/orders', validate(orderError), idem(), async (c) => {
    const order = await shop.createOrder(c.get('user'), (await c.req.json()) as OrderInput, c.get('idempotency'))
    return json(c, order, 201, { location: `/orders/${order.id}` })
  })

  app.get('/orders', (c) => json(c, { orders: shop.ordersOf(c.get('user')) }))

  const ledger = options.ledger
  // On PostgreSQL the deposit and its stored answer commit in one transaction.
  const depositGuard = ledger ? idem({ transaction: true }) : idem()
  app.post('/accounts/:id/deposits', validate(depositError), depositGuard, async (c) => {
    const { amount } = (await c.req.json()) as { amount: number }
    const info = c.get('idempotency')
    const db = info?.db
    const deposit =
      ledger && db
        ? await ledger.deposit(db, c.get('user'), c.req.param('id'), amount)
        : shop.deposit(c.get('user'), c.req.param('id'), amount, info)
    return json(c, deposit, 201)
  })

  app.get('/accounts/:id', async (c) => {
    const accountId = c.req.param('id')
    const balance = ledger ? await ledger.balanceOf(c.get('user'), accountId) : shop.balanceOf(c.get('user'), accountId)
    return json(c, { accountId, balance })
  })

  app.notFound((c) =>
    json(c, { message: `Route ${c.req.method}:${c.req.path} not found`, error: 'Not Found', statusCode: 404 }, 404),
  )
  // Errors as JSON, like Fastify's default: `{ statusCode, code?, error, message }`.
  app.onError((error, c) => {
    const { status, statusCode, code } = error as { status?: unknown; statusCode?: unknown; code?: unknown }
    const candidate = Number(status ?? statusCode)
    const http = Number.isInteger(candidate) && candidate >= 400 && candidate <= 599 ? candidate : 500
    if (http >= 500) c.get('logger')?.error({ err: String(error) }, 'request failed')
    const body = { statusCode: http, ...(typeof code === 'string' ? { code } : {}) }
    return json(c, { ...body, error: STATUS_CODES[http] ?? 'Error', message: error.message }, http)
  })
  return app
}

async function main(): Promise<void> {
  const env = await exampleEnvironment()
  const log = lineLogger(process.stdout, 'info')
  const ledger = env.pool ? new Ledger(env.pool) : undefined
  await ledger?.migrate()
  const app = await buildHonoExampleApp({
    store: env.store,
    secret: env.secret,
    leaseMs: env.leaseMs,
    waitMs: env.waitMs,
    logger: true,
    ledger,
  })
  for (const warning of env.warnings) log.warn({}, warning)
  // The startup report (the Fastify plugin logs it itself): what the store runs on, and its risks.
  logStartupReport(env.store, log)
  const server = serve({ fetch: app.fetch, port: env.port, hostname: env.host }, () => {
    log.info({}, `Server listening at http://${env.host}:${env.port}`)
    log.info({}, env.cliHint)
  })
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      server.close(() => {
        void env.close().then(() => process.exit(0))
      })
      if ('closeIdleConnections' in server) server.closeIdleConnections()
    })
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main().catch((error) => {
    console.error(error)
    process.exit(1)
  })
}
