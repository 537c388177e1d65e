/**
 * The example API as one Web-standard handler, `(request: Request) => Response` (the shape of a
 * Next.js route handler, `Bun.serve` and `Deno.serve`), with `idemkit/fetch`: the same routes,
 * bodies, statuses, headers and environment variables as the Fastify example
 * (examples/fastify-app.ts), so examples/requests.sh runs against it too. It runs unchanged on
 * Node (through @hono/node-server), Bun and Deno.
 *
 *   npm run example:fetch                      # in-memory store
 *   REDIS_URL=redis://127.0.0.1:6379 npm run example:fetch
 *   DATABASE_URL=postgres://user@127.0.0.1:5432/app npm run example:fetch
 *   bun examples/fetch-app.ts                  # the same on Bun
 *
 * Env: PORT (3000), HOST (127.0.0.1), REDIS_URL or DATABASE_URL, IDEMPOTENCY_SECRET,
 * IDEMPOTENCY_LEASE_MS (30000), IDEMPOTENCY_WAIT_MS (unset: 409 for a duplicate still running).
 * `Authorization: Bearer <name>` makes <name> the principal; without it every route answers 401.
 */
import { STATUS_CODES } from 'node:http'
import { pathToFileURL } from 'node:url'
import idempotency, { type IdempotencyStore, idempotencyOf } from '../plugins/fetch/index.js'
import type { Ledger } from './ledger.js'
import { type LineLogger, type LoggerOption, lineLogger, logStartupReport, optionLogger } from './line-logger.js'
import { depositError, orderError } from './order-checks.js'
import { serveFetch } from './serve-fetch.js'
import { type OrderInput, Shop } from './shop.js'

export interface FetchExampleOptions {
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

const JSON_TYPE = 'application/json; charset=utf-8'
const JSON_MEDIA_TYPE = /^\s*application\/json\s*(;|$)/i
const json = (body: unknown, status = 200, headers: Record<string, string> = {}) =>
  new Response(JSON.stringify(body), { status, headers: { 'content-type': JSON_TYPE, ...headers } })

/** The caller, from `Authorization: Bearer <name>`: the example's authentication and principal. */
function userOf(request: Request): string | undefined {
  return /^Bearer ([A-Za-z0-9._~+/-]{1,64})$/.exec(request.headers.get('authorization') ?? '')?.[1]
}

/** The 401 of a request without a caller. */
function unauthorized(): Response {
  const problem = {
    type: 'about:blank',
    title: 'Unauthorized',
    status: 401,
    detail: 'Send Authorization: Bearer <name>.',
  }
  return new Response(JSON.stringify(problem), {
    status: 401,
    headers: { 'content-type': 'application/problem+json; charset=utf-8', 'www-authenticate': 'Bearer' },
  })
}

/**
 * Validation before the idempotency layer, answered 400 like Fastify's schema validation. It
 * reads a clone of the request: the body stays the handler's to read.
 */
async function invalid(request: Request, check: (body: unknown) => string | undefined): Promise<Response | undefined> {
  let body: unknown
  // Media types are case-insensitive (RFC 9110 §8.3.1): APPLICATION/JSON is JSON, as on the other examples.
  if (JSON_MEDIA_TYPE.test(request.headers.get('content-type') ?? '')) {
    try {
      body = await request.clone().json()
    } catch {
      return json({ statusCode: 400, code: 'INVALID_JSON', error: 'Bad Request', message: 'body is not JSON' }, 400)
    }
  }
  const message = check(body)
  return message === undefined
    ? undefined
    : json({ statusCode: 400, code: 'VALIDATION', error: 'Bad Request', message }, 400)
}

/** Errors as JSON, like Fastify's default: `{ statusCode, code?, error, message }`. */
function errorResponse(error: unknown, log: LineLogger | undefined): Response {
  const { status, statusCode, code, message } = error as Record<string, unknown>
  const candidate = Number(status ?? statusCode)
  const http = Number.isInteger(candidate) && candidate >= 400 && candidate <= 599 ? candidate : 500
  if (http >= 500) log?.error({ err: String(error) }, 'request failed')
  const body = { statusCode: http, ...(typeof code === 'string' ? { code } : {}) }
  return json({ ...body, error: STATUS_CODES[http] ?? 'Error', message: String(message ?? error) }, http)
}

/** Builds the example app: one handler for every route, to serve with `Bun.serve`, `Deno.serve`, or Node. */
export function buildFetchExampleApp(options: FetchExampleOptions): (request: Request) => Promise<Response> {
  const shop = new Shop()
  const log = optionLogger(options.logger)
  const idem = idempotency({
    store: options.store,
    secrets: { current: 1, keys: { 1: options.secret } },
    // Authentication ran before the wrapped handlers are called: the caller is known.
    principal: userOf,
    leaseMs: options.leaseMs,
    inFlight: options.waitMs ? { waitMs: options.waitMs } : undefined,
    // No framework logger: the outcome of every protected request, as the other examples log it.
    onEvent: (event) => {
      if (event.type === 'outcome') log?.info({ idempotency: event }, 'idempotency outcome')
    },
  })

  // The wrapped handlers: their arguments after the request (the caller, the account) pass through.
  const createOrder = idem(async (request: Request, user: string) => {
    const order = await shop.createOrder(user, (await request.json()) as OrderInput, idempotencyOf(request))
    return json(order, 201, { location: `/orders/${order.id}` })
  })
  const ledger = options.ledger
  const deposit = idem(
    async (request: Request, user: string, accountId: string) => {
      const { amount } = (await request.json()) as { amount: number }
      const info = idempotencyOf(request)
      const db = info?.db
      const result =
        ledger && db ? await ledger.deposit(db, user, accountId, amount) : shop.deposit(user, accountId, amount, info)
      return json(result, 201)
    },
    // No route pattern reaches a handler: the operation is named, so every account shares one
    // (the same key on two accounts is a 422); on PostgreSQL the deposit commits with its answer.
    { operation: 'POST /accounts/:id/deposits', transaction: ledger !== undefined },
  )

  async function route(request: Request): Promise<Response> {
    const user = userOf(request)
    // Authentication first: the principal must be known before the idempotency layer runs.
    if (user === undefined) return unauthorized()
    const { pathname } = new URL(request.url)
    const method = request.method
    if (pathname === '/orders' && method === 'POST') {
      return (await invalid(request, orderError)) ?? createOrder(request, user)
    }
    if (pathname === '/orders' && method === 'GET') return json({ orders: shop.ordersOf(user) })
    const account = /^\/accounts\/([^/]+)(\/deposits)?$/.exec(pathname)
    const accountId = decodeURIComponent(account?.[1] ?? '')
    if (account?.[2] !== undefined && method === 'POST') {
      return (await invalid(request, (body) => depositError(body, accountId))) ?? deposit(request, user, accountId)
    }
    if (account !== null && account[2] === undefined && method === 'GET') {
      const balance = ledger ? await ledger.balanceOf(user, accountId) : shop.balanceOf(user, accountId)
      return json({ accountId, balance })
    }
    return json({ message: `Route ${method}:${pathname} not found`, error: 'Not Found', statusCode: 404 }, 404)
  }

  return async function exampleApp(request) {
    try {
      return await route(request)
    } catch (error) {
      // The layer has recorded a thrown error before it got here (retryable: true frees the key).
      return errorResponse(error, log)
    }
  }
}

async function main(): Promise<void> {
  const { exampleEnvironment } = await import('./environment.js')
  const { Ledger } = await import('./ledger.js')
  const env = await exampleEnvironment()
  const log = lineLogger(process.stdout, 'info')
  const ledger = env.pool ? new Ledger(env.pool) : undefined
  await ledger?.migrate()
  const app = buildFetchExampleApp({
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
  const server = await serveFetch(app, env.port, env.host)
  log.info({}, `Server listening at http://${env.host}:${server.port} (${server.runtime})`)
  log.info({}, env.cliHint)
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      void server.close().then(() => env.close().then(() => process.exit(0)))
    })
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main().catch((error) => {
    console.error(error)
    process.exit(1)
  })
}
