/**
 * The example API on Express 5: the same routes, bodies, statuses, headers and environment
 * variables as the Fastify example (examples/fastify-app.ts), so examples/requests.sh runs
 * against both.
 *
 *   npm run example:express                       # in-memory store
 *   REDIS_URL=redis://127.0.0.1:6379 npm run example:express
 *   DATABASE_URL=postgres://user@127.0.0.1:5432/app npm run example:express
 *
 * Env: PORT (3000), HOST (127.0.0.1), REDIS_URL or DATABASE_URL, IDEMPOTENCY_SECRET,
 * IDEMPOTENCY_LEASE_MS (30000), IDEMPOTENCY_WAIT_MS (unset: 409 for a duplicate still running).
 * `Authorization: Bearer <name>` makes <name> the principal; without it every route answers 401.
 */
import { createServer, STATUS_CODES } from 'node:http'
import { pathToFileURL } from 'node:url'
import express, {
  type ErrorRequestHandler,
  type Express as ExpressApp,
  type Request,
  type RequestHandler,
  type Response,
} from 'express'
import idempotency, { type IdempotencyStore } from '../plugins/express/index.js'
import { exampleEnvironment } from './environment.js'
import { Ledger } from './ledger.js'
import { type LineLogger, type LoggerOption, lineLogger, logStartupReport, optionLogger } from './line-logger.js'
import { type OrderInput, Shop } from './shop.js'

declare global {
  namespace Express {
    interface Request {
      /** The authenticated caller (the example's principal). */
      user?: string
      /** A pino-style logger; the idempotency middleware logs through it. */
      log?: LineLogger
    }
  }
}

export interface ExpressExampleOptions {
  readonly store: IdempotencyStore
  readonly secret: string
  readonly leaseMs?: number
  /** Duplicates of a request still running wait this long for its answer (unset: 409 at once). */
  readonly waitMs?: number
  /** `true`: JSON log lines on stdout; `{ stream, level }`: JSON lines written to `stream`. */
  readonly logger?: LoggerOption
  /** The `express` module to build the app with (the tests pass each supported major). */
  readonly express?: typeof express
  /**
   * Balances in PostgreSQL (with the PostgreSQL store): deposits then run in the layer's
   * transaction (`transaction: true`). Without it, balances live in this process's memory.
   */
  readonly ledger?: Ledger
}

/** A 400 answered with a JSON body, like Fastify's schema validation. */
class ValidationError extends Error {
  readonly statusCode = 400
  readonly code = 'VALIDATION'
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value)
const isInteger = (value: unknown, min: number, max = Number.MAX_SAFE_INTEGER): value is number =>
  Number.isSafeInteger(value) && (value as number) >= min && (value as number) <= max

/** `POST /orders` body: `{ item, qty, delayMs?, fail? }`, nothing else. */
const validateOrder: RequestHandler = (req, _res, next) => {
  const body: unknown = req.body
  if (!isObject(body)) return next(new ValidationError('body must be object'))
  const unknown = Object.keys(body).find((name) => !['item', 'qty', 'delayMs', 'fail'].includes(name))
  if (unknown !== undefined) return next(new ValidationError(`body must NOT have additional property ${unknown}`))
  if (typeof body.item !== 'string' || body.item.length < 1 || body.item.length > 200) {
    return next(new ValidationError('body/item must be a string of 1 to 200 characters'))
  }
  if (!isInteger(body.qty, 1)) return next(new ValidationError('body/qty must be an integer >= 1'))
  if (body.delayMs !== undefined && !isInteger(body.delayMs, 0, 30_000)) {
    return next(new ValidationError('body/delayMs must be an integer from 0 to 30000'))
  }
  if (body.fail !== undefined && body.fail !== 'retryable' && body.fail !== 'unknown') {
    return next(new ValidationError('body/fail must be equal to one of the allowed values'))
  }
  next()
}

/** `:id` is 1 to 64 of `[A-Za-z0-9_-]`. */
const validateAccount: RequestHandler = (req, _res, next) => {
  if (typeof req.params.id !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(req.params.id)) {
    return next(new ValidationError('params/id must match pattern "^[A-Za-z0-9_-]{1,64}$"'))
  }
  next()
}

/** `POST /accounts/:id/deposits` body: `{ amount }`, a positive integer. */
const validateDeposit: RequestHandler = (req, _res, next) => {
  const body: unknown = req.body
  if (!isObject(body)) return next(new ValidationError('body must be object'))
  const unknown = Object.keys(body).find((name) => name !== 'amount')
  if (unknown !== undefined) return next(new ValidationError(`body must NOT have additional property ${unknown}`))
  if (!isInteger(body.amount, 1)) return next(new ValidationError('body/amount must be an integer >= 1'))
  next()
}

/**
 * An async route handler whose failure goes on to `next(error)`, so that `idem.errors` sees it:
 * Express 5 does this for a rejected promise itself, Express 4 does not (the request would hang).
 */
function handle(run: (req: Request, res: Response) => Promise<void>): RequestHandler {
  return (req, res, next) => {
    run(req, res).catch(next)
  }
}

/** Builds the example app (not listening): `http.createServer(app).listen(...)`. */
export async function buildExpressExampleApp(options: ExpressExampleOptions): Promise<ExpressApp> {
  const framework = options.express ?? express
  const app = framework()
  const shop = new Shop()
  app.disable('x-powered-by')

  app.use(requestLogger(options.logger ?? false))
  // Authentication first: the principal must be known before the idempotency middleware runs.
  app.use((req, res, next) => {
    const match = /^Bearer ([A-Za-z0-9._~+/-]{1,64})$/.exec(req.headers.authorization ?? '')
    if (!match) {
      res
        .status(401)
        .set('content-type', 'application/problem+json; charset=utf-8')
        .set('www-authenticate', 'Bearer')
        .send(
          JSON.stringify({
            type: 'about:blank',
            title: 'Unauthorized',
            status: 401,
            detail: 'Send Authorization: Bearer <name>.',
          }),
        )
      return
    }
    req.user = match[1] as string
    next()
  })
  const idem = idempotency({
    store: options.store,
    secrets: { current: 1, keys: { 1: options.secret } },
    principal: (req) => req.user,
    leaseMs: options.leaseMs,
    inFlight: options.waitMs ? { waitMs: options.waitMs } : undefined,
  })
  // Then body parsing, with the body recorded for the fingerprint as the parser produced it
  // (before any validator could rewrite it); then, per route, validation and the middleware.
  app.use(framework.json(), idem.captureBody)

  app.post(
    '/orders',
    validateOrder,
    idem(),
    handle(async (req, res) => {
      const order = await shop.createOrder(req.user as string, req.body as OrderInput, req.idempotency)
      res.status(201).location(`/orders/${order.id}`).json(order)
    }),
  )

  app.get('/orders', (req, res) => {
    res.json({ orders: shop.ordersOf(req.user as string) })
  })

  const ledger = options.ledger
  // On PostgreSQL the deposit and its stored answer commit in one transaction.
  const depositGuard = ledger ? idem({ transaction: true }) : idem()
  app.post(
    '/accounts/:id/deposits',
    validateAccount,
    validateDeposit,
    depositGuard,
    handle(async (req, res) => {
      const amount = (req.body as { amount: number }).amount
      const db = req.idempotency?.db
      const deposit =
        ledger && db
          ? await ledger.deposit(db, req.user as string, req.params.id as string, amount)
          : shop.deposit(req.user as string, req.params.id as string, amount, req.idempotency)
      res.status(201).json(deposit)
    }),
  )

  app.get(
    '/accounts/:id',
    handle(async (req, res) => {
      const principal = req.user as string
      const accountId = req.params.id as string
      const balance = ledger ? await ledger.balanceOf(principal, accountId) : shop.balanceOf(principal, accountId)
      res.json({ accountId, balance })
    }),
  )

  // After the routes: shows the idempotency layer the error (retryable or not), then answers.
  app.use(idem.errors)
  app.use((req, res) => {
    res
      .status(404)
      .json({ message: `Route ${req.method}:${req.originalUrl} not found`, error: 'Not Found', statusCode: 404 })
  })
  app.use(errorHandler)
  return app
}

/** Errors as JSON, like Fastify's default: `{ statusCode, code?, error, message }`. */
const errorHandler: ErrorRequestHandler = (error, req, res, next) => {
  if (res.headersSent) return next(error)
  const { status, statusCode, code, message } = error as {
    status?: unknown
    statusCode?: unknown
    code?: unknown
    message?: unknown
  }
  const candidate = Number(status ?? statusCode)
  const http = Number.isInteger(candidate) && candidate >= 400 && candidate <= 599 ? candidate : 500
  if (http >= 500) req.log?.error({ err: String(error) }, 'request failed')
  res.status(http).json({
    statusCode: http,
    ...(typeof code === 'string' ? { code } : {}),
    error: STATUS_CODES[http] ?? 'Error',
    message: typeof message === 'string' ? message : 'Error',
  })
}

function requestLogger(logger: ExpressExampleOptions['logger']): RequestHandler {
  const log = optionLogger(logger)
  return (req, _res, next) => {
    if (log !== undefined) req.log = log
    next()
  }
}

async function main(): Promise<void> {
  const env = await exampleEnvironment()
  const log = lineLogger(process.stdout, 'info')
  const ledger = env.pool ? new Ledger(env.pool) : undefined
  await ledger?.migrate()
  const app = await buildExpressExampleApp({
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
  const server = createServer(app)
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      server.close(() => {
        void env.close().then(() => process.exit(0))
      })
      server.closeIdleConnections()
    })
  }
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(env.port, env.host, resolve)
  })
  log.info({}, `Server listening at http://${env.host}:${env.port}`)
  log.info({}, env.cliHint)
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main().catch((error) => {
    console.error(error)
    process.exit(1)
  })
}
