/**
 * Deploys: `migrate()` on every instance's start must not stall the writes of the others. At
 * its version it reads the catalog and takes no lock on the table (it used to run CREATE INDEX
 * IF NOT EXISTS, which waits for a SHARE lock behind any open writing transaction, and made
 * new-key claims queue behind it); when it must change something, its locks wait at most
 * `lockTimeoutMs`, it retries and says what it waits on; the functions carry the schema version
 * in their names, so an older version's functions are never replaced mid rolling deploy; and
 * `idemkit migrate --check` gates a deploy pipeline on the version.
 */
import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest'
import { StoreUnavailableError } from '../../src/core/errors.js'
import { ClaimReply } from '../../src/core/record.js'
import {
  POSTGRES_SCHEMA_VERSION,
  type PostgresStore,
  type PostgresStoreEvent,
  postgresStore,
} from '../../src/stores/postgres/index.js'
import { lockKey } from '../../src/stores/postgres/statements.js'
import { cli } from '../helpers/cli.js'
import { claimRequest, testPostgresPool } from '../helpers/stores.js'
import { releasedSql } from '../stores/postgres/fixtures/released/index.js'

/** Rejects when `promise` has not settled within `ms`: a call stuck behind a lock fails the test. */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const guard = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms)
  })
  return Promise.race([promise, guard]).finally(() => clearTimeout(timer))
}

describe('issue 23: migrate() on a deploy', () => {
  let admin: pg.Client
  let blocker: pg.Client
  let pools: pg.Pool[]
  let stores: PostgresStore[]
  let schema: string

  function open(options: Partial<Parameters<typeof postgresStore>[0]> = {}) {
    const pool = testPostgresPool()
    pools.push(pool)
    const store = postgresStore({ pool, keyPrefix: 'test', sweepIntervalMs: 0, schema, ...options })
    stores.push(store)
    return store
  }

  /** The oid and xmin of a function: a CREATE OR REPLACE changes the xmin. */
  async function functionRow(name: string): Promise<{ oid: number; xmin: string } | undefined> {
    const { rows } = await admin.query(
      `SELECT p.oid::int AS oid, p.xmin::text AS xmin FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
       WHERE n.nspname = $1 AND p.proname = $2`,
      [schema, name],
    )
    return rows[0]
  }

  beforeEach(async () => {
    pools = []
    stores = []
    schema = `idem_d_${randomBytes(4).toString('hex')}`
    admin = new pg.Client({ connectionString: inject('postgresUrl') })
    blocker = new pg.Client({ connectionString: inject('postgresUrl'), application_name: 'slow-writer' })
    for (const client of [admin, blocker]) {
      client.on('error', () => undefined)
      await client.connect()
    }
  })

  afterEach(async () => {
    await blocker.query('ROLLBACK').catch(() => undefined)
    await blocker.end()
    for (const store of stores) await store.close()
    for (const pool of pools) await pool.end()
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)
    await admin.end()
  })

  it('at its version, takes no lock: it returns, and a new-key claim succeeds, behind an open writing transaction', async () => {
    const first = open()
    await first.migrate()
    const claimedBefore = await functionRow('idemkit_records_claim_v2')
    // An open transaction that wrote a record (a slow COMMIT, an operator's session): it holds
    // ROW EXCLUSIVE on the table, which CREATE INDEX's SHARE lock would wait for.
    await blocker.query('BEGIN')
    await blocker.query(
      `INSERT INTO ${schema}.idemkit_records (key, state, owner, attempt, rev, op, fp, codec, policy, lease_until, expires_at, created_at, updated_at)
       VALUES ('test:held', 'CLAIMED', repeat('0', 64), 1, 1, 'x', 'x', 'x', 'x', now(), now() + interval '1 hour', now(), now())`,
    )

    const deploying = open({ lockTimeoutMs: 500, statementTimeoutMs: 1_000 })
    const other = open({ lockTimeoutMs: 500, statementTimeoutMs: 1_000 })
    const request = claimRequest(other)
    const [migrated, claimed] = await within(
      Promise.all([deploying.migrate(), other.claim(request)]),
      15_000,
      'migrate() and a claim behind an open writing transaction',
    )

    expect(migrated).toEqual({ version: POSTGRES_SCHEMA_VERSION })
    expect(claimed.kind).toBe(ClaimReply.ACQUIRED)
    // Nothing was replaced: the functions are the ones the first start created.
    expect(await functionRow('idemkit_records_claim_v2')).toEqual(claimedBefore)
  }, 30_000)

  it('when it must change the schema, waits lockTimeoutMs per try, names the holder, retries, then gives up', async () => {
    await blocker.query('BEGIN')
    await blocker.query(`SELECT pg_advisory_xact_lock(${lockKey('migrate', schema, 'idemkit_records')})`)
    const { rows } = await blocker.query('SELECT pg_backend_pid() AS pid')
    const events: PostgresStoreEvent[] = []
    const store = open({
      lockTimeoutMs: 200,
      statementTimeoutMs: 1_000,
      migrateAttempts: 3,
      onEvent: (e) => events.push(e),
    })

    const error = await within(store.migrate(), 15_000, 'migrate() behind a held lock').catch((e: unknown) => e)

    expect(error).toBeInstanceOf(StoreUnavailableError)
    expect((error as Error).message).toContain(`pid ${rows[0].pid} (slow-writer, idle in transaction`)
    expect((error as Error).message).toContain('try 3 of 3')
    expect(events.map((event) => event.type === 'migrate-waiting' && event.attempt)).toEqual([1, 2])
    expect(events[0]?.message).toContain(`pid ${rows[0].pid}`)
    expect(await store.schemaVersion()).toBe(0)

    await blocker.query('COMMIT')
    expect(await store.migrate()).toEqual({ version: POSTGRES_SCHEMA_VERSION })
    expect((await store.claim(claimRequest(store))).kind).toBe(ClaimReply.ACQUIRED)
  }, 30_000)

  it('from schema 1, adds the versioned functions beside the old ones without a lock writers wait for', async () => {
    // An install of schema 1: its table (the released 001) and an old function of its own.
    await admin.query(`CREATE SCHEMA ${schema}`)
    await admin.query(releasedSql(1, schema))
    await admin.query(
      `CREATE FUNCTION ${schema}.idemkit_records_claim(p_key text) RETURNS text LANGUAGE sql AS $$ SELECT 'old' $$`,
    )
    const old = await functionRow('idemkit_records_claim')
    const url = inject('postgresUrl')
    const check = ['migrate', '--check', '--store', url, '--schema', schema]
    const behind = await cli(check)
    expect(behind).toMatchObject({ code: 5 })
    expect(behind.stdout).toContain(`schema 1, behind: this version needs schema ${POSTGRES_SCHEMA_VERSION}`)
    await blocker.query('BEGIN')
    await blocker.query(`UPDATE ${schema}.idemkit_records SET rev = rev + 1`)

    const store = open({ lockTimeoutMs: 500, statementTimeoutMs: 1_000 })
    expect(await within(store.migrate(), 15_000, 'migrate() from schema 1')).toEqual({
      version: POSTGRES_SCHEMA_VERSION,
    })
    await blocker.query('COMMIT')

    // The old version's function is untouched (an instance of it may still be calling it).
    expect(await functionRow('idemkit_records_claim')).toEqual(old)
    expect(await functionRow('idemkit_records_claim_v2')).toBeDefined()
    expect((await store.claim(claimRequest(store))).kind).toBe(ClaimReply.ACQUIRED)
    const current = await cli(check)
    expect(current).toMatchObject({ code: 0 })
    expect(current.stdout).toContain(`schema ${POSTGRES_SCHEMA_VERSION}, up to date`)
  }, 60_000)

  it('idemkit migrate applies the schema to a database without it, and --check says it is missing until then', async () => {
    const url = inject('postgresUrl')
    const missing = await cli(['migrate', '--check', '--store', url, '--schema', schema])
    expect(missing.code).toBe(5)
    expect(missing.stdout).toContain('not there')
    const applied = await cli(['migrate', '--store', url, '--schema', schema])
    expect(applied).toMatchObject({ code: 0, stdout: `${schema}.idemkit_records: schema ${POSTGRES_SCHEMA_VERSION}\n` })
    expect((await cli(['migrate', '--check', '--store', url, '--schema', schema])).code).toBe(0)
    const redis = await cli(['migrate', '--check', '--store', 'redis://127.0.0.1:1'])
    expect(redis.code).toBe(2)
  }, 60_000)
})
