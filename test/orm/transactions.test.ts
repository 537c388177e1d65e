/**
 * `transaction: <ORM adapter>` over real HTTP (Fastify) on the suite's PostgreSQL, for every ORM
 * of test/helpers/orm-kits.ts: the handler inserts a deposit and moves the account's balance
 * through the ORM's own transaction object (`adapter.tx(request.idempotency)`), under READ
 * COMMITTED and REPEATABLE READ. Retries with one key give one deposit and the same bytes; a
 * handler that fails keeps nothing; a handler longer than the lease commits (renewals beside the
 * ORM's transaction); a stale owner, its lease run out and the record taken over, cannot commit
 * through the adapter; an action that commits the ORM's transaction itself is refused.
 */
import { randomUUID } from 'node:crypto'
import Fastify from 'fastify'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import fastifyIdempotency from '../../plugins/fastify/index.js'
import { jsonCodec } from '../../src/core/codec.js'
import { execute } from '../../src/core/executor.js'
import { resolvePolicy } from '../../src/core/policy.js'
import { type PostgresStore, postgresStore } from '../../src/stores/postgres/index.js'
import type { RunningApp } from '../helpers/adapters.js'
import { send } from '../helpers/adapters.js'
import { SECRET } from '../helpers/example-app.js'
import { createDepositTables, type Isolation, ORM_KITS, type OrmKit } from '../helpers/orm-kits.js'
import { testPostgresPool } from '../helpers/stores.js'

const secrets = { current: 1, keys: { 1: SECRET } }
const LEASE_MS = 600

async function depositApp(store: PostgresStore, kit: OrmKit): Promise<RunningApp> {
  const app = Fastify()
  await app.register(fastifyIdempotency, {
    store,
    secrets,
    principal: (request) => request.headers.authorization,
    leaseMs: LEASE_MS,
  })
  app.post<{ Body: { account: string; amount: number } }>(
    '/deposits',
    { config: { idempotency: { transaction: kit.adapter } } },
    async (request, reply) => {
      const { account, amount } = request.body
      const info = request.idempotency
      const tx = kit.adapter.tx(info)
      const key = String(request.headers['idempotency-key'])
      const row = { route: kit.name, principal: 'alice', key, account, amount, token: info?.fencingToken ?? 0, pid: 0 }
      const balance = await kit.deposit(tx, row)
      const holdMs = Number(request.headers['x-hold-ms'] ?? 0)
      if (holdMs > 0) await new Promise((resolve) => setTimeout(resolve, holdMs))
      if (request.headers['x-fail'] === 'throw') throw new Error('the ledger refused')
      return reply.code(201).send({ account, balance, token: info?.fencingToken, id: randomUUID() })
    },
  )
  await app.listen({ port: 0, host: '127.0.0.1' })
  const address = app.server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0
  return { url: `http://127.0.0.1:${port}`, port, logs: [], close: () => app.close() }
}

describe.each(
  ORM_KITS.flatMap(([name, make]) =>
    (['read committed', 'repeatable read'] as const).map((isolation) => [name, isolation, make] as const),
  ),
)('transaction: the %s adapter under %s', (_name, isolation: Isolation, make) => {
  let pool: pg.Pool
  let store: PostgresStore
  let kit: OrmKit
  let app: RunningApp
  let admin: pg.Client

  beforeAll(async () => {
    admin = new pg.Client({ connectionString: inject('postgresUrl') })
    await admin.connect()
    pool = testPostgresPool({ max: 20 })
    await createDepositTables(pool)
    store = postgresStore({ pool, keyPrefix: 'test', sweepIntervalMs: 0 })
    kit = make(pool, isolation)
    await kit.ready
    app = await depositApp(store, kit)
  })

  afterAll(async () => {
    await app?.close()
    await kit?.close()
    await store?.close()
    await pool?.end()
    await admin?.end()
  })

  const post = (account: string, key: string, headers: Record<string, string> = {}) =>
    send(app, 'POST', '/deposits', {
      headers: { authorization: 'alice', 'content-type': 'application/json', 'idempotency-key': key, ...headers },
      body: { account, amount: 10 },
    })
  const openAccount = async () => {
    const account = `acct-${randomUUID()}`
    await admin.query('INSERT INTO orm_balances (account, balance) VALUES ($1, 100)', [account])
    return account
  }
  const state = async (account: string) => {
    const deposits = await admin.query('SELECT count(*)::int AS n FROM orm_deposits WHERE account = $1', [account])
    const balance = await admin.query('SELECT balance FROM orm_balances WHERE account = $1', [account])
    return { deposits: deposits.rows[0].n as number, balance: balance.rows[0]?.balance as number }
  }

  it('one deposit per key, every answer the same bytes', async () => {
    const account = await openAccount()
    const key = randomUUID()
    const answers = []
    for (let i = 0; i < 4; i++) answers.push(await post(account, key))

    expect(answers[0]?.status).toBe(201)
    expect(answers[0]?.json()).toMatchObject({ account, balance: 110, token: 1 })
    for (const answer of answers.slice(1)) {
      expect(answer.status).toBe(201)
      expect(answer.headers.get('idempotent-replayed')).toBe('true')
      expect(answer.body).toEqual(answers[0]?.body)
    }
    expect(await state(account)).toEqual({ deposits: 1, balance: 110 })
  })

  it('concurrent identical requests: one deposit', async () => {
    const account = await openAccount()
    const key = randomUUID()
    const answers = await Promise.all(Array.from({ length: 10 }, () => post(account, key, { 'x-hold-ms': '100' })))
    expect(answers.filter((a) => a.status === 201 && a.headers.get('idempotent-replayed') !== 'true')).toHaveLength(1)
    // The others replay or find it in progress; on a loaded machine one may get 503 (its claim or
    // a connection not had in time: nothing ran for it).
    expect(answers.every((a) => [201, 409, 503].includes(a.status))).toBe(true)
    expect(await state(account)).toEqual({ deposits: 1, balance: 110 })
  })

  it('a handler that throws after its writes keeps nothing; the retry runs once', async () => {
    const account = await openAccount()
    const key = randomUUID()
    const failed = await post(account, key, { 'x-fail': 'throw' })
    expect(failed.status).toBe(500)
    expect(await state(account)).toEqual({ deposits: 0, balance: 100 })
    const retried = await post(account, key)
    const replayed = await post(account, key)
    expect(retried.status).toBe(201)
    expect(replayed.body).toEqual(retried.body)
    expect(await state(account)).toEqual({ deposits: 1, balance: 110 })
  })

  it('a handler longer than the lease commits: its lease is renewed beside the transaction', async () => {
    const account = await openAccount()
    const key = randomUUID()
    const [first, duplicate] = await Promise.all([
      post(account, key, { 'x-hold-ms': String(LEASE_MS * 2) }),
      new Promise((resolve) => setTimeout(resolve, LEASE_MS * 1.3)).then(() => post(account, key)),
    ])
    expect(first.status).toBe(201)
    // After the first lease the record is still in progress, not taken over.
    expect(duplicate.status).toBe(409)
    expect(await state(account)).toEqual({ deposits: 1, balance: 110 })
  })

  /** One run through the executor, in the adapter's transaction, of a scope of its own. */
  const run = (key: string, action: (tx: unknown, token: number) => Promise<unknown>) =>
    execute({
      store,
      key,
      fingerprint: 'f1:deposit',
      operation: 'POST /deposits',
      codec: jsonCodec(),
      policy: resolvePolicy({ leaseMs: 2_000 }),
      transaction: kit.adapter,
      action: (context) => action(kit.adapter.tx(context), context.fencingToken),
    })
  const row = (key: string, account: string) => ({
    route: kit.name,
    principal: 'alice',
    key,
    account,
    amount: 10,
    token: 1,
    pid: 0,
  })

  it('a stale owner (the record taken over meanwhile) cannot commit through the adapter; nothing of it is kept', async () => {
    const account = await openAccount()
    const key = `test:${randomUUID()}`
    const outcome = await run(key, async (tx) => {
      await kit.deposit(tx, row(key, account))
      // Another instance takes the scope over meanwhile (attempt + 1, a new owner).
      await admin.query(
        `UPDATE idemkit_records SET attempt = attempt + 1, owner = repeat('f', 64), rev = rev + 1 WHERE key = $1`,
        [key],
      )
      return { deposited: 10 }
    })
    // Refused by the fencing check, or, under REPEATABLE READ, by the completion's lock of a row
    // changed after the snapshot (a serialization failure): rolled back either way.
    expect(outcome.kind).toBe('UNRECORDED')
    const reasons = isolation === 'read committed' ? ['LOST_OWNERSHIP'] : ['ROLLED_BACK', 'STORE_UNAVAILABLE']
    expect(reasons).toContain((outcome as { reason?: string }).reason)
    expect(await state(account)).toEqual({ deposits: 0, balance: 100 })
  })

  it('an action that commits the ORM transaction itself: an unknown effect, never a second run', async () => {
    const account = await openAccount()
    const key = `test:${randomUUID()}`
    const outcome = await run(key, async (tx) => {
      await kit.deposit(tx, row(key, account))
      await kit.execute(tx, 'COMMIT')
      return { deposited: 10 }
    })
    expect(outcome).toMatchObject({ kind: 'UNRECORDED', reason: 'STORE_UNAVAILABLE' })
    expect((outcome as { cause?: { code?: string } }).cause?.code).toBe('ERR_IDEM_TRANSACTION_ENDED')
    const { rows } = await admin.query('SELECT state FROM idemkit_records WHERE key = $1', [key])
    expect(rows).toEqual([{ state: 'ABANDONED' }])
  })

  it("the port takes the store's parameters and answers rows as node-postgres does", async () => {
    const bytes = Buffer.from([0, 1, 127, 128, 255])
    const big = 2 ** 40 + 1
    const { rows } = await kit.adapter.run((_tx, port) =>
      port.query(
        `SELECT 9007199254740993::int8 AS i8, $1::bytea AS b, $2::int8 AS p8, $3::integer AS p4, $4::text AS t,
           3::integer AS i4, octet_length($1::bytea) AS n, NULL::text AS missing`,
        [bytes, big, 7, 'k'],
      ),
    )
    expect(rows).toHaveLength(1)
    const row = rows[0] as Record<string, unknown>
    // The column order is the statement's (the completion's row is read by position).
    expect(Object.keys(row)).toEqual(['i8', 'b', 'p8', 'p4', 't', 'i4', 'n', 'missing'])
    expect(row).toMatchObject({ i8: '9007199254740993', p8: String(big), p4: 7, t: 'k', i4: 3, n: 5, missing: null })
    expect(Buffer.isBuffer(row.b) && Buffer.compare(row.b, bytes) === 0).toBe(true)
  })

  it('tx() outside a run of the adapter says what to do', () => {
    expect(() => kit.adapter.tx(undefined)).toThrow(/transaction: <the .* adapter>/)
    expect(() => kit.adapter.tx({ tx: {} })).toThrow(/Not in a .* transaction/)
  })
})
