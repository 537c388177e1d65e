/**
 * `transaction: true` routes over real HTTP on Fastify and Express, on the suite's PostgreSQL: the
 * handler writes through `idempotency.db`; its rows exist exactly when its answer is stored.
 */

import { randomUUID } from 'node:crypto'
import { createServer } from 'node:http'
import express from 'express'
import Fastify from 'fastify'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { idempotency as expressIdempotency } from '../../plugins/express/index.js'
import fastifyIdempotency from '../../plugins/fastify/index.js'
import type { IdempotencyStore } from '../../src/core/store.js'
import type { IdempotencyInfo } from '../../src/http/guard.js'
import { memoryStore } from '../../src/stores/memory/index.js'
import { postgresStore } from '../../src/stores/postgres/index.js'
import type { RunningApp } from '../helpers/adapters.js'
import { listen, send } from '../helpers/adapters.js'
import { SECRET } from '../helpers/example-app.js'
import { testPostgresPool } from '../helpers/stores.js'

const TABLE = 'idemkit_test_http_deposits'
/** The store's own table, which one test locks whole. */
const RECORDS = 'idemkit_test_http_tx_records'
const secrets = { current: 1, keys: { 1: SECRET } }

/**
 * `x-fail: step-locked`: the handler says it reached its step, waits until the test holds the
 * records' rows locked, writes its row in a step (whose commit waits for the lock past the
 * store's `lockTimeoutMs`), reports the step's error, and throws it once the lock is gone.
 */
interface StepGate {
  readonly reached: () => void
  readonly locked: Promise<void>
  readonly failed: (error: unknown) => void
  readonly released: Promise<void>
}
let stepGate: StepGate | undefined

/** The handler of both apps: a deposit row through the transaction; `x-fail` makes it fail after the write. */
async function deposit(idempotency: IdempotencyInfo | null, body: { account: string; amount: number }, fail: string) {
  const db = idempotency?.db
  if (db === undefined) throw new Error('no transaction')
  if (fail === 'step-locked' && stepGate !== undefined) {
    const gate = stepGate
    gate.reached()
    await gate.locked
    try {
      await idempotency?.step('deposit', (stepDb) =>
        stepDb.query(`INSERT INTO ${TABLE} (account, amount) VALUES ($1, $2)`, [body.account, body.amount]),
      )
    } catch (error) {
      gate.failed(error)
      await gate.released
      throw error
    }
    throw new Error('the step committed under the lock')
  }
  const { rows } = await db.query<{ id: string }>(
    `INSERT INTO ${TABLE} (account, amount) VALUES ($1, $2) RETURNING id`,
    [body.account, body.amount],
  )
  if (fail === 'throw') throw new Error('the ledger refused')
  if (fail === 'commit') {
    // The same row again under a deferred unique constraint: COMMIT fails, not this statement.
    await db.query(`INSERT INTO ${TABLE} (id, account, amount) VALUES ($1, $2, $3)`, [rows[0]?.id, body.account, 0])
  }
  return { id: Number(rows[0]?.id), account: body.account, amount: body.amount }
}

async function fastifyApp(store: IdempotencyStore): Promise<RunningApp> {
  const app = Fastify()
  await app.register(fastifyIdempotency, { store, secrets, principal: (request) => request.headers.authorization })
  app.post('/deposits', { config: { idempotency: { transaction: true } } }, async (request, reply) => {
    const fail = String(request.headers['x-fail'] ?? '')
    const result = await deposit(request.idempotency, request.body as { account: string; amount: number }, fail)
    return reply.code(201).send(result)
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const address = app.server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0
  return { url: `http://127.0.0.1:${port}`, port, logs: [], close: () => app.close() }
}

async function expressApp(store: IdempotencyStore): Promise<RunningApp> {
  const app = express()
  const idem = expressIdempotency({ store, secrets, principal: (req) => req.headers.authorization })
  app.use(express.json(), idem.captureBody)
  app.post('/deposits', idem({ transaction: true }), async (req, res, next) => {
    try {
      const result = await deposit(req.idempotency, req.body, String(req.headers['x-fail'] ?? ''))
      res.status(201).json(result)
    } catch (error) {
      next(error)
    }
  })
  app.use(idem.errors)
  const server = createServer(app)
  return listen(server)
}

describe.each([
  ['fastify', fastifyApp],
  ['express', expressApp],
] as const)('a transaction: true route on %s', (_name, build) => {
  let pool: pg.Pool
  let app: RunningApp
  let admin: pg.Client

  beforeAll(async () => {
    admin = new pg.Client({ connectionString: inject('postgresUrl') })
    await admin.connect()
    await admin.query(
      `CREATE TABLE IF NOT EXISTS ${TABLE} (id bigserial, account text NOT NULL, amount int NOT NULL,
       CONSTRAINT one_id UNIQUE (id) DEFERRABLE INITIALLY DEFERRED)`,
    )
    pool = testPostgresPool()
    const store = postgresStore({ pool, keyPrefix: 'test', table: RECORDS, lockTimeoutMs: 300, sweepIntervalMs: 0 })
    await store.migrate()
    app = await build(store)
  })

  afterAll(async () => {
    await app.close()
    await pool.end()
    await admin.end()
  })

  const post = (account: string, key: string, fail = '') =>
    send(app, 'POST', '/deposits', {
      headers: {
        authorization: 'alice',
        'content-type': 'application/json',
        'idempotency-key': key,
        ...(fail ? { 'x-fail': fail } : {}),
      },
      body: { account, amount: 25 },
    })
  const rows = async (account: string) =>
    (await admin.query(`SELECT count(*)::int AS n FROM ${TABLE} WHERE account = $1`, [account])).rows[0].n as number

  it('stores the answer with the handler’s writes, and a replay writes nothing', async () => {
    const account = randomUUID()
    const key = randomUUID()
    const first = await post(account, key)
    const second = await post(account, key)

    expect(first.status).toBe(201)
    expect(second.status).toBe(201)
    expect(second.headers.get('idempotent-replayed')).toBe('true')
    expect(second.json()).toEqual(first.json())
    expect(await rows(account)).toBe(1)
  })

  it('keeps nothing of a handler that threw, and lets the retry run once', async () => {
    const account = randomUUID()
    const key = randomUUID()
    const failed = await post(account, key, 'throw')
    expect(failed.status).toBe(500)
    expect(await rows(account)).toBe(0)

    const retried = await post(account, key)
    const replayed = await post(account, key)
    expect(retried.status).toBe(201)
    expect(replayed.headers.get('idempotent-replayed')).toBe('true')
    expect(await rows(account)).toBe(1)
  })

  it('answers 503 "not processed" when the commit fails, keeps nothing, and lets the retry run', async () => {
    const account = randomUUID()
    const key = randomUUID()
    const failed = await post(account, key, 'commit')
    expect(failed.status).toBe(503)
    expect(failed.headers.get('content-type')).toContain('application/problem+json')
    expect(failed.json()).toMatchObject({ code: 'IDEMPOTENCY_STORE_UNAVAILABLE' })
    expect(failed.json().detail).toMatch(/not processed/)
    expect(await rows(account)).toBe(0)

    expect((await post(account, key)).status).toBe(201)
    expect(await rows(account)).toBe(1)
  })

  it('answers 503 store-unavailable, not the handler’s 500, when a step’s commit fails in the store', async () => {
    const account = randomUUID()
    const key = randomUUID()
    const gate = (() => {
      let reached!: () => void
      let locked!: () => void
      let failed!: (error: unknown) => void
      let released!: () => void
      const atStep = new Promise<void>((resolve) => {
        reached = resolve
      })
      const stepError = new Promise<unknown>((resolve) => {
        failed = resolve
      })
      const lockHeld = new Promise<void>((resolve) => {
        locked = resolve
      })
      const lockGone = new Promise<void>((resolve) => {
        released = resolve
      })
      stepGate = { reached, locked: lockHeld, failed, released: lockGone }
      return { atStep, stepError, locked, released }
    })()
    const locker = new pg.Client({ connectionString: inject('postgresUrl') })
    await locker.connect()
    try {
      const answer = post(account, key, 'step-locked')
      await gate.atStep
      await locker.query('BEGIN')
      await locker.query(`SELECT 1 FROM ${RECORDS} FOR UPDATE`)
      gate.locked()
      const error = await gate.stepError
      await locker.query('ROLLBACK')
      gate.released()
      expect(error).toMatchObject({ code: 'ERR_IDEM_STORE_UNAVAILABLE' })

      const failed = await answer
      expect(failed.status).toBe(503)
      expect(failed.headers.get('content-type')).toContain('application/problem+json')
      expect(failed.json()).toMatchObject({ code: 'IDEMPOTENCY_STORE_UNAVAILABLE', retryable: true })
      expect(failed.json().detail).toMatch(/recovery point/)
      expect(await rows(account)).toBe(0)
    } finally {
      stepGate = undefined
      await locker.end()
    }

    expect((await post(account, key)).status).toBe(201)
    expect(await rows(account)).toBe(1)
  })
})

describe('transaction: true on a store without transactions', () => {
  it('is refused when the Fastify route is added', async () => {
    const app = Fastify()
    await app.register(fastifyIdempotency, { store: memoryStore(), secrets, principal: () => 'alice' })
    expect(() =>
      app.post('/deposits', { config: { idempotency: { transaction: true } } }, async () => ({ ok: true })),
    ).toThrow(/route POST \/deposits: transaction" must be false: the memory store does not run transactions/)
    await app.close().catch(() => undefined)
  })

  it('is refused when the Express route middleware is made, and plugin-wide', () => {
    const idem = expressIdempotency({ store: memoryStore(), secrets, principal: () => 'alice' })
    expect(() => idem({ transaction: true })).toThrow(/"transaction" must be false: the memory store does not run/)
    expect(() =>
      expressIdempotency({ store: memoryStore(), secrets, principal: () => 'alice', transaction: true }),
    ).toThrow(/the memory store does not run transactions/)
  })
})
