/**
 * The app the fault suite runs in child processes: the idempotency plugin on the Redis store
 * (or the PostgreSQL store with DATABASE_URL), with hooks the faults need and the example app
 * has not:
 * - every handler execution is appended to EXECUTION_LOG (one JSON line, written before the
 *   handler does anything else), a count kept outside the system under test;
 * - with SINK_URL and `sink: true` in the body, the handler writes to the fencing sink with its
 *   fencing token after its delay (it ignores its AbortSignal on purpose: the worst case);
 * - RATE_LIMIT_MAX caps requests per principal with @fastify/rate-limit (fault 11).
 *
 * Env: PORT, HOST, REDIS_URL or REDIS_CLUSTER or REDIS_SENTINELS (common.ts) or DATABASE_URL,
 * IDEMPOTENCY_SECRET, IDEMPOTENCY_LEASE_MS, IDEMPOTENCY_FAILURE_RETENTION_MS,
 * IDEMPOTENCY_CLAIM_TIMEOUT_MS, IDEMPOTENCY_WAIT_MS, IDEMPOTENCY_DURABILITY_REPLICAS,
 * REDIS_COMMAND_TIMEOUT_MS (2000),
 * EXECUTION_LOG, SINK_URL, RATE_LIMIT_MAX, RATE_LIMIT_WINDOW_MS (60000),
 * UNSAFE_EVICTION ('refuse' | 'warn'), VERIFY_AT_STARTUP ('0' to skip `store.verify()`),
 * PG_LOCK_TIMEOUT_MS, PG_STATEMENT_TIMEOUT_MS, PG_ACQUIRE_TIMEOUT_MS (the store's defaults),
 * LOG_LEVEL ('warn'), EXTRA_DELAY_MS (0: added to every handler's delay in this process, so one
 * process can still be mid-handler when another has finished the same request).
 *
 * Routes: POST /orders (expiredExecution 'recover'), POST /orders-takeover ('takeover'), both
 * with `{ item, qty, delayMs?, fail?, sink?, pad? }`; GET /_status (no auth): the Redis client's
 * status (`ready` on PostgreSQL).
 *
 * On PostgreSQL also POST /deposits (`transaction: true`: the deposit row is written through
 * `idempotency.db`) and POST /deposits-plain (the same row written on its own connection, no
 * transaction: expiredExecution 'recover'), with `{ account, amount }`: the row is inserted
 * into `fault_deposits`, a `written` line logged, then the handler waits `x-hold-ms` (a window
 * to kill it between its write and the commit). `x-hold-after-commit-ms` holds the
 * response after the answer was stored (after the commit), with a `committed` line logged.
 * With `x-balance` (on /deposits) the amount is also added to the account's row in
 * `fault_balances`, in the transaction. PG_POOL_MAX sizes the pool (20). POST /transfers: the
 * stepped route of transfers.ts. PG_TRANSACTION_IDLE_TIMEOUT_MS sets the store's
 * `transactionIdleTimeoutMs` (the lease by default). DEPOSITS_EXPIRED_EXECUTION ('recover',
 * 'takeover' or 'resume'; 'recover' by default) is the `expiredExecution` of /deposits and
 * /deposits-<orm>; in a transaction an expired execution is taken over whatever it says.
 * POST /deposits-<orm> (every ORM of test/helpers/orm-kits.ts, READ COMMITTED) and
 * /deposits-<orm>-repeatable-read: the deposit through the ORM's adapter, into `orm_deposits`
 * and `orm_balances`; the answer also names the level its transaction ran at (`isolation`).
 */

import rateLimit from '@fastify/rate-limit'
import Fastify, { type onSendHookHandler } from 'fastify'
import pg from 'pg'
import idempotency from '../../../plugins/fastify/index.js'
import type { IdempotencyStore } from '../../../src/core/store.js'
import { postgresStore } from '../../../src/stores/postgres/index.js'
import { createDepositTables, depositRoute, ISOLATIONS, ORM_KITS } from '../../helpers/orm-kits.js'
import { sleep } from '../../helpers/sleep.js'
import {
  env,
  idempotencyOptionsFromEnv,
  type OrderBody,
  optionalNumber,
  orderDelay,
  orderOutcome,
  record,
  recordExecution,
  redisFromEnv,
} from './common.js'
import { FAULT_STEPS_TABLE, transferRoutes } from './transfers.js'

declare module 'fastify' {
  interface FastifyRequest {
    user: string | null
  }
}

interface StoreChoice {
  readonly store: IdempotencyStore
  /** On PostgreSQL: the store's pool, which the deposit routes write through too. */
  readonly pool?: pg.Pool
  readonly status: () => string
  readonly close: () => Promise<void>
}

/** The PostgreSQL store on a pool of its own, its table migrated (as every instance does at startup). */
async function postgresChoice(url: string, onEvent: (event: { message: string }) => void): Promise<StoreChoice> {
  const statementTimeoutMs = optionalNumber(env.PG_STATEMENT_TIMEOUT_MS)
  // The README's pool settings: an error listener, and the server stopping what the store gave up on.
  const pool = new pg.Pool({
    connectionString: url,
    max: Number(env.PG_POOL_MAX ?? 20),
    statement_timeout: (statementTimeoutMs ?? 5_000) + 1_000,
  })
  pool.on('error', () => {})
  // Drizzle and Kysely check a connection out of this pool for a transaction without an 'error'
  // listener: one the server ends while the process is paused (its idle timeout) would throw
  // from the client's emitter on resume (docs/postgresql.md "With an ORM"; fault 25b).
  pool.on('connect', (client) => client.on('error', () => {}))
  const store = postgresStore({
    pool,
    lockTimeoutMs: optionalNumber(env.PG_LOCK_TIMEOUT_MS),
    statementTimeoutMs,
    acquireTimeoutMs: optionalNumber(env.PG_ACQUIRE_TIMEOUT_MS),
    transactionIdleTimeoutMs: optionalNumber(env.PG_TRANSACTION_IDLE_TIMEOUT_MS),
    onEvent,
  })
  await store.migrate()
  // Both processes start at once: CREATE TABLE IF NOT EXISTS is not safe against a concurrent
  // one (the second fails on pg_class's unique index), so the statements run as one implicit
  // transaction behind a transaction-scoped advisory lock.
  await pool.query(
    `SELECT pg_advisory_xact_lock(hashtext('idemkit fault tables'));
     CREATE TABLE IF NOT EXISTS fault_deposits (id bigserial PRIMARY KEY, route text NOT NULL, principal text NOT NULL,
     key text NOT NULL, account text NOT NULL, amount int NOT NULL, token int NOT NULL, pid int NOT NULL);
     CREATE TABLE IF NOT EXISTS fault_balances (account text PRIMARY KEY, balance int NOT NULL);
     ${FAULT_STEPS_TABLE}`,
  )
  await createDepositTables(pool)
  return {
    store,
    pool,
    status: () => 'ready',
    close: async () => {
      await store.close()
      await pool.end()
    },
  }
}

async function redisChoice(onEvent: (event: { message: string }) => void): Promise<StoreChoice> {
  const { redis, store } = await redisFromEnv(onEvent)
  return {
    store,
    status: () => redis.status,
    close: async () => {
      await store.close()
      redis.disconnect()
    },
  }
}

async function main(): Promise<void> {
  const app = Fastify({ logger: { level: env.LOG_LEVEL ?? 'warn' }, disableRequestLogging: true })
  const onEvent = (event: { message: string }) => app.log.warn({ idempotency: event }, event.message)
  const chosen = env.DATABASE_URL ? await postgresChoice(env.DATABASE_URL, onEvent) : await redisChoice(onEvent)
  const store = chosen.store

  app.decorateRequest('user', null)
  app.addHook('onRequest', async (request, reply) => {
    if (request.url === '/_status') return
    const match = /^Bearer ([A-Za-z0-9._~+/-]{1,64})$/.exec(request.headers.authorization ?? '')
    if (!match) return reply.code(401).send({ error: 'Send Authorization: Bearer <name>.' })
    request.user = match[1] as string
  })
  if (env.RATE_LIMIT_MAX) {
    // The README's flood cap: per principal, checked after authentication (a route-level
    // onRequest hook runs after the app's own), before the body is read or a key is claimed.
    await app.register(rateLimit, {
      max: Number(env.RATE_LIMIT_MAX),
      timeWindow: Number(env.RATE_LIMIT_WINDOW_MS ?? 60_000),
      keyGenerator: (request) => `principal:${request.user}`,
    })
  }
  await app.register(idempotency, {
    store,
    ...idempotencyOptionsFromEnv(),
    principal: (request) => request.user ?? undefined,
  })

  const schema = {
    body: {
      type: 'object',
      required: ['item', 'qty'],
      additionalProperties: false,
      properties: {
        item: { type: 'string', minLength: 1, maxLength: 200 },
        qty: { type: 'integer', minimum: 1 },
        delayMs: { type: 'integer', minimum: 0, maximum: 30_000 },
        fail: { type: 'string', enum: ['retryable', 'unknown'] },
        sink: { type: 'boolean' },
        pad: { type: 'string', maxLength: 100_000 },
      },
    },
  }
  for (const [url, expiredExecution] of [
    ['/orders', 'recover'],
    ['/orders-takeover', 'takeover'],
  ] as const) {
    app.post<{ Body: OrderBody }>(
      url,
      { schema, config: { idempotency: { expiredExecution } } },
      async (request, reply) => {
        const info = request.idempotency
        const key = request.headers['idempotency-key']
        const token = info?.fencingToken ?? 0
        const execution = { route: url, key, case: request.headers['x-case'], user: request.user, token }
        recordExecution(execution)
        await orderDelay(request.body)
        if (request.body.sink && env.SINK_URL) {
          const abortedBefore = info?.signal.aborted ?? false
          const answer = await fetch(env.SINK_URL, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ scope: `${request.user}/${key}`, token, pid: process.pid }),
          })
          record({ type: 'sink', ...execution, pid: process.pid, accepted: answer.ok, aborted: abortedBefore })
          // 412: a result, so the executor tries to complete it (and is refused as a stale owner).
          if (!answer.ok) return reply.code(412).send({ error: 'fenced: a newer attempt wrote first', token })
        }
        return reply.code(201).send(orderOutcome(request.body, token))
      },
    )
  }
  const pool = chosen.pool
  const depositsExpired = (env.DEPOSITS_EXPIRED_EXECUTION ?? 'recover') as 'recover' | 'takeover' | 'resume'
  if (pool !== undefined) {
    // Appended after the plugin's own onSend (its onRoute hook ran first), which stored the
    // answer, and on /deposits committed it: the hold comes after the commit.
    const holdAfterCommit: onSendHookHandler = async (request, _reply, payload) => {
      const hold = Number(request.headers['x-hold-after-commit-ms'] ?? 0)
      if (hold > 0 && request.idempotency !== null && !request.idempotency.replayed) {
        record({ type: 'committed', key: request.headers['idempotency-key'], user: request.user, pid: process.pid })
        await sleep(hold)
      }
      return payload
    }
    app.addHook('onRoute', (route) => {
      if (!route.url.startsWith('/deposits')) return
      const own = route.onSend === undefined ? [] : Array.isArray(route.onSend) ? route.onSend : [route.onSend]
      route.onSend = [...own, holdAfterCommit]
    })
    const depositSchema = {
      body: {
        type: 'object',
        required: ['account', 'amount'],
        additionalProperties: false,
        properties: {
          account: { type: 'string', minLength: 1, maxLength: 64 },
          amount: { type: 'integer', minimum: 1 },
        },
      },
    }
    for (const [url, transaction] of [
      ['/deposits', true],
      ['/deposits-plain', false],
    ] as const) {
      app.post<{ Body: { account: string; amount: number } }>(
        url,
        {
          schema: depositSchema,
          config: { idempotency: { transaction, expiredExecution: transaction ? depositsExpired : 'recover' } },
        },
        async (request, reply) => {
          const { account, amount } = request.body
          // A header, not the body: the fingerprint (and so a retry) does not depend on it.
          const holdMs = Math.min(30_000, Number(request.headers['x-hold-ms'] ?? 0))
          const info = request.idempotency
          const key = String(request.headers['idempotency-key'])
          const token = info?.fencingToken ?? 0
          const base = { route: url, key, user: request.user, pid: process.pid, token }
          record({ type: 'execution', ...base })
          const values = [url, request.user, key, account, amount, token, process.pid]
          const insert =
            'INSERT INTO fault_deposits (route, principal, key, account, amount, token, pid) VALUES ($1, $2, $3, $4, $5, $6, $7)'
          // In the transaction on /deposits; committed at once on /deposits-plain.
          await (transaction && info?.db ? info.db.query(insert, values) : pool.query(insert, values))
          // `x-balance`: also add the amount to the account's row in fault_balances (a row lock
          // every deposit of the account takes, held until its transaction ends).
          if (request.headers['x-balance'] !== undefined && transaction && info?.db) {
            await info.db.query('UPDATE fault_balances SET balance = balance + $2 WHERE account = $1', [
              account,
              amount,
            ])
          }
          record({ type: 'written', ...base })
          if (holdMs > 0) await sleep(holdMs)
          return reply.code(201).send({ account, amount, token, pid: process.pid })
        },
      )
    }
  }
  if (pool !== undefined) {
    // POST /deposits-<orm> (READ COMMITTED) and /deposits-<orm>-repeatable-read: the same
    // deposit through an ORM's adapter (test/helpers/orm-kits.ts), its transaction opened at that
    // level the ORM's way, the row in orm_deposits and the amount on orm_balances, `written`
    // logged, then `x-hold-ms`; the answer names the level the transaction ran at.
    for (const [name, make] of ORM_KITS) {
      for (const isolation of ISOLATIONS) {
        const kit = make(pool, isolation)
        await kit.ready
        const url = depositRoute(name, isolation)
        app.post<{ Body: { account: string; amount: number } }>(
          url,
          { config: { idempotency: { transaction: kit.adapter, expiredExecution: depositsExpired } } },
          async (request, reply) => {
            const { account, amount } = request.body
            const holdMs = Math.min(30_000, Number(request.headers['x-hold-ms'] ?? 0))
            const key = String(request.headers['idempotency-key'])
            const token = request.idempotency?.fencingToken ?? 0
            const base = { route: url, key, user: request.user, pid: process.pid, token }
            record({ type: 'execution', ...base })
            const row = { route: url, principal: String(request.user), key, account, amount, token, pid: process.pid }
            const tx = kit.adapter.tx(request.idempotency)
            await kit.deposit(tx, row)
            const level = await kit.isolation(tx)
            record({ type: 'written', ...base })
            if (holdMs > 0) await sleep(holdMs)
            return reply.code(201).send({ account, amount, token, pid: process.pid, isolation: level })
          },
        )
      }
    }
  }
  if (pool !== undefined) transferRoutes(app)
  app.get('/orders', async () => ({ ok: true }))
  app.get('/_status', async () => ({ redis: chosen.status() }))

  // A stale owner's signal fires after its handler moved on: record it when it happens.
  app.addHook('onResponse', async (request) => {
    const info = request.idempotency
    if (info === null || info.replayed) return
    const base = {
      key: request.headers['idempotency-key'],
      user: request.user,
      pid: process.pid,
      token: info.fencingToken,
    }
    if (info.signal.aborted) record({ type: 'signal', ...base })
    else info.signal.addEventListener('abort', () => record({ type: 'signal', ...base }), { once: true })
  })

  app.addHook('onClose', () => chosen.close())
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      void app.close().then(() => process.exit(0))
    })
  }
  await app.listen({ port: Number(env.PORT), host: env.HOST ?? '127.0.0.1' })
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
