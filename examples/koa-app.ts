/**
 * The example API on Koa 3 with @koa/router and @koa/bodyparser: the same routes, bodies,
 * statuses, headers and environment variables as the Fastify example (examples/fastify-app.ts),
 * so examples/requests.sh runs against it too.
 *
 *   npm run example:koa                        # in-memory store
 *   REDIS_URL=redis://127.0.0.1:6379 npm run example:koa
 *   DATABASE_URL=postgres://user@127.0.0.1:5432/app npm run example:koa
 *
 * Env: PORT (3000), HOST (127.0.0.1), REDIS_URL or DATABASE_URL, IDEMPOTENCY_SECRET,
 * IDEMPOTENCY_LEASE_MS (30000), IDEMPOTENCY_WAIT_MS (unset: 409 for a duplicate still running).
 * `Authorization: Bearer <name>` makes <name> the principal; without it every route answers 401.
 */
import { createServer, type Server, STATUS_CODES } from 'node:http'
import { pathToFileURL } from 'node:url'
import { bodyParser } from '@koa/bodyparser'
import Router from '@koa/router'
import Koa, { type Middleware } from 'koa'
import idempotency, { type IdempotencyStore, type KoaIdempotencyState } from '../plugins/koa/index.js'
import { exampleEnvironment } from './environment.js'
import { Ledger } from './ledger.js'
import { type LineLogger, type LoggerOption, lineLogger, logStartupReport, optionLogger } from './line-logger.js'
import { depositError, orderError } from './order-checks.js'
import { type OrderInput, Shop } from './shop.js'

export interface KoaExampleOptions {
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

/** The example's state: the caller (its principal) beside the middleware's `idempotency`. */
type ExampleState = KoaIdempotencyState & { user: string }

const JSON_TYPE = 'application/json; charset=utf-8'

function json(ctx: Koa.Context, body: unknown, status = 200): void {
  ctx.status = status
  ctx.type = JSON_TYPE
  ctx.body = JSON.stringify(body)
}

/** Validation before the idempotency middleware, answered 400 like Fastify's schema validation. */
function validate(check: (body: unknown, id: string) => string | undefined): Middleware<ExampleState> {
  return async (ctx, next) => {
    const params = (ctx as { params?: Record<string, string> }).params
    const message = check(ctx.request.body, params?.id ?? '')
    if (message === undefined) return next()
    json(ctx, { statusCode: 400, code: 'VALIDATION', error: 'Bad Request', message }, 400)
  }
}

/** Builds the example app (not listening): `http.createServer(app.callback())`. */
export function buildKoaExampleApp(options: KoaExampleOptions): Koa<ExampleState> {
  const app = new Koa<ExampleState>()
  const shop = new Shop()
  const log = optionLogger(options.logger)

  // Errors as JSON, like Fastify's default: `{ statusCode, code?, error, message }`. First, so it
  // answers whatever the routes throw; the idempotency middleware records that answer.
  app.use(async (ctx, next) => {
    ;(ctx as { log?: LineLogger }).log = log
    try {
      await next()
    } catch (error) {
      const { status, statusCode, code, message } = error as Record<string, unknown>
      const candidate = Number(status ?? statusCode)
      const http = Number.isInteger(candidate) && candidate >= 400 && candidate <= 599 ? candidate : 500
      if (http >= 500) log?.error({ err: String(error) }, 'request failed')
      const body = { statusCode: http, ...(typeof code === 'string' ? { code } : {}) }
      json(ctx, { ...body, error: STATUS_CODES[http] ?? 'Error', message: String(message ?? error) }, http)
    }
  })
  // Authentication first: the principal must be known before the idempotency middleware runs.
  app.use(async (ctx, next) => {
    const match = /^Bearer ([A-Za-z0-9._~+/-]{1,64})$/.exec(ctx.get('authorization'))
    if (!match) {
      const problem = {
        type: 'about:blank',
        title: 'Unauthorized',
        status: 401,
        detail: 'Send Authorization: Bearer <name>.',
      }
      ctx.status = 401
      ctx.set('www-authenticate', 'Bearer')
      ctx.type = 'application/problem+json; charset=utf-8'
      ctx.body = JSON.stringify(problem)
      return
    }
    ctx.state.user = match[1] as string
    await next()
  })
  // The body parser keeps the raw body (`ctx.request.rawBody`): the fingerprint is taken from it.
  app.use(bodyParser())

  const idem = idempotency({
    store: options.store,
    secrets: { current: 1, keys: { 1: options.secret } },
    principal: (ctx) => ctx.state.user,
    leaseMs: options.leaseMs,
    inFlight: options.waitMs ? { waitMs: options.waitMs } : undefined,
  })
  const router = new Router<ExampleState>()

  // Per route: validation, then the middleware, then the handler.
  router.post('/orders', validate(orderError), idem(), async (ctx) => {
    const order = await shop.createOrder(ctx.state.user, ctx.request.body as OrderInput, ctx.state.idempotency)
    ctx.set('location', `/orders/${order.id}`)
    json(ctx, order, 201)
  })

  router.get('/orders', (ctx) => json(ctx, { orders: shop.ordersOf(ctx.state.user) }))

  const ledger = options.ledger
  // On PostgreSQL the deposit and its stored answer commit in one transaction.
  const depositGuard = ledger ? idem({ transaction: true }) : idem()
  router.post('/accounts/:id/deposits', validate(depositError), depositGuard, async (ctx) => {
    const { amount } = ctx.request.body as { amount: number }
    const info = ctx.state.idempotency
    const db = info?.db
    const id = ctx.params.id as string
    const deposit =
      ledger && db
        ? await ledger.deposit(db, ctx.state.user, id, amount)
        : shop.deposit(ctx.state.user, id, amount, info)
    json(ctx, deposit, 201)
  })

  router.get('/accounts/:id', async (ctx) => {
    const accountId = ctx.params.id as string
    const balance = ledger
      ? await ledger.balanceOf(ctx.state.user, accountId)
      : shop.balanceOf(ctx.state.user, accountId)
    json(ctx, { accountId, balance })
  })

  app.use(router.routes())
  app.use(async (ctx) => {
    json(ctx, { message: `Route ${ctx.method}:${ctx.path} not found`, error: 'Not Found', statusCode: 404 }, 404)
  })
  // Errors are answered by the first middleware; Koa's own 'error' event would print them again.
  app.silent = true
  return app
}

async function main(): Promise<void> {
  const env = await exampleEnvironment()
  const log = lineLogger(process.stdout, 'info')
  const ledger = env.pool ? new Ledger(env.pool) : undefined
  await ledger?.migrate()
  const app = buildKoaExampleApp({
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
  const server: Server = createServer(app.callback())
  server.listen(env.port, env.host, () => {
    log.info({}, `Server listening at http://${env.host}:${env.port}`)
    log.info({}, env.cliHint)
  })
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      server.close(() => {
        void env.close().then(() => process.exit(0))
      })
      server.closeIdleConnections()
    })
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main().catch((error) => {
    console.error(error)
    process.exit(1)
  })
}
