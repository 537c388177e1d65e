/**
 * `transaction: true` under every isolation level, with a handler longer than the lease: the
 * heartbeat renews the lease on another connection meanwhile, and under REPEATABLE READ or
 * SERIALIZABLE the completion's compare-and-set on a row renewed after the transaction's
 * snapshot used to fail with 40001 (FAILED_RETRYABLE, a 503, every retry the same). And the
 * store's own single-statement calls under a database-wide SERIALIZABLE default: a claim that
 * waited for a concurrent takeover used to fail with 40001 (a 503 instead of a 409).
 */
import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest'
import { ClaimReply, InspectReply } from '../../src/core/record.js'
import { type PostgresStore, postgresStore } from '../../src/stores/postgres/index.js'
import { sleep } from '../helpers/executor-harness.js'
import { claimRequest, testPostgresPool, transactionalDeposit } from '../helpers/stores.js'

const TABLE = 'idemkit_test_isolation_deposits'
const LEVELS = ['read committed', 'repeatable read', 'serializable'] as const

describe('issue 23: transaction: true under every isolation level', () => {
  let admin: pg.Client
  const opened: { pool: pg.Pool; store: PostgresStore }[] = []

  /** A store on a pool of its own; `isolation` as the database-wide default of its connections. */
  function open(isolation?: string, max = 10, timeouts = {}): PostgresStore {
    const options =
      isolation === undefined ? {} : { options: `-c default_transaction_isolation=${isolation.replaceAll(' ', '\\ ')}` }
    const pool = testPostgresPool({ max, ...options })
    const store = postgresStore({ pool, keyPrefix: 'test', sweepIntervalMs: 0, ...timeouts })
    opened.push({ pool, store })
    return store
  }

  beforeAll(async () => {
    admin = new pg.Client({ connectionString: inject('postgresUrl') })
    await admin.connect()
    await admin.query(`CREATE TABLE IF NOT EXISTS ${TABLE} (id bigserial PRIMARY KEY, scope text NOT NULL)`)
  })

  afterEach(async () => {
    await admin.query('ROLLBACK').catch(() => undefined)
    for (const { store, pool } of opened.splice(0)) {
      await store.close()
      await pool.end()
    }
  })

  afterAll(async () => {
    await admin.query(`DROP TABLE IF EXISTS ${TABLE}`)
    await admin.end()
  })

  const newKey = () => `test:idem:1:d1:op:${randomBytes(32).toString('hex')}`
  const rows = async (key: string) =>
    (await admin.query(`SELECT count(*)::int AS n FROM ${TABLE} WHERE scope = $1`, [key])).rows[0].n as number

  /** A deposit whose handler runs 1.5 leases (the heartbeat renews twice meanwhile). */
  function deposit(store: PostgresStore, key: string, setLevel?: string) {
    return transactionalDeposit(store, key, 600, async (context) => {
      if (setLevel !== undefined) await context.db?.query(`SET TRANSACTION ISOLATION LEVEL ${setLevel}`)
      const level = await context.db?.query<{ level: string }>(
        "SELECT current_setting('transaction_isolation') AS level",
      )
      await context.db?.query(`INSERT INTO ${TABLE} (scope) VALUES ($1)`, [key])
      await sleep(900)
      return { level: level?.rows[0]?.level }
    })
  }

  for (const level of LEVELS) {
    it(`commits a handler longer than the lease under ${level}, set by the handler`, async () => {
      const store = open()
      const key = newKey()
      const first = await deposit(store, key, level)
      const again = await deposit(store, key, level)

      expect(first).toEqual({ kind: 'EXECUTED', value: { level }, attempt: 1 })
      expect(again).toEqual({ kind: 'REPLAYED', value: { level } })
      expect(await rows(key)).toBe(1)
      expect((await store.inspect(key, '0'.repeat(64))).kind).toBe(InspectReply.COMPLETED)
    })

    it(`commits a handler longer than the lease under a database-wide default_transaction_isolation = ${level}`, async () => {
      const store = open(level)
      const key = newKey()
      const first = await deposit(store, key)

      expect(first).toEqual({ kind: 'EXECUTED', value: { level }, attempt: 1 })
      expect(await rows(key)).toBe(1)
    })
  }

  it('keeps a renewed transaction run from being taken over: a duplicate after the first lease is in progress', async () => {
    const store = open('repeatable read')
    const key = newKey()
    const running = deposit(store, key)
    // Past the claim's lease (600 ms): only the renewals keep it.
    await sleep(750)
    const duplicate = await store.claim({ ...claimRequest(store, { leaseMs: 600 }), key, fingerprint: 'f1:deposit' })
    expect(duplicate.kind).toBe(ClaimReply.IN_PROGRESS)
    expect((await running).kind).toBe('EXECUTED')
    expect(await rows(key)).toBe(1)
  })

  it('under default_transaction_isolation = serializable, 50 claims of an expired row: one holder, 49 in progress, no error', async () => {
    // Generous bounds: 50 connections are opened on a loaded machine before they all wait.
    const store = open('serializable', 50, {
      lockTimeoutMs: 30_000,
      statementTimeoutMs: 40_000,
      acquireTimeoutMs: 30_000,
    })
    const base = claimRequest(store, { leaseMs: 20, failureRetentionMs: 20 })
    await store.claim(base)
    await sleep(60)
    // The test's session holds the row, so all 50 claims wait at it and meet under the lock.
    await admin.query('BEGIN')
    await admin.query('SELECT 1 FROM idemkit_records WHERE key = $1 FOR UPDATE', [base.key])
    const claims = Promise.allSettled(
      Array.from({ length: 50 }, () =>
        store.claim({ ...base, owner: randomBytes(32).toString('hex'), leaseMs: 10_000 }),
      ),
    )
    for (let i = 0; i < 750; i++) {
      // pg_stat_activity is read once per transaction: the admin's is open, so read it afresh.
      await admin.query('SELECT pg_stat_clear_snapshot()')
      const { rows: waiting } = await admin.query(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%idemkit_records_claim_v_(%'",
      )
      if (waiting[0].n >= 50) break
      await sleep(20)
    }
    // Writes the row (a takeover of its own would do): the waiting claims' snapshots are older.
    await admin.query("UPDATE idemkit_records SET updated_at = updated_at + interval '1 millisecond' WHERE key = $1", [
      base.key,
    ])
    await admin.query('COMMIT')

    const results = await claims
    const kinds = results.map((result) => (result.status === 'fulfilled' ? result.value.kind : String(result.reason)))
    expect(
      kinds.filter((kind) => kind === ClaimReply.TAKEN_OVER || kind === ClaimReply.ACQUIRED),
      kinds.join(' | '),
    ).toHaveLength(1)
    expect(
      kinds.filter((kind) => kind === ClaimReply.IN_PROGRESS),
      kinds.join(' | '),
    ).toHaveLength(49)
  }, 90_000)
})
