/**
 * What READ COMMITTED does with `clock_timestamp()` in an UPDATE's WHERE when the UPDATE waits
 * for a row lock another session holds, on the suite's own cluster: the condition is evaluated
 * again after the wait (EvalPlanQual) only when the holder wrote a new version of the row; a
 * holder that only locked it (`FOR UPDATE`, `FOR SHARE`, then COMMIT) leaves the reading taken
 * before the wait, so a plain fenced UPDATE can write a row whose lease ran out while it waited.
 * The store's completion (`_complete_v3`) locks first and reads the clock after the lock, so it
 * answers NOT_FOUND there (docs/postgresql.md "What was measured and not kept").
 */
import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest'
import { TransitionReply } from '../../../src/core/record.js'
import { type PostgresStore, postgresStore } from '../../../src/stores/postgres/index.js'
import { sleep } from '../../helpers/executor-harness.js'
import { claimRequest, testPostgresPool } from '../../helpers/stores.js'

/** How long past the lease's end the holder keeps the lock, so the lease certainly ran out during the wait. */
const PAST_THE_END_MS = 300

describe('a row lock wait and clock_timestamp() in the WHERE (READ COMMITTED)', () => {
  let clients: pg.Client[]
  let admin: pg.Client
  let schema: string

  async function connect(): Promise<pg.Client> {
    const client = new pg.Client({ connectionString: inject('postgresUrl') })
    client.on('error', () => undefined)
    await client.connect()
    clients.push(client)
    return client
  }

  beforeEach(async () => {
    clients = []
    admin = await connect()
    schema = `idem_clock_${randomBytes(4).toString('hex')}`
    await admin.query(`CREATE SCHEMA ${schema}`)
    await admin.query(`CREATE TABLE ${schema}.t (key text PRIMARY KEY, owner text NOT NULL,
      expires_at timestamptz NOT NULL, n int NOT NULL)`)
  })

  afterEach(async () => {
    for (const client of clients) await client.query('ROLLBACK').catch(() => undefined)
    await admin.query(`DROP SCHEMA ${schema} CASCADE`)
    for (const client of clients) await client.end()
  })

  /** The database's clock, epoch milliseconds. */
  async function clock(): Promise<number> {
    const { rows } = await admin.query('SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS now')
    return Number(rows[0].now)
  }

  /**
   * Resolves once the backend that `which` picks (a condition on pg_stat_activity, `$1` its
   * value) waits for a lock, and whether the database's clock was still before `until` (epoch
   * ms) then: a statement waiting for the row's lock has read the row, and evaluated its WHERE,
   * before it began to wait.
   */
  async function waitingFor(which: string, value: unknown, until: number): Promise<boolean> {
    for (let i = 0; i < 500; i++) {
      const { rows } = await admin.query(
        `SELECT clock_timestamp() < timestamptz 'epoch' + $2::float8 * interval '1 millisecond' AS live
         FROM pg_stat_activity WHERE ${which} AND wait_event_type = 'Lock'`,
        [value, until],
      )
      if (rows.length > 0) return rows[0].live === true
      await sleep(5)
    }
    throw new Error(`no backend where ${which} (${String(value)}) waited for a lock`)
  }

  /**
   * One row leased until `leaseMs` from now; a holder locks it `FOR UPDATE`; another session
   * sends the fenced UPDATE, which waits for that lock. The holder lets go `PAST_THE_END_MS`
   * after the lease's end (or after 900 ms for a lease that outlives the wait), having written
   * the row first when `holderWrites` (a new row version) or only locked it. What the UPDATE
   * matched, with whether the row it wrote had run out by then (its RETURNING reads the clock
   * after the write).
   */
  async function race(leaseMs: number, holderWrites: boolean) {
    const [holder, waiter] = [await connect(), await connect()]
    const pid = (await waiter.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number
    const inserted = await admin.query(
      `INSERT INTO ${schema}.t VALUES ('k', 'o', date_trunc('milliseconds', clock_timestamp()) + $1 * interval '1 millisecond', 0)
       RETURNING (extract(epoch FROM expires_at) * 1000)::float8 AS until`,
      [leaseMs],
    )
    const until = Number(inserted.rows[0].until)
    await holder.query('BEGIN')
    await holder.query(`SELECT 1 FROM ${schema}.t WHERE key = 'k' FOR UPDATE`)
    const update = waiter.query(
      `UPDATE ${schema}.t SET n = n + 10 WHERE key = 'k' AND owner = 'o' AND expires_at > clock_timestamp()
       RETURNING n, expires_at <= clock_timestamp() AS ran_out`,
    )
    const liveWhenWaiting = await waitingFor('pid = $1', pid, until)
    const end = leaseMs > 5_000 ? (await clock()) + 900 : until + PAST_THE_END_MS
    await sleep(Math.max(0, end - (await clock())))
    if (holderWrites) await holder.query(`UPDATE ${schema}.t SET n = n + 1 WHERE key = 'k'`)
    const committedAt = await holder.query('COMMIT').then(clock)
    const { rowCount, rows } = await update
    return { liveWhenWaiting, ranOutBeforeCommit: committedAt > until, matched: rowCount, row: rows[0] }
  }

  it('a holder that only locked the row: the WHERE is not evaluated again, and the UPDATE writes a row whose lease ran out while it waited', async () => {
    const seen = await race(600, false)

    expect(seen.liveWhenWaiting).toBe(true)
    expect(seen.ranOutBeforeCommit).toBe(true)
    expect(seen.matched).toBe(1)
    expect(seen.row).toEqual({ n: 10, ran_out: true })
  })

  it('a holder that only locked the row, with a lease that outlives the wait: the UPDATE matches it', async () => {
    const seen = await race(60_000, false)

    expect(seen.liveWhenWaiting).toBe(true)
    expect(seen.matched).toBe(1)
    expect(seen.row).toEqual({ n: 10, ran_out: false })
  })

  it('a holder that wrote a new version of the row: the WHERE is evaluated again after the wait (EvalPlanQual), with a new clock reading, and matches nothing once the lease ran out', async () => {
    const seen = await race(600, true)

    expect(seen.liveWhenWaiting).toBe(true)
    expect(seen.ranOutBeforeCommit).toBe(true)
    expect(seen.matched).toBe(0)
    expect((await admin.query(`SELECT n FROM ${schema}.t`)).rows).toEqual([{ n: 1 }])
  })

  it('a holder that wrote a new version of the row, with a lease that outlives the wait: the UPDATE applies to that version', async () => {
    const seen = await race(60_000, true)

    expect(seen.liveWhenWaiting).toBe(true)
    expect(seen.matched).toBe(1)
    expect(seen.row).toEqual({ n: 11, ran_out: false })
  })

  describe("the store's completion", () => {
    let pool: pg.Pool
    let store: PostgresStore

    beforeEach(() => {
      pool = testPostgresPool()
      store = postgresStore({
        pool,
        keyPrefix: 'test',
        sweepIntervalMs: 0,
        lockTimeoutMs: 5_000,
        statementTimeoutMs: 6_000,
      })
    })

    afterEach(async () => {
      await store.close()
      await pool.end()
    })

    it('reads the clock after the lock: a record that ran out while a holder only locked its row answers NOT_FOUND, unchanged', async () => {
      const times = { leaseMs: 500, replayWindowMs: 60_000, failureRetentionMs: 500 }
      const base = claimRequest(store, times)
      const held = await store.claim(base)
      if (held.kind !== 'ACQUIRED') throw new Error(held.kind)
      const holder = await connect()
      await holder.query('BEGIN')
      const locked = await holder.query(
        `SELECT (extract(epoch FROM expires_at) * 1000)::float8 AS until FROM idemkit_records WHERE key = $1 FOR UPDATE`,
        [base.key],
      )
      const until = Number(locked.rows[0].until)
      const completed = store.complete({ ...base, attempt: 1, rev: held.rev }, Buffer.from('late'), times)
      const liveWhenWaiting = await waitingFor('query LIKE $1', '%idemkit_records_complete_v3(%', until)
      await sleep(Math.max(0, until + PAST_THE_END_MS - (await clock())))
      await holder.query('COMMIT')

      expect(liveWhenWaiting).toBe(true)
      expect(await completed).toEqual({ kind: TransitionReply.NOT_FOUND })
      const row = await admin.query('SELECT state, rev FROM idemkit_records WHERE key = $1', [base.key])
      expect(row.rows).toEqual([{ state: 'EXECUTING', rev: String(held.rev) }])
    })
  })
})
