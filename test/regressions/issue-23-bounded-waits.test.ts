/**
 * Bounded waits of a `transaction: true` run (docs/postgresql.md, "Bounded waits"): its
 * transaction sets `lock_timeout` and `idle_in_transaction_session_timeout`, the route's lease by
 * default, `transactionLockTimeoutMs` and `transactionIdleTimeoutMs` when the store sets them. A
 * handler statement behind another session's row lock gives up after the lock timeout instead of
 * waiting without bound; a run whose session sits idle past the idle timeout (its process unable
 * to run, as a stalled owner is) is ended by the server and nothing of it commits.
 */
import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest'
import type { ActionContext } from '../../src/core/executor.js'
import { InspectReply } from '../../src/core/record.js'
import { type PostgresStore, type PostgresStoreOptions, postgresStore } from '../../src/stores/postgres/index.js'
import { testPostgresPool, transactionalDeposit } from '../helpers/stores.js'

const TABLE = 'idemkit_test_bounded_waits'

/** Rejects when `promise` has not settled within `ms`: a handler stuck behind a lock fails the test. */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const guard = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms)
  })
  return Promise.race([promise, guard]).finally(() => clearTimeout(timer))
}

/** Keeps this process from running anything else for `ms`, as a stalled owner cannot. */
function blockFor(ms: number): void {
  const until = performance.now() + ms
  while (performance.now() < until) {
    // nothing: not even the heartbeat's timer runs meanwhile
  }
}

describe('issue 23: the waits of a transaction: true run are bounded', () => {
  let admin: pg.Client
  let locker: pg.Client
  const opened: { pool: pg.Pool; store: PostgresStore }[] = []

  function open(options: Partial<PostgresStoreOptions> = {}): PostgresStore {
    const pool = testPostgresPool()
    const store = postgresStore({ pool, keyPrefix: 'test', sweepIntervalMs: 0, ...options })
    opened.push({ pool, store })
    return store
  }

  beforeAll(async () => {
    admin = new pg.Client({ connectionString: inject('postgresUrl') })
    locker = new pg.Client({ connectionString: inject('postgresUrl') })
    await admin.connect()
    await locker.connect()
    await admin.query(`CREATE TABLE IF NOT EXISTS ${TABLE} (account text PRIMARY KEY, balance int NOT NULL)`)
  })

  afterEach(async () => {
    await locker.query('ROLLBACK').catch(() => undefined)
    for (const { store, pool } of opened.splice(0)) {
      await store.close()
      await pool.end()
    }
  })

  afterAll(async () => {
    await admin.query(`DROP TABLE IF EXISTS ${TABLE}`)
    await locker.end()
    await admin.end()
  })

  const newKey = () => `test:idem:1:d1:op:${randomBytes(32).toString('hex')}`
  const newAccount = async () => {
    const account = `acct-${randomBytes(6).toString('hex')}`
    await admin.query(`INSERT INTO ${TABLE} (account, balance) VALUES ($1, 0)`, [account])
    return account
  }
  const balance = async (account: string) =>
    (await admin.query(`SELECT balance FROM ${TABLE} WHERE account = $1`, [account])).rows[0].balance as number

  /** The run's own settings, read by its handler. */
  const settings = (store: PostgresStore, leaseMs: number) =>
    transactionalDeposit(store, newKey(), leaseMs, async (context) => {
      const result = await context.db?.query<{ lock: string; idle: string }>(
        "SELECT current_setting('lock_timeout') AS lock, current_setting('idle_in_transaction_session_timeout') AS idle",
      )
      return result?.rows[0]
    })

  it('sets lock_timeout and idle_in_transaction_session_timeout to the lease by default', async () => {
    expect(await settings(open(), 600)).toMatchObject({ kind: 'EXECUTED', value: { lock: '600ms', idle: '600ms' } })
    expect(await settings(open(), 3_000)).toMatchObject({ kind: 'EXECUTED', value: { lock: '3s', idle: '3s' } })
  })

  it('takes transactionLockTimeoutMs and transactionIdleTimeoutMs in place of the lease', async () => {
    const store = open({ transactionLockTimeoutMs: 250, transactionIdleTimeoutMs: 4_000 })
    expect(await settings(store, 600)).toMatchObject({ kind: 'EXECUTED', value: { lock: '250ms', idle: '4s' } })
  })

  it('a handler statement behind another session’s row lock gives up after the lock timeout: rolled back, retried once the lock is gone', async () => {
    // A long lease: without the run's own lock_timeout its UPDATE would wait for as long as the
    // locker holds the row, far past the guard below.
    const store = open({ transactionLockTimeoutMs: 200 })
    const account = await newAccount()
    const key = newKey()
    const depositTen = async (context: ActionContext) => {
      const result = await context.db?.query<{ balance: number }>(
        `UPDATE ${TABLE} SET balance = balance + 10 WHERE account = $1 RETURNING balance`,
        [account],
      )
      return { balance: result?.rows[0]?.balance }
    }
    await locker.query('BEGIN')
    await locker.query(`SELECT 1 FROM ${TABLE} WHERE account = $1 FOR UPDATE`, [account])

    const blocked = await within(transactionalDeposit(store, key, 30_000, depositTen), 10_000, 'the blocked deposit')
    expect(blocked).toMatchObject({ kind: 'FAILED', classification: 'retryable', recorded: true })
    // The handler's own statement was refused (55P03), not left waiting.
    expect((blocked as { settled?: { error?: { code?: string } } }).settled?.error?.code).toBe('55P03')
    expect((await store.inspect(key, '0'.repeat(64))).kind).toBe(InspectReply.FAILED_RETRYABLE)

    await locker.query('ROLLBACK')
    expect(await transactionalDeposit(store, key, 30_000, depositTen)).toEqual({
      kind: 'EXECUTED',
      value: { balance: 10 },
      attempt: 2,
    })
    expect(await balance(account)).toBe(10)
  })

  it('a run whose session sits idle past the idle timeout is ended by the server: nothing of it commits', async () => {
    const account = await newAccount()
    const run = (store: PostgresStore, key: string) =>
      transactionalDeposit(store, key, 30_000, async (context) => {
        await context.db?.query(`UPDATE ${TABLE} SET balance = balance + 10 WHERE account = $1`, [account])
        // The process stalls: neither the handler nor the heartbeat runs for 1.5 s.
        blockFor(1_500)
        return { deposited: 10 }
      })

    const ended = await run(open({ transactionIdleTimeoutMs: 300 }), newKey())
    expect(ended).toMatchObject({ kind: 'UNRECORDED', reason: 'ROLLED_BACK' })
    expect(await balance(account)).toBe(0)
    // The row lock it held went with the session: another transaction takes it at once.
    await locker.query('BEGIN')
    await locker.query("SET LOCAL lock_timeout = '1s'")
    await locker.query(`UPDATE ${TABLE} SET balance = balance WHERE account = $1`, [account])
    await locker.query('ROLLBACK')

    // The same stall within a longer idle timeout commits.
    const kept = await run(open({ transactionIdleTimeoutMs: 10_000 }), newKey())
    expect(kept).toMatchObject({ kind: 'EXECUTED', value: { deposited: 10 } })
    expect(await balance(account)).toBe(10)
  }, 30_000)
})
