/**
 * `transaction: <ORM adapter>` in `idempotent()`, `idempotentBatch()` and the BullMQ processor, on
 * the suite's PostgreSQL, for every ORM of test/helpers/orm-kits.ts under READ COMMITTED and
 * REPEATABLE READ: a message's handler inserts a deposit and moves the account's balance through
 * the ORM's own transaction object (`adapter.tx(context)`). A message delivered twice, or ten
 * times at once, writes once and answers one result; a handler that throws after its writes keeps
 * nothing, and the next delivery runs; a batch holding one message twice writes once; a BullMQ
 * job added twice under one business key writes once. The SIGKILLed consumer is in
 * test/jobs/inbox.test.ts, the stale owner in fault 25.
 */
import { randomUUID } from 'node:crypto'
import { Queue, QueueEvents, Worker } from 'bullmq'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { idempotentProcessor } from '../../src/bullmq/index.js'
import { IdempotencyInProgressError } from '../../src/core/errors.js'
import type { ActionContext } from '../../src/core/run/types.js'
import { idempotentBatch } from '../../src/jobs/batch.js'
import { idempotent } from '../../src/jobs/idempotent.js'
import { type PostgresStore, postgresStore } from '../../src/stores/postgres/index.js'
import { SECRET } from '../helpers/example-app.js'
import { createDepositTables, type Isolation, ORM_KITS, type OrmKit } from '../helpers/orm-kits.js'
import { testPostgresPool } from '../helpers/stores.js'

const secrets = { current: 1, keys: { 1: SECRET } }

interface Message {
  readonly id: string
  readonly account: string
  readonly amount: number
}

function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    (value) => {
      throw new Error(`resolved with ${JSON.stringify(value)}`)
    },
    (error: unknown) => error,
  )
}

describe.each(
  ORM_KITS.flatMap(([name, make]) =>
    (['read committed', 'repeatable read'] as const).map((isolation) => [name, isolation, make] as const),
  ),
)('idempotent() with the %s adapter under %s', (name, isolation: Isolation, make) => {
  let pool: pg.Pool
  let store: PostgresStore
  let kit: OrmKit
  let admin: pg.Client

  beforeAll(async () => {
    admin = new pg.Client({ connectionString: inject('postgresUrl') })
    await admin.connect()
    pool = testPostgresPool({ max: 20 })
    await createDepositTables(pool)
    store = postgresStore({ pool, keyPrefix: 'test', sweepIntervalMs: 0 })
    kit = make(pool, isolation)
    await kit.ready
  })

  afterAll(async () => {
    await kit?.close()
    await store?.close()
    await pool?.end()
    await admin?.end()
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

  /** The deposit of `message`, written through the run's ORM transaction. */
  const depositOf = (message: Message, context: ActionContext) =>
    kit.deposit(kit.adapter.tx(context), {
      route: `jobs-${name}`,
      principal: 'jobs',
      key: message.id,
      account: message.account,
      amount: message.amount,
      token: context.fencingToken,
      pid: process.pid,
    })

  /**
   * A consumer of deposit messages, of an operation of its own (`operation`); `hooks.after` runs
   * once the writes are made, before the commit.
   */
  const consumer = (
    hooks: { after?: () => Promise<void> | void; runs?: { n: number }; operation?: string } = {},
    inFlight?: number,
  ) =>
    idempotent(
      async (message: Message, context: ActionContext) => {
        if (hooks.runs) hooks.runs.n++
        const balance = await depositOf(message, context)
        await hooks.after?.()
        return { balance, token: context.fencingToken }
      },
      {
        store,
        secrets,
        operation: hooks.operation ?? `deposit-${name}-${randomUUID()}`,
        key: 'id',
        transaction: kit.adapter,
        ...(inFlight === undefined ? {} : { inFlight: { waitMs: inFlight } }),
      },
    )

  it('a message delivered twice writes once; the second delivery gets the stored result', async () => {
    const runs = { n: 0 }
    const deposit = consumer({ runs })
    const message = { id: randomUUID(), account: await openAccount(), amount: 10 }
    const first = await deposit(message)
    const again = await deposit(message)
    expect(first).toEqual({ balance: 110, token: 1 })
    expect(again).toEqual(first)
    expect(runs.n).toBe(1)
    expect(await state(message.account)).toEqual({ deposits: 1, balance: 110 })
  })

  it('ten deliveries at once write once: one runs, the others wait for its result', async () => {
    const runs = { n: 0 }
    const deposit = consumer({ runs, after: () => new Promise((resolve) => setTimeout(resolve, 100)) }, 30_000)
    const message = { id: randomUUID(), account: await openAccount(), amount: 10 }
    const answers = await Promise.allSettled(Array.from({ length: 10 }, () => deposit(message)))
    const values = answers.flatMap((answer) => (answer.status === 'fulfilled' ? [answer.value] : []))
    // On a loaded machine a delivery may find no connection in time (StoreUnavailableError:
    // nothing ran for it); every one that resolved has the one run's result.
    expect(values.length).toBeGreaterThan(0)
    for (const value of values) expect(value).toEqual({ balance: 110, token: 1 })
    for (const answer of answers) {
      if (answer.status === 'rejected') expect(answer.reason).toMatchObject({ code: 'ERR_IDEM_STORE_UNAVAILABLE' })
    }
    expect(runs.n).toBe(1)
    expect(await state(message.account)).toEqual({ deposits: 1, balance: 110 })
  })

  it('a delivery while the first runs is refused as in progress; nothing of it is written', async () => {
    let release!: () => void
    const held = new Promise<void>((resolve) => {
      release = resolve
    })
    let written!: () => void
    const wrote = new Promise<void>((resolve) => {
      written = resolve
    })
    const deposit = consumer({
      after: () => {
        written()
        return held
      },
    })
    const message = { id: randomUUID(), account: await openAccount(), amount: 10 }
    const first = deposit(message)
    await wrote
    // Written, not committed: another session sees none of it.
    expect(await state(message.account)).toEqual({ deposits: 0, balance: 100 })
    const duplicate = await rejection(deposit(message))
    expect(duplicate).toBeInstanceOf(IdempotencyInProgressError)
    release()
    expect(await first).toEqual({ balance: 110, token: 1 })
    expect(await deposit(message)).toEqual({ balance: 110, token: 1 })
    expect(await state(message.account)).toEqual({ deposits: 1, balance: 110 })
  })

  it('a handler that throws after its writes keeps nothing, not even a record that holds the key; the next delivery runs once', async () => {
    let fail = true
    const runs = { n: 0 }
    const operation = `deposit-${name}-${randomUUID()}`
    const deposit = consumer({
      runs,
      operation,
      after: () => {
        // Not marked retryable: in a transaction nothing of it happened all the same.
        if (fail) throw new Error('the ledger refused')
      },
    })
    const message = { id: randomUUID(), account: await openAccount(), amount: 10 }
    expect(await rejection(deposit(message))).toMatchObject({ message: 'the ledger refused' })
    expect(await state(message.account)).toEqual({ deposits: 0, balance: 100 })
    // The record says the key is free again (FAILED_RETRYABLE), not that something may have happened.
    const { rows } = await admin.query('SELECT state, attempt::int FROM idemkit_records WHERE op = $1', [operation])
    expect(rows).toEqual([{ state: 'FAILED_RETRYABLE', attempt: 1 }])
    fail = false
    expect(await deposit(message)).toEqual({ balance: 110, token: 2 })
    expect(await deposit(message)).toEqual({ balance: 110, token: 2 })
    expect(runs.n).toBe(2)
    expect(await state(message.account)).toEqual({ deposits: 1, balance: 110 })
  })

  it('a batch that holds one message twice writes it once', async () => {
    const account = await openAccount()
    const handle = idempotentBatch(
      async (message: Message, context) => ({ balance: await depositOf(message, context) }),
      { store, secrets, operation: `batch-${name}`, key: 'id', transaction: kit.adapter },
    )
    const [one, two] = [randomUUID(), randomUUID()]
    const { batchItemFailures, results } = await handle([
      { id: one, account, amount: 10 },
      { id: two, account, amount: 5 },
      { id: one, account, amount: 10 },
    ])
    expect(batchItemFailures).toEqual([])
    expect(results.map((result) => (result.status === 'fulfilled' ? result.value : result.status))).toEqual([
      { balance: 110 },
      { balance: 115 },
      { balance: 110 },
    ])
    expect(await state(account)).toEqual({ deposits: 2, balance: 115 })
  })
})

describe.each(ORM_KITS)('idempotentProcessor() with the %s adapter', (name, make) => {
  let pool: pg.Pool
  let store: PostgresStore
  let kit: OrmKit
  let admin: pg.Client
  let queue: Queue
  let events: QueueEvents
  let worker: Worker | undefined

  const connection = () => {
    const url = new URL(inject('redisUrl'))
    return { host: url.hostname, port: Number(url.port), maxRetriesPerRequest: null }
  }

  beforeAll(async () => {
    admin = new pg.Client({ connectionString: inject('postgresUrl') })
    await admin.connect()
    pool = testPostgresPool({ max: 20 })
    await createDepositTables(pool)
    store = postgresStore({ pool, keyPrefix: 'test', sweepIntervalMs: 0 })
    kit = make(pool, 'read committed')
    await kit.ready
    queue = new Queue(`orm-${name}-${randomUUID()}`, { connection: connection() })
    events = new QueueEvents(queue.name, { connection: connection() })
    await events.waitUntilReady()
  })

  afterAll(async () => {
    await worker?.close()
    await events?.close()
    await queue?.obliterate({ force: true })
    await queue?.close()
    await kit?.close()
    await store?.close()
    await pool?.end()
    await admin?.end()
  })

  it('one order added as two jobs writes once; both jobs complete with its result', async () => {
    const account = `acct-${randomUUID()}`
    await admin.query('INSERT INTO orm_balances (account, balance) VALUES ($1, 100)', [account])
    let runs = 0
    worker = new Worker<{ orderId: string; account: string }, { balance: number; token: number }>(
      queue.name,
      idempotentProcessor(
        async (job, context) => {
          runs++
          const balance = await kit.deposit(kit.adapter.tx(context), {
            route: `bullmq-${name}`,
            principal: 'jobs',
            key: job.data.orderId,
            account: job.data.account,
            amount: 10,
            token: context.fencingToken,
            pid: process.pid,
          })
          return { balance, token: context.fencingToken }
        },
        { store, secrets, operation: `charge-${name}`, key: 'data.orderId', transaction: kit.adapter },
      ),
      { connection: connection() },
    )
    const orderId = randomUUID()
    const first = await queue.add('charge', { orderId, account })
    const firstResult = await first.waitUntilFinished(events, 60_000)
    const again = await queue.add('charge', { orderId, account })
    const againResult = await again.waitUntilFinished(events, 60_000)
    expect(firstResult).toEqual({ balance: 110, token: 1 })
    expect(againResult).toEqual(firstResult)
    expect(runs).toBe(1)
    const { rows } = await admin.query('SELECT count(*)::int AS n FROM orm_deposits WHERE account = $1', [account])
    expect(rows[0].n).toBe(1)
  }, 90_000)
})
