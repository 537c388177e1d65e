/**
 * Retention at any key rate: a sweep round used to stop after `sweepBatch × 10` rows (10,000
 * by default), so above ~167 new keys/s per instance the table grew without bound, and nothing
 * said so. A round now runs until nothing expired is left or its time budget is spent; a round
 * that ends on the budget reports `sweep-behind` (once, until caught up) and the next round
 * starts at once instead of a whole interval later.
 */
import { randomBytes } from 'node:crypto'
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics'
import pg from 'pg'
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest'
import { instrumentIdempotency } from '../../src/otel/index.js'
import { type PostgresStore, type PostgresStoreEvent, postgresStore } from '../../src/stores/postgres/index.js'
import { sleep } from '../helpers/executor-harness.js'
import { testPostgresPool } from '../helpers/stores.js'

/** A metric reader the test collects from itself. */
class Reader extends MetricReader {
  protected async onForceFlush(): Promise<void> {}
  protected async onShutdown(): Promise<void> {}
}

describe('issue 23: the sweeper keeps up', () => {
  let admin: pg.Client
  let pool: pg.Pool
  let stores: PostgresStore[]
  let schema: string

  async function open(options: Partial<Parameters<typeof postgresStore>[0]> = {}): Promise<PostgresStore> {
    const store = postgresStore({ pool, keyPrefix: 'test', sweepIntervalMs: 0, schema, ...options })
    stores.push(store)
    await store.migrate()
    return store
  }

  /** `n` rows that expired a minute ago. */
  async function expiredRows(n: number): Promise<void> {
    await admin.query(
      `INSERT INTO ${schema}.idemkit_records (key, state, owner, attempt, rev, op, fp, codec, policy, lease_until, expires_at, created_at, updated_at)
       SELECT 'test:idem:1:d1:op:' || i, 'COMPLETED', repeat('0', 64), 1, 2, 'x', 'x', 'x', 'x',
         now() - interval '2 minutes', now() - interval '1 minute', now() - interval '2 minutes', now() - interval '2 minutes'
       FROM generate_series(1, $1::int) i`,
      [n],
    )
  }

  const rows = async () => Number((await admin.query(`SELECT count(*) FROM ${schema}.idemkit_records`)).rows[0].count)

  beforeEach(async () => {
    stores = []
    schema = `idem_s_${randomBytes(4).toString('hex')}`
    pool = testPostgresPool()
    admin = new pg.Client({ connectionString: inject('postgresUrl') })
    await admin.connect()
  })

  afterEach(async () => {
    for (const store of stores) await store.close()
    await pool.end()
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)
    await admin.end()
  })

  it('deletes 25,000 expired rows in one round (it used to stop at 10,000)', async () => {
    const store = await open({ sweepBudgetMs: 60_000 })
    await expiredRows(25_000)

    expect(await store.sweep()).toBe(25_000)
    expect(await rows()).toBe(0)
  }, 60_000)

  it('reports sweep-behind once when a round ends on its budget, and catches up without waiting an interval', async () => {
    await open()
    await expiredRows(25_000)
    const reader = new Reader()
    const instrumentation = instrumentIdempotency({
      meterProvider: new MeterProvider({ readers: [reader] }),
      spans: false,
    })
    const events: PostgresStoreEvent[] = []
    // Rounds of one statement (1,000 rows) each, every 3 s unless behind: paced by the
    // interval, 25,000 rows would take 75 s.
    await open({ sweepIntervalMs: 3_000, sweepBudgetMs: 1, onEvent: (event) => events.push(event) })

    for (let i = 0; i < 400 && (await rows()) > 0; i++) await sleep(100)

    expect(await rows()).toBe(0)
    const behind = events.filter((event) => event.type === 'sweep-behind')
    expect(behind).toHaveLength(1)
    expect(behind[0]).toMatchObject({ deleted: 1_000 })
    expect(behind[0]?.message).toContain('expired rows remain')
    const swept = events.filter((event) => event.type === 'swept')
    expect(swept.reduce((sum, event) => sum + (event.type === 'swept' ? event.deleted : 0), 0)).toBe(25_000)
    // idemkit/otel counts the round that fell behind.
    const { resourceMetrics } = await reader.collect()
    instrumentation.close()
    const counted = resourceMetrics.scopeMetrics
      .flatMap((scope) => scope.metrics)
      .find((metric) => metric.descriptor.name === 'idemkit.store.sweep.behind')
    expect(counted?.dataPoints.map((point) => point.value)).toEqual([1])
  }, 60_000)

  it('removes the leases of runs that ended with the records they outlived', async () => {
    const store = await open()
    await expiredRows(1)
    await admin.query(
      `INSERT INTO ${schema}.idemkit_records_leases (key, attempt, lease_until, expires_at)
       VALUES ('test:idem:1:d1:op:1', 1, now() + interval '1 hour', now() + interval '2 hours'),
              ('test:idem:1:d1:op:gone', 1, now() + interval '1 hour', now() + interval '2 hours')`,
    )

    expect(await store.sweep()).toBe(1)
    const leases = await admin.query(`SELECT count(*)::int AS n FROM ${schema}.idemkit_records_leases`)
    expect(leases.rows[0].n).toBe(0)
  })
})
