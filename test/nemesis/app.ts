/**
 * The app the nemesis runs three times: the idempotency layer on Fastify or Express
 * (FRAMEWORK), on the Redis store (REDIS_URL, through the run's proxy) or the PostgreSQL store
 * (DATABASE_URL, through the run's proxy). Every handler execution is appended to EXECUTION_LOG
 * before the handler does anything else (test/faults/apps/common.ts), the count the checker
 * holds the answers against.
 *
 * Routes (test/nemesis/routes.ts, with their rules): POST /orders, /takeovers and /waits
 * `{ item, qty, delayMs?, stallMs? }`, answered 201 with a new order id; on PostgreSQL also POST /deposits `{ account, amount }` (`transaction: true`):
 * the deposit row and the account's balance are written through `idempotency.db`, in the
 * transaction that stores the answer. POST /resumes `{ item, qty, delayMs?, stallMs? }`
 * (`resume: true`) charges the run's payment service (PAYMENTS_URL, examples/payments-app.ts)
 * through `idemkit/client` with `keyFor('charge')`, for the customer `<principal>/<key>`, and
 * answers 201 with a new order id and the charge's id. GET /orders (no key) answers 200 for the
 * start-up check.
 *
 * NEMESIS_BROKEN makes a deliberately broken build, for the checker's own tests (broken.ts).
 *
 * Env: PORT, HOST, FRAMEWORK ('fastify' | 'express'), REDIS_URL or DATABASE_URL,
 * IDEMPOTENCY_SECRET, IDEMPOTENCY_LEASE_MS, IDEMPOTENCY_CLAIM_TIMEOUT_MS,
 * REDIS_COMMAND_TIMEOUT_MS, EXECUTION_LOG, PAYMENTS_URL, NEMESIS_BROKEN.
 */
import { createServer } from 'node:http'
import express, { type NextFunction, type Request, type Response } from 'express'
import Fastify from 'fastify'
import type { Cluster, Redis } from 'ioredis'
import pg from 'pg'
import expressIdempotency from '../../plugins/express/index.js'
import fastifyIdempotency from '../../plugins/fastify/index.js'
import { idempotentFetch } from '../../src/client/index.js'
import type { IdempotencyStore } from '../../src/core/store.js'
import { postgresStore } from '../../src/stores/postgres/index.js'
import { env, idempotencyOptionsFromEnv, record, redisFromEnv } from '../faults/apps/common.js'
import { sleep } from '../helpers/sleep.js'
import { brokenBuild, brokenStore } from './broken.js'
import { ORDER_ROUTES, routeOptions } from './routes.js'

interface Order {
  item: string
  qty: number
  delayMs?: number
  stallMs?: number
}
interface Deposit {
  account: string
  amount: number
}

const isOrder = (body: unknown): body is Order => {
  if (typeof body !== 'object' || body === null) return false
  const { item, qty, delayMs, stallMs, ...rest } = body as Record<string, unknown>
  return (
    Object.keys(rest).length === 0 &&
    typeof item === 'string' &&
    Number.isSafeInteger(qty) &&
    (delayMs === undefined || (Number.isSafeInteger(delayMs) && (delayMs as number) <= 30_000)) &&
    (stallMs === undefined || (Number.isSafeInteger(stallMs) && (stallMs as number) <= 5_000))
  )
}
const isDeposit = (body: unknown): body is Deposit => {
  if (typeof body !== 'object' || body === null) return false
  const { account, amount, ...rest } = body as Record<string, unknown>
  return Object.keys(rest).length === 0 && typeof account === 'string' && Number.isSafeInteger(amount)
}

interface Backend {
  readonly store: IdempotencyStore
  readonly pool?: pg.Pool
  readonly redis?: Redis | Cluster
  readonly close: () => Promise<void>
}

async function backend(onEvent: (event: { message: string }) => void): Promise<Backend> {
  if (env.DATABASE_URL) {
    const pool = new pg.Pool({ connectionString: env.DATABASE_URL, max: 10, statement_timeout: 6_000 })
    pool.on('error', () => {})
    const store = postgresStore({ pool, onEvent })
    // Every instance migrates at start-up (the store's migrations take no lock when current).
    for (let attempt = 1; ; attempt++) {
      try {
        await store.migrate()
        await pool.query(
          `CREATE TABLE IF NOT EXISTS nemesis_deposits (id bigserial PRIMARY KEY, principal text NOT NULL,
           key text NOT NULL, account text NOT NULL, amount int NOT NULL, token int NOT NULL, pid int NOT NULL)`,
        )
        await pool.query(
          'CREATE TABLE IF NOT EXISTS nemesis_balances (account text PRIMARY KEY, balance bigint NOT NULL)',
        )
        await pool.query(
          `CREATE TABLE IF NOT EXISTS nemesis_resume_orders (id bigserial PRIMARY KEY, principal text NOT NULL,
           key text NOT NULL, charge text NOT NULL, token int NOT NULL, pid int NOT NULL)`,
        )
        break
      } catch (error) {
        // Three instances migrating at once may race on CREATE TABLE IF NOT EXISTS; or the
        // server is restarting: try again.
        if (attempt >= 20) throw error
        await sleep(250)
      }
    }
    return { store, pool, close: () => store.close().then(() => pool.end()) }
  }
  const { redis, store } = await redisFromEnv(onEvent)
  return { store, redis, close: () => store.close().then(() => redis.disconnect()) }
}

/**
 * The handler's work for an order (on /orders, /takeovers and /waits): the execution line, the
 * stall, the wait, the answer. `stallMs` holds the event loop (a GC pause, a slow synchronous
 * step) on the key's first execution only: no lease renewal goes out meanwhile, so a lease
 * shorter than the stall runs out and a duplicate takes the key over while this one still runs.
 */
async function order(
  route: string,
  body: Order,
  key: string,
  user: string,
  token: number,
): Promise<Record<string, unknown>> {
  record({ type: 'execution', route, key, user, token, pid: process.pid, time: Date.now() })
  if (body.stallMs && token <= 1) {
    const until = Date.now() + body.stallMs
    while (Date.now() < until) {
      // held: nothing else of this process runs
    }
  }
  if (body.delayMs) await sleep(body.delayMs)
  return { id: crypto.randomUUID(), item: body.item, qty: body.qty, token, pid: process.pid }
}

/**
 * The payment service's client: retries a network error, a 409 (the same charge still running,
 * a stale run's call beside a resumed one's) and a 503, within a deadline shorter than the
 * clients' wait for an answer.
 */
const payments = idempotentFetch.with({
  deadlineMs: 6_000,
  attemptTimeoutMs: 3_000,
  initialDelayMs: 100,
  maxDelayMs: 1_000,
})

/** What `/resumes` needs of the PostgreSQL store: the step that commits the charge, and the transaction. */
interface RecoveryPoints {
  readonly step: <T>(name: string, run: () => Promise<T>) => Promise<T>
  readonly db: { query: (text: string, values?: unknown[]) => Promise<unknown> }
}

/**
 * The handler's work on /resumes: the execution line, the charge at the payment service under
 * `keyFor('charge')` (the same key on every run of the key: a resumed run gets the first run's
 * charge back), the stall on the first run (after the charge, as a crash after it would be), the
 * wait, the answer naming the charge. The body sent downstream is built from the request only, so
 * it is the same on every run. The `fresh-downstream-key` build (broken.ts) sends a new key each run.
 *
 * On PostgreSQL (`points`: `transaction: true`) the charge is a step, committed with its recovery
 * point before the stall: a re-run that finds it committed does not call the payment service and
 * gets the stored charge back. A `step` line (ran or skipped, the charge) goes to the execution
 * log after it; then the order's row (`nemesis_resume_orders`, naming the charge) is written in
 * the transaction that stores the answer.
 */
async function resumeRun(
  body: Order,
  key: string,
  user: string,
  token: number,
  keyFor: (name: string) => string,
  points?: RecoveryPoints,
): Promise<Record<string, unknown>> {
  const base = { route: '/resumes', key, user, token, pid: process.pid }
  record({ type: 'execution', ...base, time: Date.now() })
  const charge = async (): Promise<{ id: string }> => {
    const response = await payments(`${env.PAYMENTS_URL}/charges`, {
      method: 'POST',
      headers: { authorization: 'Bearer nemesis', 'content-type': 'application/json' },
      body: JSON.stringify({ customer: `${user}/${key}`, amount: body.qty }),
      idempotencyKey: broken === 'fresh-downstream-key' ? crypto.randomUUID() : keyFor('charge'),
    }).catch((error: unknown) => {
      // No answer within the deadline (its answers dropped, its connections half-open, its
      // process paused): the charge may have landed under the key, which the next run sends again.
      throw new HandlerRetryable(`the payment service did not answer: ${String(error)}`)
    })
    // Nothing was charged, or the charge is there under the key for the next run: retryable.
    if (response.status !== 201) throw new HandlerRetryable(`the payment service answered ${response.status}`)
    const { id } = (await response.json()) as { id: string }
    return { id }
  }
  let ran = false
  const charged =
    points === undefined
      ? await charge()
      : await points.step('charge', () => {
          ran = true
          return charge()
        })
  if (points !== undefined) record({ type: 'step', ...base, step: 'charge', ran, charge: charged.id, time: Date.now() })
  if (body.stallMs && token <= 1) {
    const until = Date.now() + body.stallMs
    while (Date.now() < until) {
      // held: nothing else of this process runs
    }
  }
  if (body.delayMs) await sleep(body.delayMs)
  if (points !== undefined) {
    try {
      await points.db.query(
        'INSERT INTO nemesis_resume_orders (principal, key, charge, token, pid) VALUES ($1, $2, $3, $4, $5)',
        [user, key, charged.id, token, process.pid],
      )
    } catch (error) {
      // The transaction rolls back; the charge's step stays committed for the next run.
      throw new HandlerRetryable(String(error))
    }
  }
  return { id: crypto.randomUUID(), item: body.item, qty: body.qty, token, pid: process.pid, charge: charged.id }
}

/** The handler's work for a deposit, inside the layer's transaction. */
async function deposit(
  db: { query: (text: string, values?: unknown[]) => Promise<unknown> },
  body: Deposit,
  key: string,
  user: string,
  token: number,
): Promise<Record<string, unknown>> {
  record({ type: 'execution', route: '/deposits', key, user, token, pid: process.pid, time: Date.now() })
  try {
    await write(db, body, key, user, token)
  } catch (error) {
    // The transaction rolls back: nothing was done, and the client may retry.
    throw new HandlerRetryable(String(error))
  }
  return { id: crypto.randomUUID(), account: body.account, amount: body.amount, token, pid: process.pid }
}

/**
 * A deposit whose write failed (its transaction rolled back, so nothing was done), a charge
 * the payment service did not answer, or on PostgreSQL a charge step or order row that did not
 * commit: 503, `retryable`.
 */
class HandlerRetryable extends Error {
  readonly statusCode = 503
  readonly retryable = true
  readonly code = 'HANDLER_RETRYABLE'
}

async function write(
  db: { query: (text: string, values?: unknown[]) => Promise<unknown> },
  body: Deposit,
  key: string,
  user: string,
  token: number,
): Promise<void> {
  await db.query(
    'INSERT INTO nemesis_deposits (principal, key, account, amount, token, pid) VALUES ($1, $2, $3, $4, $5, $6)',
    [user, key, body.account, body.amount, token, process.pid],
  )
  await db.query(
    `INSERT INTO nemesis_balances (account, balance) VALUES ($1, $2)
     ON CONFLICT (account) DO UPDATE SET balance = nemesis_balances.balance + EXCLUDED.balance`,
    [body.account, body.amount],
  )
}

/** NEMESIS_BROKEN (broken.ts): a deliberately broken build, for the checker's own tests. */
const broken = brokenBuild(env.NEMESIS_BROKEN)
/** The `no-principal` build leaves the principal out of the scope. */
const noPrincipal = broken === 'no-principal'

/** `/resumes`'s options: on PostgreSQL in a transaction, for its recovery points. */
const resumeOptions = (chosen: Backend) => ({
  ...routeOptions('/resumes'),
  ...(chosen.pool === undefined ? {} : { transaction: true }),
})

/** On PostgreSQL, the run's `step` and transaction; on Redis none (no recovery points there). */
function recoveryPoints(
  chosen: Backend,
  run: { step?: RecoveryPoints['step']; db?: RecoveryPoints['db'] | undefined },
): RecoveryPoints | undefined {
  if (chosen.pool === undefined) return undefined
  const { step, db } = run
  if (step === undefined || db === undefined) throw new Error('/resumes on PostgreSQL runs in a transaction')
  return { step: step.bind(run), db }
}

const bearer = (header: string | undefined) => /^Bearer ([A-Za-z0-9._~+/-]{1,64})$/.exec(header ?? '')?.[1]

async function fastifyApp(chosen: Backend): Promise<void> {
  const app = Fastify({ logger: { level: 'error' }, disableRequestLogging: true })
  app.decorateRequest('user', null)
  app.addHook('onRequest', async (request, reply) => {
    const user = bearer(request.headers.authorization)
    if (user === undefined) return reply.code(401).send({ error: 'Send Authorization: Bearer <name>.' })
    ;(request as unknown as { user: string }).user = user
  })
  await app.register(fastifyIdempotency, {
    store: chosen.store,
    ...idempotencyOptionsFromEnv(),
    principal: (request) => (noPrincipal ? 'anyone' : (request as unknown as { user?: string }).user),
  })
  for (const route of ORDER_ROUTES) {
    app.post(route, { config: { idempotency: routeOptions(route) } }, async (request, reply) => {
      if (!isOrder(request.body)) return reply.code(400).send({ error: 'invalid body' })
      const user = (request as unknown as { user: string }).user
      const key = String(request.headers['idempotency-key'])
      const token = request.idempotency?.fencingToken ?? 0
      return reply.code(201).send(await order(route, request.body, key, user, token))
    })
  }
  app.post('/resumes', { config: { idempotency: resumeOptions(chosen) } }, async (request, reply) => {
    const run = request.idempotency
    if (!isOrder(request.body) || run == null) return reply.code(400).send({ error: 'invalid body' })
    const user = (request as unknown as { user: string }).user
    const key = String(request.headers['idempotency-key'])
    return reply
      .code(201)
      .send(await resumeRun(request.body, key, user, run.fencingToken ?? 0, run.keyFor, recoveryPoints(chosen, run)))
  })
  if (chosen.pool !== undefined) {
    app.post('/deposits', { config: { idempotency: { transaction: true } } }, async (request, reply) => {
      const db = request.idempotency?.db
      if (!isDeposit(request.body) || db === undefined) return reply.code(400).send({ error: 'invalid body' })
      const user = (request as unknown as { user: string }).user
      const key = String(request.headers['idempotency-key'])
      const token = request.idempotency?.fencingToken ?? 0
      return reply.code(201).send(await deposit(db, request.body, key, user, token))
    })
  }
  app.get('/orders', async () => ({ ok: true }))
  await app.listen({ port: Number(env.PORT), host: env.HOST ?? '127.0.0.1' })
}

async function expressApp(chosen: Backend): Promise<void> {
  const app = express()
  app.use((req, res, next) => {
    if (req.method === 'GET') return next()
    const user = bearer(req.headers.authorization)
    if (user === undefined) {
      res.status(401).json({ error: 'Send Authorization: Bearer <name>.' })
      return
    }
    ;(req as unknown as { user: string }).user = user
    next()
  })
  const idem = expressIdempotency({
    store: chosen.store,
    ...idempotencyOptionsFromEnv(),
    principal: (req) => (noPrincipal ? 'anyone' : (req as unknown as { user?: string }).user),
  })
  app.use(express.json(), idem.captureBody)
  const handle =
    (run: (req: Request, res: Response) => Promise<void>) => (req: Request, res: Response, next: NextFunction) => {
      run(req, res).catch(next)
    }
  for (const route of ORDER_ROUTES) {
    app.post(
      route,
      idem(routeOptions(route)),
      handle(async (req, res) => {
        if (!isOrder(req.body)) {
          res.status(400).json({ error: 'invalid body' })
          return
        }
        const user = (req as unknown as { user: string }).user
        const key = String(req.headers['idempotency-key'])
        res.status(201).json(await order(route, req.body, key, user, req.idempotency?.fencingToken ?? 0))
      }),
    )
  }
  app.post(
    '/resumes',
    idem(resumeOptions(chosen)),
    handle(async (req, res) => {
      const run = req.idempotency
      if (!isOrder(req.body) || run == null) {
        res.status(400).json({ error: 'invalid body' })
        return
      }
      const user = (req as unknown as { user: string }).user
      const key = String(req.headers['idempotency-key'])
      res
        .status(201)
        .json(await resumeRun(req.body, key, user, run.fencingToken ?? 0, run.keyFor, recoveryPoints(chosen, run)))
    }),
  )
  if (chosen.pool !== undefined) {
    app.post(
      '/deposits',
      idem({ transaction: true }),
      handle(async (req, res) => {
        const db = req.idempotency?.db
        if (!isDeposit(req.body) || db === undefined) {
          res.status(400).json({ error: 'invalid body' })
          return
        }
        const user = (req as unknown as { user: string }).user
        const key = String(req.headers['idempotency-key'])
        const token = req.idempotency?.fencingToken ?? 0
        res.status(201).json(await deposit(db, req.body, key, user, token))
      }),
    )
  }
  app.get('/orders', (_req, res) => {
    res.json({ ok: true })
  })
  app.use(idem.errors)
  app.use((error: unknown, _req: Request, res: Response, next: NextFunction) => {
    if (res.headersSent) return next(error)
    const { statusCode, code } = error as { statusCode?: number; code?: unknown }
    const status = Number(statusCode ?? 500)
    res
      .status(status >= 400 && status <= 599 ? status : 500)
      .json({ ...(typeof code === 'string' ? { code } : {}), error: String(error) })
  })
  const server = createServer(app)
  await new Promise<void>((resolve) => server.listen(Number(env.PORT), env.HOST ?? '127.0.0.1', resolve))
}

async function main(): Promise<void> {
  // Each store event as a JSON line with its time: the run keeps it beside the history.
  const onEvent = (event: { message: string }) => {
    const fields = Object.fromEntries(Object.entries(event).filter(([, value]) => typeof value !== 'object'))
    process.stderr.write(`${JSON.stringify({ time: Date.now(), pid: process.pid, ...fields })}\n`)
  }
  const chosen = await backend(onEvent)
  const wrapped = { ...chosen, store: brokenStore(chosen.store, broken, chosen.redis) }
  if (env.FRAMEWORK === 'express') await expressApp(wrapped)
  else await fastifyApp(wrapped)
  process.once('SIGTERM', () => {
    void chosen.close().then(() => process.exit(0))
  })
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
