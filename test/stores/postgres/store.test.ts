/**
 * What only the PostgreSQL store has, on the suite's own cluster: concurrent claims serialising
 * on the row, the clock read after the lock, the per-call bounds (lock_timeout, the pool's
 * connections, the statement's reply), a connection lost mid-call, the migration and the
 * sweeper. The contract itself is test/contract/postgres.test.ts.
 */
import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest'
import { StoreIndeterminateError, StoreProtocolError, StoreUnavailableError } from '../../../src/core/errors.js'
import { ClaimReply, TransitionReply } from '../../../src/core/record.js'
import type { ClaimRequest, ClaimResult } from '../../../src/core/store.js'
import {
  migrationSql,
  POSTGRES_SCHEMA_VERSION,
  type PostgresStore,
  type PostgresStoreEvent,
  postgresFault,
  postgresStore,
} from '../../../src/stores/postgres/index.js'
import { lockKey } from '../../../src/stores/postgres/statements.js'
import { cli } from '../../helpers/cli.js'
import { sleep } from '../../helpers/executor-harness.js'
import { claimRequest, testPostgresPool } from '../../helpers/stores.js'
import { startTcpProxy } from '../../helpers/tcp-proxy.js'
import { releasedSql } from './fixtures/released/index.js'

const token = () => randomBytes(32).toString('hex')
/**
 * Times of the records a migration test writes before its two CLI runs: each run starts a
 * process, seconds on a loaded machine, and the records must still be live after both.
 */
const BEFORE_THE_CLI = { leaseMs: 300_000, replayWindowMs: 300_000, failureRetentionMs: 300_000 } as const

/**
 * The earlier versions' functions that became calls of this version's, each with the function it
 * calls: schema 7 made the claims calls of the one claim decision, schema 10 the others.
 */
const DELEGATES: Record<string, string> = {
  claim_v2: '_claim_v4(',
  claim_v3: '_claim_v4(',
  locked_v2: '_holder_v2(',
  complete_v2: '_complete_v3(',
  mark_failed_v2: '_mark_failed_v3(',
  sweep_v2: '_sweep_v3(',
}

/**
 * Catalog rows of functions with the bodies of the earlier versions' functions that this version
 * makes calls (`DELEGATES`) left out, once each is checked: a call of this version's function
 * (`asCalls`), or a body of its own, as earlier schemas wrote them.
 */
function earlierFunctionsChecked<Row extends { proname: string; prosrc: string }>(
  rows: Row[],
  asCalls: boolean,
): Omit<Row, 'prosrc'>[] {
  return rows.map(({ prosrc, ...row }) => {
    // Schema 9 changes `_claim_v4`'s body only: a claim whose insert met a concurrent one reads
    // the committed row again before it waits for the lock.
    if (/_claim_v4$/.test(row.proname)) {
      expect(/v_found := FOUND;\s+END IF;\s+IF v_found AND x.state = 'EXECUTING'/.test(prosrc), row.proname).toBe(
        asCalls,
      )
      return row
    }
    const callee = DELEGATES[row.proname.replace(/^idemkit_records_/, '')]
    if (callee === undefined) return { ...row, prosrc }
    expect(prosrc.includes(callee), row.proname).toBe(asCalls)
    return row
  })
}

/** The functions of schemas 4 to 7, beside the earlier ones. */
const LATER_FUNCTIONS = /_(claim_v3|claim_v4|complete_v3|mark_failed_v3|step_v1|sweep_v3)$/

describe('the PostgreSQL store', () => {
  let pools: pg.Pool[]
  let stores: PostgresStore[]
  let admin: pg.Client

  /** A store on a pool of its own; both are closed after the test. */
  function open(options: Partial<Parameters<typeof postgresStore>[0]> = {}, poolOptions: pg.PoolConfig = {}) {
    const pool = testPostgresPool(poolOptions)
    pools.push(pool)
    const store = postgresStore({ pool, keyPrefix: 'test', sweepIntervalMs: 0, ...options })
    stores.push(store)
    return { pool, store }
  }

  beforeEach(async () => {
    pools = []
    stores = []
    admin = new pg.Client({ connectionString: inject('postgresUrl') })
    admin.on('error', () => undefined)
    await admin.connect()
  })

  afterEach(async () => {
    await admin.query('ROLLBACK').catch(() => undefined)
    await admin.end()
    for (const store of stores) await store.close()
    for (const pool of pools) await pool.end()
  })

  /**
   * A claim as an instance of schema 2 or 3 sends it (`<table>_claim_v2`, its arguments and
   * columns): kind, attempt, rev.
   */
  async function previousClaim(
    schema: string,
    request: ClaimRequest,
  ): Promise<{ kind: string; attempt: number; rev: number }> {
    const { rows } = await admin.query(
      `SELECT kind, attempt, rev FROM ${schema}.idemkit_records_claim_v2($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
      [
        request.key,
        request.owner,
        request.fingerprint,
        request.operation,
        request.codec,
        request.policy,
        request.start,
        request.expiredExecution === 'takeover',
        request.leaseMs,
        request.failureRetentionMs,
        request.legacyFingerprints ?? [],
        2_000,
      ],
    )
    return { kind: rows[0].kind, attempt: Number(rows[0].attempt), rev: Number(rows[0].rev) }
  }

  /** A completion as an instance of schema 2 or 3 sends it (`<table>_complete_v2`): kind, rev. */
  async function previousComplete(
    schema: string,
    ref: { key: string; owner: string; attempt: number; rev: number },
    response: Buffer,
  ): Promise<{ kind: string; rev: number | null }> {
    const { rows } = await admin.query(
      `SELECT kind, rev FROM ${schema}.idemkit_records_complete_v2($1, $2, $3, $4, $5, $6, $7)`,
      [ref.key, ref.owner, ref.attempt, ref.rev, BEFORE_THE_CLI.replayWindowMs, response, 2_000],
    )
    return { kind: rows[0].kind, rev: rows[0].rev === null ? null : Number(rows[0].rev) }
  }

  /** Resolves once `n` backends wait for a lock in a call of `fn` (pg_stat_activity, from a session of its own). */
  async function waitingCalls(fn: string, n: number): Promise<void> {
    const watch = new pg.Client({ connectionString: inject('postgresUrl') })
    await watch.connect()
    try {
      for (let i = 0; i < 750; i++) {
        const { rows } = await watch.query(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1",
          [`%idemkit_records_${fn}_v_(%`],
        )
        if (rows[0].n >= n) return
        await sleep(20)
      }
      throw new Error(`fewer than ${n} ${fn} calls waited for the row`)
    } finally {
      await watch.end()
    }
  }

  describe('concurrent claims on one key', () => {
    // The test's own session holds the key's row, so all 50 claims are at the row, waiting,
    // before it lets go: they meet under the lock, not one after another.

    it('gives exactly one ACQUIRED among 50 claims of a new key released at once', async () => {
      // Generous bounds: 50 connections are opened, on a loaded machine, before they all wait.
      const { store } = open(
        { lockTimeoutMs: 30_000, statementTimeoutMs: 40_000, acquireTimeoutMs: 30_000 },
        { max: 50 },
      )
      const base = claimRequest(store)
      await admin.query('BEGIN')
      await admin.query(
        `INSERT INTO idemkit_records (key, state, owner, attempt, rev, op, fp, codec, policy, lease_until, expires_at, created_at, updated_at)
         VALUES ($1, 'CLAIMED', repeat('0', 64), 1, 1, 'x', 'x', 'x', 'x', now(), now() + interval '1 hour', now(), now())`,
        [base.key],
      )
      const claims = Promise.all(Array.from({ length: 50 }, () => store.claim({ ...base, owner: token() })))
      await waitingCalls('claim', 50)
      await admin.query('ROLLBACK')

      const kinds = (await claims).map((result) => result.kind)
      expect(kinds.filter((kind) => kind === ClaimReply.ACQUIRED)).toHaveLength(1)
      expect(kinds.filter((kind) => kind === ClaimReply.IN_PROGRESS)).toHaveLength(49)
    }, 90_000)

    it('gives exactly one holder among 50 claims of an expired row released at once', async () => {
      // Generous bounds: 50 connections are opened, on a loaded machine, before they all wait.
      const { store } = open(
        { lockTimeoutMs: 30_000, statementTimeoutMs: 40_000, acquireTimeoutMs: 30_000 },
        { max: 50 },
      )
      const base = claimRequest(store, { leaseMs: 20, failureRetentionMs: 20 })
      await store.claim(base)
      await sleep(60)
      await admin.query('BEGIN')
      await admin.query('SELECT 1 FROM idemkit_records WHERE key = $1 FOR UPDATE', [base.key])
      const claims = Promise.all(
        Array.from({ length: 50 }, () => store.claim({ ...base, owner: token(), leaseMs: 10_000 })),
      )
      await waitingCalls('claim', 50)
      await admin.query('COMMIT')

      const results = await claims
      expect(results.filter((result) => result.kind === ClaimReply.ACQUIRED)).toHaveLength(1)
      expect(results.filter((result) => result.kind === ClaimReply.IN_PROGRESS)).toHaveLength(49)
    }, 90_000)

    it('decides a burst of claims that met a concurrent insert of the key without queueing for its row lock', async () => {
      // 50 claims wait for the admin session's insert of the key (a claim in flight); a third
      // session's upsert waits too, ahead of them, and locks the row without changing it (its
      // DO UPDATE's WHERE is false) from the moment the insert commits until the claims are answered. Claims that queued for the row's lock one
      // by one would wait for that session; claims that decide from the committed row answer.
      const { store } = open(
        { lockTimeoutMs: 30_000, statementTimeoutMs: 40_000, acquireTimeoutMs: 30_000 },
        { max: 50 },
      )
      const base = claimRequest(store)
      const row = `INSERT INTO idemkit_records (key, state, owner, attempt, rev, op, fp, codec, policy, lease_until, expires_at, created_at, updated_at)
         VALUES ($1, 'EXECUTING', repeat('0', 64), 1, 1, 'op', 'f', 'c', 'p', now() + interval '1 hour', now() + interval '2 hours', now(), now())`
      const holder = new pg.Client({ connectionString: inject('postgresUrl') })
      holder.on('error', () => undefined)
      await holder.connect()
      try {
        await admin.query('BEGIN')
        await admin.query(row, [base.key])
        await holder.query('BEGIN')
        const held = holder.query(
          `${row} ON CONFLICT (key) DO UPDATE SET updated_at = EXCLUDED.updated_at WHERE false`,
          [base.key],
        )
        const claims = Promise.all(Array.from({ length: 50 }, () => store.claim({ ...base, owner: token() })))
        await waitingCalls('claim', 50)
        await admin.query('COMMIT')
        await held
        // The holder has the row's lock now and keeps it until the claims answered, or 20 s.
        const answered = await Promise.race([claims, sleep(20_000).then(() => undefined)])
        await holder.query('COMMIT')
        expect(answered?.map((result) => result.kind)).toEqual(Array.from({ length: 50 }, () => ClaimReply.IN_PROGRESS))
        await claims
      } finally {
        await holder.end()
      }
    }, 90_000)
  })

  it("decides a claim that writes with the database's clock read after the row lock, not when the call arrived", async () => {
    const { store } = open()
    const times = { leaseMs: 5_000, replayWindowMs: 5_000, failureRetentionMs: 300 }
    const base = claimRequest(store, times)
    const first = await store.claim(base)
    if (first.kind !== ClaimReply.ACQUIRED) throw new Error(first.kind)
    await store.markFailed({ ...base, attempt: 1, rev: first.rev }, 'retryable', times)
    // Another session holds the FAILED_RETRYABLE row while its retention runs out; the claim
    // (a takeover when it arrives) waits behind it.
    await admin.query('BEGIN')
    await admin.query('SELECT 1 FROM idemkit_records WHERE key = $1 FOR UPDATE', [base.key])
    const started = performance.now()
    const claimed = store.claim({ ...base, owner: token() })
    await sleep(500)
    await admin.query('COMMIT')
    const result = await claimed

    // When it arrived: a takeover, attempt 2. Once it held the row: expired, a new record, attempt 1.
    expect(performance.now() - started).toBeGreaterThanOrEqual(450)
    expect(result).toMatchObject({ kind: ClaimReply.ACQUIRED, attempt: 1 })
  })

  it('answers the claims that change nothing without waiting for a row another session holds', async () => {
    const { store } = open({ lockTimeoutMs: 2_000, statementTimeoutMs: 3_000 })
    const running = claimRequest(store)
    const done = claimRequest(store)
    await store.claim(running)
    const held = await store.claim(done)
    if (held.kind !== ClaimReply.ACQUIRED) throw new Error(held.kind)
    await store.complete({ ...done, attempt: 1, rev: held.rev }, Buffer.from('stored'), done)
    await admin.query('BEGIN')
    await admin.query('SELECT 1 FROM idemkit_records WHERE key = ANY($1) FOR UPDATE', [[running.key, done.key]])

    const started = performance.now()
    const answers = await Promise.all([
      store.claim({ ...running, owner: token() }),
      store.claim(running),
      store.claim({ ...done, owner: token() }),
      store.claim({ ...done, owner: token(), fingerprint: 'another request' }),
    ])
    const waited = performance.now() - started
    await admin.query('ROLLBACK')

    expect(answers.map((answer) => answer.kind)).toEqual([
      ClaimReply.IN_PROGRESS,
      ClaimReply.REPLAYED_ACQUIRE,
      ClaimReply.COMPLETED_REPLAY,
      ClaimReply.FINGERPRINT_MISMATCH,
    ])
    expect(waited).toBeLessThan(1_000)
  })

  it('completes a row another session holds once it lets go, within lockTimeoutMs, with the clock read after the wait', async () => {
    const { store } = open({ lockTimeoutMs: 3_000, statementTimeoutMs: 4_000 })
    const times = { leaseMs: 10_000, replayWindowMs: 60_000, failureRetentionMs: 10_000 }
    const base = claimRequest(store, times)
    const held = await store.claim(base)
    if (held.kind !== ClaimReply.ACQUIRED) throw new Error(held.kind)
    await admin.query('BEGIN')
    await admin.query('SELECT 1 FROM idemkit_records WHERE key = $1 FOR UPDATE', [base.key])
    const clock = await admin.query('SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now')
    const sent = Number(clock.rows[0].now)
    const completed = store.complete({ ...base, attempt: 1, rev: held.rev }, Buffer.from('late'), times)
    await sleep(500)
    await admin.query('COMMIT')

    expect(await completed).toEqual({ kind: TransitionReply.OK, rev: 2 })
    const replay = await store.claim({ ...base, owner: token() })
    if (replay.kind !== ClaimReply.COMPLETED_REPLAY) throw new Error(replay.kind)
    // The replay window counts from the write, at least 500 ms after the call was sent: the
    // clock was read after the wait, not when the call arrived.
    expect(replay.replayUntil).toBeGreaterThanOrEqual(sent + 450 + times.replayWindowMs)
  })

  describe('bounds on every call', () => {
    it('answers StoreUnavailableError after lockTimeoutMs when another session holds the row, and changes nothing', async () => {
      const { store } = open({ lockTimeoutMs: 300, statementTimeoutMs: 2_000 })
      const base = claimRequest(store)
      const first = await store.claim(base)
      if (first.kind !== ClaimReply.ACQUIRED) throw new Error(first.kind)
      await admin.query('BEGIN')
      await admin.query('SELECT 1 FROM idemkit_records WHERE key = $1 FOR UPDATE', [base.key])

      const started = performance.now()
      const error = await store
        .complete({ ...base, attempt: 1, rev: first.rev }, Buffer.from('x'), base)
        .catch((e) => e)
      const waited = performance.now() - started
      await admin.query('ROLLBACK')

      expect(error).toBeInstanceOf(StoreUnavailableError)
      expect(error.message).toContain('55P03')
      expect(waited).toBeGreaterThanOrEqual(280)
      expect(waited).toBeLessThan(2_000)
      expect(await store.inspect(base.key, base.owner)).toMatchObject({ kind: 'EXECUTING', rev: first.rev })
    })

    it('answers StoreUnavailableError after acquireTimeoutMs when the pool has no connection to give, without sending', async () => {
      const { pool, store } = open({ acquireTimeoutMs: 200 }, { max: 1 })
      const held = await pool.connect()
      const started = performance.now()

      const error = await store.claim(claimRequest(store)).catch((e) => e)
      const waited = performance.now() - started
      held.release()

      expect(error).toBeInstanceOf(StoreUnavailableError)
      expect(error.message).toContain('acquireTimeoutMs')
      expect(waited).toBeGreaterThanOrEqual(180)
      expect(waited).toBeLessThan(1_000)
      // The connection that arrived after the store gave up went back to the pool.
      await sleep(20)
      expect(pool.idleCount).toBe(1)
      expect((await store.claim(claimRequest(store))).kind).toBe(ClaimReply.ACQUIRED)
    })

    it('answers StoreIndeterminateError, without crashing, when the connection is terminated mid-call', async () => {
      const { store } = open({ lockTimeoutMs: 5_000, statementTimeoutMs: 10_000 })
      const base = claimRequest(store)
      await store.claim(base)
      await admin.query('BEGIN')
      await admin.query('SELECT 1 FROM idemkit_records WHERE key = $1 FOR UPDATE', [base.key])
      const pending = store.renew({ ...base, attempt: 1, rev: 1 }, base).catch((e) => e)
      const watch = new pg.Client({ connectionString: inject('postgresUrl') })
      await watch.connect()
      let pid: number | undefined
      for (let i = 0; i < 100 && pid === undefined; i++) {
        const { rows } = await watch.query(
          "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%idemkit_records_renew_v2(%'",
        )
        pid = rows[0]?.pid
        if (pid === undefined) await sleep(20)
      }
      await watch.query('SELECT pg_terminate_backend($1)', [pid])
      await watch.end()
      const error = await pending
      await admin.query('ROLLBACK')

      expect(pid).toBeTypeOf('number')
      expect(error).toBeInstanceOf(StoreIndeterminateError)
      expect(error.cause).toMatchObject({ code: '57P01', severity: 'FATAL' })
      expect(await store.inspect(base.key, base.owner)).toMatchObject({ kind: 'EXECUTING', mine: true })
    })

    it('refuses options that could not bound a call', () => {
      const pool = testPostgresPool()
      pools.push(pool)
      expect(() => postgresStore({ pool, lockTimeoutMs: 5_000, statementTimeoutMs: 5_000 })).toThrow(
        /statementTimeoutMs/,
      )
      expect(() => postgresStore({ pool, acquireTimeoutMs: 0 })).toThrow(/acquireTimeoutMs/)
      expect(() => postgresStore({ pool, table: 'Records; DROP TABLE x' })).toThrow(/table/)
      expect(() => postgresStore({ pool, schema: 'public.x' })).toThrow(/schema/)
      expect(() => postgresStore({ pool, sweepBatch: 0 })).toThrow(/sweepBatch/)
      expect(() => postgresStore({ pool, poolSize: 3 } as never)).toThrow(/unknown option/)
      expect(() => postgresStore({} as never)).toThrow(/pg.Pool/)
    })
  })

  describe('faults', () => {
    it('classifies what was certainly not applied apart from what may have been', () => {
      const error = (fields: Record<string, unknown>, message = 'x') => Object.assign(new Error(message), fields)
      expect(postgresFault(error({ code: 'ECONNREFUSED' }), false)).toBeInstanceOf(StoreUnavailableError)
      expect(postgresFault(error({ severity: 'ERROR', code: '55P03' }), true)).toBeInstanceOf(StoreUnavailableError)
      expect(postgresFault(error({ severity: 'ERROR', code: '57014' }), true)).toBeInstanceOf(StoreUnavailableError)
      expect(postgresFault(error({ severity: 'ERROR', code: '42883' }), true).message).toContain('migrate()')
      expect(
        postgresFault(error({}, 'Client has encountered a connection error and is not queryable'), true),
      ).toBeInstanceOf(StoreUnavailableError)
      expect(postgresFault(error({ severity: 'FATAL', code: '57P01' }), true)).toBeInstanceOf(StoreIndeterminateError)
      expect(postgresFault(error({}, 'Connection terminated unexpectedly'), true)).toBeInstanceOf(
        StoreIndeterminateError,
      )
      expect(postgresFault(error({ code: 'ECONNRESET' }), true)).toBeInstanceOf(StoreIndeterminateError)
    })

    it('answers StoreIndeterminateError after statementTimeoutMs when the reply does not come, and drops the connection', async () => {
      const proxy = await startTcpProxy(Number(new URL(inject('postgresUrl')).port))
      try {
        const { pool, store } = open(
          { lockTimeoutMs: 100, statementTimeoutMs: 300 },
          { connectionString: `postgres://postgres@127.0.0.1:${proxy.port}/postgres`, max: 1 },
        )
        const base = claimRequest(store)
        // A first claim reads the table's schema version once: done before the replies stop.
        await store.claim(claimRequest(store))
        await store.inspect(base.key, base.owner)
        proxy.setMode('drop-replies')

        const started = performance.now()
        const error = await store.claim(base).catch((e) => e)
        const waited = performance.now() - started
        proxy.setMode('pass')

        expect(error).toBeInstanceOf(StoreIndeterminateError)
        expect(error.message).toContain('statementTimeoutMs')
        expect(waited).toBeGreaterThanOrEqual(280)
        expect(waited).toBeLessThan(1_500)
        // The claim was applied; only its reply was lost. The next call gets a new connection.
        expect(await store.inspect(base.key, base.owner)).toMatchObject({ kind: 'EXECUTING', mine: true })
        expect(pool.totalCount).toBe(1)
      } finally {
        await proxy.close()
      }
    })

    it('answers StoreProtocolError when a function answers in a shape the store does not know', async () => {
      const schema = `idem_p_${randomBytes(4).toString('hex')}`
      const { store } = open({ schema })
      await store.migrate()
      const base = claimRequest(store)
      const claimed = await store.claim(base)
      if (claimed.kind !== ClaimReply.ACQUIRED) throw new Error(claimed.kind)
      const ref = { key: base.key, owner: base.owner, attempt: 1, rev: claimed.rev }
      // Each function replaced by one that answers an unknown outcome (a newer schema, a hand edit).
      await admin.query(`
        CREATE OR REPLACE FUNCTION ${schema}.idemkit_records_inspect_v2(p_key text, p_owner text,
          OUT kind text, OUT mine boolean, OUT attempt bigint, OUT rev bigint, OUT fp text, OUT op text,
          OUT lease_until bigint, OUT lease_left_ms bigint, OUT resp bytea, OUT codec text, OUT policy text,
          OUT replay_until bigint)
        LANGUAGE sql AS $$ SELECT 'PAUSED', true, 1::bigint, 1::bigint, 'f', 'o', 1::bigint, 1::bigint, NULL::bytea, NULL, NULL, NULL::bigint $$;
        CREATE OR REPLACE FUNCTION ${schema}.idemkit_records_renew_v2(p_key text, p_owner text, p_attempt bigint,
          p_lease_ms bigint, p_retention_ms bigint, p_lock_timeout_ms integer, p_held_elsewhere boolean,
          OUT kind text, OUT lease_until bigint, OUT state text)
        LANGUAGE sql AS $$ SELECT 'OK', -5::bigint, NULL::text $$;
        CREATE OR REPLACE FUNCTION ${schema}.idemkit_records_start_v2(p_key text, p_owner text, p_attempt bigint,
          p_rev bigint, p_lease_ms bigint, p_retention_ms bigint, p_lock_timeout_ms integer,
          OUT kind text, OUT rev bigint, OUT state text)
        LANGUAGE sql AS $$ SELECT 'WRONG_STATE', NULL::bigint, 'PAUSED' $$;
        CREATE OR REPLACE FUNCTION ${schema}.idemkit_records_claim_v4(p_key text, p_owner text, p_fp text, p_op text,
          p_codec text, p_policy text, p_start boolean, p_expired text, p_lease_ms bigint, p_retention_ms bigint,
          p_legacy text[], p_lock_timeout_ms integer, OUT r text, OUT resp bytea, OUT codec text, OUT policy text)
        LANGUAGE sql AS $$ SELECT 'ACQUIRED PAUSED 1 1 5', NULL::bytea, NULL::text, NULL::text $$;
        CREATE OR REPLACE FUNCTION ${schema}.idemkit_records_complete_v3(p_key text, p_owner text, p_attempt bigint,
          p_rev bigint, p_replay_ms bigint, p_resp bytea, p_lock_timeout_ms integer, OUT r text)
        LANGUAGE sql AS $$ SELECT 'OK' $$;`)

      for (const call of [
        () => store.inspect(base.key, base.owner),
        () => store.renew(ref, base),
        () => store.start(ref, base),
        // The claim and the completion reach their functions where the fast statements are not
        // certain: a key held by another owner, a rev that is not the row's.
        () => store.claim({ ...base, owner: claimRequest(store).owner }),
        () => store.complete({ ...ref, rev: ref.rev + 5 }, Buffer.from('ok'), base),
      ]) {
        const error = await call().catch((e) => e)
        expect(error).toBeInstanceOf(StoreProtocolError)
      }
      await admin.query(`DROP SCHEMA ${schema} CASCADE`)
    })

    it('rolls a failed migration back and says why', async () => {
      await admin.query('CREATE VIEW idemkit_taken AS SELECT 1 AS x')
      try {
        const { store } = open({ table: 'idemkit_taken' })
        const error = await store.migrate().catch((e) => e)

        expect(error).toBeInstanceOf(StoreUnavailableError)
        expect(error.message).toMatch(/SQLSTATE/)
        const functions = await admin.query(
          "SELECT count(*)::int AS n FROM pg_proc WHERE proname LIKE 'idemkit_taken%'",
        )
        expect(functions.rows[0].n).toBe(0)
      } finally {
        await admin.query('DROP VIEW idemkit_taken')
      }
    })

    it('tells to run migrate() when the table is not there, and sends nothing else', async () => {
      const { store } = open({ table: 'idemkit_never_migrated' })
      const error = await store.claim(claimRequest(store)).catch((e) => e)
      expect(error).toBeInstanceOf(StoreUnavailableError)
      expect(error.message).toContain('run store.migrate()')
    })
  })

  describe('migrate()', () => {
    it('creates the schema, a logged table, its index and functions once, from many instances at once', async () => {
      const schema = `idem_m_${randomBytes(4).toString('hex')}`
      const instances = Array.from({ length: 5 }, () => open({ schema }).store)

      const versions = await Promise.all(instances.map((store) => store.migrate()))
      const again = await (instances[0] as PostgresStore).migrate()

      expect(versions).toEqual(Array.from({ length: 5 }, () => ({ version: POSTGRES_SCHEMA_VERSION })))
      expect(again).toEqual({ version: POSTGRES_SCHEMA_VERSION })
      const table = await admin.query(
        `SELECT c.relpersistence, obj_description(c.oid, 'pg_class') AS comment FROM pg_class c
         JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = 'idemkit_records'`,
        [schema],
      )
      expect(table.rows).toEqual([
        { relpersistence: 'p', comment: `idemkit records, schema ${POSTGRES_SCHEMA_VERSION}` },
      ])
      const columns = await admin.query(
        `SELECT column_name, is_nullable FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'idemkit_records'
         ORDER BY ordinal_position`,
        [schema],
      )
      expect(columns.rows.map((row) => row.column_name)).toEqual([
        'key',
        'state',
        'owner',
        'attempt',
        'rev',
        'op',
        'fp',
        'codec',
        'policy',
        'lease_until',
        'replay_until',
        'expires_at',
        'resp',
        'created_at',
        'updated_at',
      ])
      expect(columns.rows.find((row) => row.column_name === 'expires_at')?.is_nullable).toBe('NO')
      const indexes = await admin.query('SELECT indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY indexname', [
        schema,
      ])
      expect(indexes.rows.map((row) => row.indexdef)).toEqual([
        `CREATE INDEX idemkit_records_expires_at ON ${schema}.idemkit_records USING btree (expires_at)`,
        `CREATE UNIQUE INDEX idemkit_records_leases_pkey ON ${schema}.idemkit_records_leases USING btree (key)`,
        `CREATE UNIQUE INDEX idemkit_records_pkey ON ${schema}.idemkit_records USING btree (key)`,
        `CREATE UNIQUE INDEX idemkit_records_steps_pkey ON ${schema}.idemkit_records_steps USING btree (key, name)`,
      ])
      const store = instances[0] as PostgresStore
      expect((await store.claim(claimRequest(store))).kind).toBe(ClaimReply.ACQUIRED)
      await admin.query(`DROP SCHEMA ${schema} CASCADE`)
    })

    it('from schema 2, replaces the bodies of the same functions once, and the records written before answer the same', async () => {
      // Schema 3 replaced schema 2's bodies; schema 4 then adds functions of its own (the _v3 ones,
      // the test after this one), so the _v2 functions are compared here.
      const schema = `idem_s_${randomBytes(4).toString('hex')}`
      // An install of schema 2: the released files up to 002, as a release of that version applied them.
      const upTo2 = releasedSql(2, schema)
      await admin.query(`CREATE SCHEMA ${schema}`)
      await admin.query(upTo2)
      const functions = async () =>
        (
          await admin.query(
            `SELECT p.proname, p.oid::int AS oid, pg_get_function_identity_arguments(p.oid) AS args, p.prosrc
             FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 ORDER BY p.proname`,
            [schema],
          )
        ).rows as { proname: string; oid: number; args: string; prosrc: string }[]
      const before = await functions()
      const { store } = open({ schema })
      // Written by schema 2's bodies, as an instance of that version calls them: a completed
      // record and a running one.
      const done = claimRequest(store, BEFORE_THE_CLI)
      const doneClaim = await previousClaim(schema, done)
      if (doneClaim.kind !== ClaimReply.ACQUIRED) throw new Error(doneClaim.kind)
      const doneRef = { key: done.key, owner: done.owner, attempt: 1, rev: doneClaim.rev }
      expect(await previousComplete(schema, doneRef, Buffer.from('ok'))).toEqual({ kind: TransitionReply.OK, rev: 2 })
      const running = claimRequest(store, BEFORE_THE_CLI)
      const runningClaim = await previousClaim(schema, running)
      if (runningClaim.kind !== ClaimReply.ACQUIRED) throw new Error(runningClaim.kind)
      const url = inject('postgresUrl')
      const behind = await cli(['migrate', '--check', '--store', url, '--schema', schema])
      expect(behind.code).toBe(5)
      expect(behind.stdout).toContain(`schema 2, behind: this version needs schema ${POSTGRES_SCHEMA_VERSION}`)

      expect(await store.migrate()).toEqual({ version: POSTGRES_SCHEMA_VERSION })
      expect(await store.migrate()).toEqual({ version: POSTGRES_SCHEMA_VERSION })

      const after = (await functions()).filter((row) => !LATER_FUNCTIONS.test(row.proname))
      const named = (rows: typeof before) => rows.map(({ proname, oid, args }) => ({ proname, oid, args }))
      // The same functions (same oid: replaced in place, so a caller's plan stays valid), two helpers more.
      expect(named(after).filter((row) => !/_(holder|hold|transition)_v2$/.test(row.proname))).toEqual(named(before))
      expect(after.map((row) => row.proname).filter((name) => /_(holder|hold|transition)_v2$/.test(name))).toEqual([
        'idemkit_records_hold_v2',
        'idemkit_records_holder_v2',
        'idemkit_records_transition_v2',
      ])
      const body = (rows: typeof before, name: string) => rows.find((row) => row.proname === name)?.prosrc ?? ''
      for (const fn of ['start', 'release']) {
        expect(body(after, `idemkit_records_${fn}_v2`)).toContain('_transition_v2(')
      }
      // Schema 10 made schema 2's completion and mark failed calls of this version's.
      expect(body(after, 'idemkit_records_complete_v2')).toContain('_complete_v3(')
      expect(body(after, 'idemkit_records_mark_failed_v2')).toContain('_mark_failed_v3(')
      expect(body(after, 'idemkit_records_renew_v2')).toContain('_holder_v2(')
      // Schema 7 made schema 2's claim a call of the one claim decision, `_claim_v4`.
      expect(body(after, 'idemkit_records_claim_v2')).toContain('_claim_v4(')
      expect(body(before, 'idemkit_records_claim_v2')).not.toContain('_hold_v2(')
      const comment = await admin.query(
        `SELECT obj_description('${schema}.idemkit_records'::regclass, 'pg_class') AS c`,
      )
      expect(comment.rows[0].c).toBe(`idemkit records, schema ${POSTGRES_SCHEMA_VERSION}`)
      expect((await cli(['migrate', '--check', '--store', url, '--schema', schema])).code).toBe(0)

      // The records schema 2 wrote answer the same under the new bodies.
      const replay = await store.claim({ ...done, owner: token() })
      expect(replay).toMatchObject({ kind: ClaimReply.COMPLETED_REPLAY })
      expect(await store.claim({ ...running, owner: token() })).toMatchObject({ kind: ClaimReply.IN_PROGRESS })
      const runningRef = { key: running.key, owner: running.owner, attempt: 1, rev: runningClaim.rev }
      expect(await store.renew(runningRef, running)).toMatchObject({ kind: TransitionReply.OK })
      expect(await store.complete(runningRef, Buffer.from('late'), running)).toEqual({
        kind: TransitionReply.OK,
        rev: 2,
      })
      expect(await store.complete(runningRef, Buffer.from('late'), running)).toEqual({
        kind: TransitionReply.ALREADY,
        rev: 2,
      })
      await admin.query(`DROP SCHEMA ${schema} CASCADE`)
    }, 60_000)

    it("from schema 3, adds the _v3 claim and completion (and schema 5's _v4 claim) beside the _v2 functions; records of either version answer the same through both", async () => {
      const schema = `idem_t_${randomBytes(4).toString('hex')}`
      // An install of schema 3: the released files up to 003, as a release of that version applied them.
      const upTo3 = releasedSql(3, schema)
      await admin.query(`CREATE SCHEMA ${schema}`)
      await admin.query(upTo3)
      const functions = async () =>
        (
          await admin.query(
            `SELECT p.proname, p.oid::int AS oid, pg_get_function_identity_arguments(p.oid) AS args, p.prosrc
             FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 ORDER BY p.proname`,
            [schema],
          )
        ).rows as { proname: string; oid: number; args: string; prosrc: string }[]
      const before = await functions()
      const { store } = open({ schema })
      // Written under schema 3, as an instance of that version calls its functions: a completed
      // record and a running one.
      const done = claimRequest(store, BEFORE_THE_CLI)
      const doneClaim = await previousClaim(schema, done)
      if (doneClaim.kind !== ClaimReply.ACQUIRED) throw new Error(doneClaim.kind)
      const doneRef = { key: done.key, owner: done.owner, attempt: 1, rev: doneClaim.rev }
      expect(await previousComplete(schema, doneRef, Buffer.from('ok'))).toEqual({ kind: TransitionReply.OK, rev: 2 })
      const running = claimRequest(store, BEFORE_THE_CLI)
      const runningClaim = await previousClaim(schema, running)
      if (runningClaim.kind !== ClaimReply.ACQUIRED) throw new Error(runningClaim.kind)
      const url = inject('postgresUrl')
      const behind = await cli(['migrate', '--check', '--store', url, '--schema', schema])
      expect(behind.code).toBe(5)
      expect(behind.stdout).toContain(`schema 3, behind: this version needs schema ${POSTGRES_SCHEMA_VERSION}`)
      // Before it is applied this version's claim is refused as not migrated, and writes nothing.
      const early = claimRequest(store)
      const refused = await store.claim(early).catch((e) => e)
      expect(refused).toBeInstanceOf(StoreUnavailableError)
      expect(refused.message).toContain('run store.migrate()')

      expect(await store.migrate()).toEqual({ version: POSTGRES_SCHEMA_VERSION })
      expect(await store.migrate()).toEqual({ version: POSTGRES_SCHEMA_VERSION })

      const after = await functions()
      // Schema 3's functions untouched (same oid, same body) but for those schemas 7 and 10 made calls; six
      // functions more.
      expect(
        earlierFunctionsChecked(
          after.filter((row) => !LATER_FUNCTIONS.test(row.proname)),
          true,
        ),
      ).toEqual(earlierFunctionsChecked(before, false))
      expect(after.map((row) => row.proname).filter((name) => LATER_FUNCTIONS.test(name))).toEqual([
        'idemkit_records_claim_v3',
        'idemkit_records_claim_v4',
        'idemkit_records_complete_v3',
        'idemkit_records_mark_failed_v3',
        'idemkit_records_step_v1',
        'idemkit_records_sweep_v3',
      ])
      const comment = await admin.query(
        `SELECT obj_description('${schema}.idemkit_records'::regclass, 'pg_class') AS c`,
      )
      expect(comment.rows[0].c).toBe(`idemkit records, schema ${POSTGRES_SCHEMA_VERSION}`)
      expect((await cli(['migrate', '--check', '--store', url, '--schema', schema])).code).toBe(0)

      // The records schema 3 wrote answer the same through this version's functions.
      expect(await store.claim({ ...done, owner: token() })).toEqual({
        kind: ClaimReply.COMPLETED_REPLAY,
        response: Buffer.from('ok'),
        codec: done.codec,
        policy: done.policy,
        replayUntil: expect.any(Number),
      })
      expect(await store.claim({ ...done, owner: token(), fingerprint: 'other' })).toEqual({
        kind: ClaimReply.FINGERPRINT_MISMATCH,
      })
      expect(await store.claim({ ...running, owner: token() })).toMatchObject({ kind: ClaimReply.IN_PROGRESS })
      expect(await store.claim(running)).toMatchObject({ kind: ClaimReply.REPLAYED_ACQUIRE, attempt: 1, rev: 1 })
      expect(await store.inspect(early.key, early.owner)).toEqual({ kind: 'ABSENT' })
      const runningRef = { key: running.key, owner: running.owner, attempt: 1, rev: runningClaim.rev }
      expect(await store.complete(runningRef, Buffer.from('late'), running)).toEqual({
        kind: TransitionReply.OK,
        rev: 2,
      })
      expect(await store.complete(runningRef, Buffer.from('late'), running)).toEqual({
        kind: TransitionReply.ALREADY,
        rev: 2,
      })

      // An instance of schema 3 still running meanwhile answers the same about a record of this version's.
      const fresh = claimRequest(store)
      const freshClaim = await store.claim(fresh)
      if (freshClaim.kind !== ClaimReply.ACQUIRED) throw new Error(freshClaim.kind)
      expect(await previousClaim(schema, { ...fresh, owner: token() })).toMatchObject({ kind: ClaimReply.IN_PROGRESS })
      const freshRef = { key: fresh.key, owner: fresh.owner, attempt: 1, rev: freshClaim.rev }
      expect(await previousComplete(schema, freshRef, Buffer.from('by 3'))).toEqual({
        kind: TransitionReply.OK,
        rev: 2,
      })
      expect(await store.claim({ ...fresh, owner: token() })).toMatchObject({
        kind: ClaimReply.COMPLETED_REPLAY,
        response: Buffer.from('by 3'),
      })
      expect(await previousComplete(schema, freshRef, Buffer.from('by 3'))).toEqual({
        kind: TransitionReply.ALREADY,
        rev: 2,
      })
      await admin.query(`DROP SCHEMA ${schema} CASCADE`)
    }, 60_000)

    it("from schema 4, adds the _v4 claim beside _claim_v3; a resumed claim takes over an ABANDONED record, schema 4's claim still answers recovery-required", async () => {
      const schema = `idem_r_${randomBytes(4).toString('hex')}`
      const upTo4 = releasedSql(4, schema)
      await admin.query(`CREATE SCHEMA ${schema}`)
      await admin.query(upTo4)
      const functions = async () =>
        (
          await admin.query(
            `SELECT p.proname, p.oid::int AS oid, pg_get_function_identity_arguments(p.oid) AS args, p.prosrc
             FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 ORDER BY p.proname`,
            [schema],
          )
        ).rows as { proname: string; oid: number; args: string; prosrc: string }[]
      const before = await functions()
      const { store } = open({ schema })
      // As an instance of schema 4 calls `_claim_v3` (p_takeover a boolean).
      const schema4Claim = async (request: ClaimRequest, takeover: boolean) =>
        (
          await admin.query(
            `SELECT r FROM ${schema}.idemkit_records_claim_v3($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
            [
              request.key,
              request.owner,
              request.fingerprint,
              request.operation,
              request.codec,
              request.policy,
              request.start,
              takeover,
              request.leaseMs,
              request.failureRetentionMs,
              [],
              2_000,
            ],
          )
        ).rows[0].r as string
      // An execution that threw under schema 4: ABANDONED.
      const thrown = claimRequest(store)
      expect(await schema4Claim(thrown, false)).toMatch(/^ACQUIRED EXECUTING 1 1 /)
      const marked = await admin.query(
        `SELECT kind FROM ${schema}.idemkit_records_mark_failed_v2($1, $2, 1, 1, false, $3, 2000)`,
        [thrown.key, thrown.owner, thrown.failureRetentionMs],
      )
      expect(marked.rows[0].kind).toBe('OK')
      const refused = await store.claim(claimRequest(store)).catch((e) => e)
      expect(refused).toBeInstanceOf(StoreUnavailableError)
      expect(refused.message).toContain('run store.migrate()')

      expect(await store.migrate()).toEqual({ version: POSTGRES_SCHEMA_VERSION })
      const after = await functions()
      const added = [
        'idemkit_records_claim_v4',
        'idemkit_records_mark_failed_v3',
        'idemkit_records_step_v1',
        'idemkit_records_sweep_v3',
      ]
      // The same functions (same oids) and bodies, but for schema 7's `_claim_v3` and `_claim_v2`.
      expect(
        earlierFunctionsChecked(
          after.filter((row) => !added.includes(row.proname)),
          true,
        ),
      ).toEqual(earlierFunctionsChecked(before, false))
      expect(after.map((row) => row.proname).filter((name) => added.includes(name))).toEqual(added)

      // Schema 4's claim, even with takeover, and this version's without resume: recovery-required.
      expect(await schema4Claim({ ...thrown, owner: token() }, true)).toBe('RECOVERY_REQUIRED ABANDONED')
      for (const expiredExecution of ['recover', 'takeover'] as const) {
        expect(await store.claim({ ...thrown, owner: token(), expiredExecution })).toEqual({
          kind: ClaimReply.RECOVERY_REQUIRED,
          reason: 'ABANDONED',
        })
      }
      const resumed = { ...thrown, owner: token(), expiredExecution: 'resume' as const }
      expect(await store.claim(resumed)).toMatchObject({ kind: ClaimReply.TAKEN_OVER, attempt: 2, rev: 3 })
      expect(await store.claim(resumed)).toMatchObject({ kind: ClaimReply.REPLAYED_ACQUIRE, attempt: 2, rev: 3 })
      expect(await schema4Claim({ ...thrown, owner: token() }, false)).toMatch(/^IN_PROGRESS /)
      await admin.query(`DROP SCHEMA ${schema} CASCADE`)
    }, 60_000)

    it("from schema 5, adds _mark_failed_v3 beside _mark_failed_v2: a failed row keeps its cause in resp, which schema 5's functions do not read", async () => {
      const schema = `idem_f_${randomBytes(4).toString('hex')}`
      await admin.query(`CREATE SCHEMA ${schema}`)
      await admin.query(releasedSql(5, schema))
      const functions = async () =>
        (
          await admin.query(
            `SELECT p.proname, p.oid::int AS oid, p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = $1 ORDER BY p.proname`,
            [schema],
          )
        ).rows as { proname: string; prosrc: string }[]
      const before = await functions()
      const { store } = open({ schema })
      expect(await store.migrate()).toEqual({ version: POSTGRES_SCHEMA_VERSION })
      const after = await functions()
      const added = ['idemkit_records_mark_failed_v3', 'idemkit_records_step_v1', 'idemkit_records_sweep_v3']
      // Schema 7 then makes `_claim_v3` and `_claim_v2` calls of `_claim_v4`, schema 9 changes `_claim_v4`'s body, and
      // schema 10 makes `_mark_failed_v2` a call of `_mark_failed_v3`.
      expect(
        earlierFunctionsChecked(
          after.filter((row) => !added.includes(row.proname)),
          true,
        ),
      ).toEqual(earlierFunctionsChecked(before, false))
      expect(after).toHaveLength(before.length + added.length)

      // Failed by this version, with a cause: kept, and read by operators.
      const thrown = claimRequest(store)
      const held = await store.claim(thrown)
      if (held.kind !== ClaimReply.ACQUIRED) throw new Error(held.kind)
      const ref = { key: thrown.key, owner: thrown.owner, attempt: 1, rev: held.rev }
      expect(await store.markFailed(ref, 'unknown', thrown, { class: 'TypeError' })).toEqual({
        kind: TransitionReply.OK,
        rev: 2,
      })
      expect((await store.read(thrown.key)).record).toMatchObject({ state: 'ABANDONED', cause: { class: 'TypeError' } })
      // Schema 5's functions answer as they did: resp is read on a COMPLETED row only.
      const old = await admin.query(
        `SELECT r, resp FROM ${schema}.idemkit_records_claim_v4($1, $2, $3, $4, $5, $6, true, 'recover', 1000, 1000, '{}', 2000)`,
        [thrown.key, token(), thrown.fingerprint, thrown.operation, thrown.codec, thrown.policy],
      )
      expect(old.rows[0]).toEqual({ r: 'RECOVERY_REQUIRED ABANDONED', resp: null })
      const inspected = await admin.query(`SELECT kind FROM ${schema}.idemkit_records_inspect_v2($1, $2)`, [
        thrown.key,
        token(),
      ])
      expect(inspected.rows[0].kind).toBe('ABANDONED')

      // Failed by an instance of schema 5 (`_mark_failed_v2`): no cause, read as none.
      const older = claimRequest(store)
      const olderHeld = await store.claim(older)
      if (olderHeld.kind !== ClaimReply.ACQUIRED) throw new Error(olderHeld.kind)
      await admin.query(`SELECT kind FROM ${schema}.idemkit_records_mark_failed_v2($1, $2, 1, $3, false, $4, 2000)`, [
        older.key,
        older.owner,
        olderHeld.rev,
        older.failureRetentionMs,
      ])
      const olderRecord = (await store.read(older.key)).record
      expect(olderRecord).toMatchObject({ state: 'ABANDONED', response: Buffer.alloc(0) })
      expect(olderRecord?.cause).toBeUndefined()

      // A resumed claim takes the row over: the cause goes with the attempt that failed.
      const resumed = { ...thrown, owner: token(), expiredExecution: 'resume' as const }
      expect(await store.claim(resumed)).toMatchObject({ kind: ClaimReply.TAKEN_OVER, attempt: 2 })
      const row = await admin.query(`SELECT resp FROM ${schema}.idemkit_records WHERE key = $1`, [thrown.key])
      expect(row.rows[0].resp).toBeNull()
      await admin.query(`DROP SCHEMA ${schema} CASCADE`)
    }, 60_000)

    it('applied by hand (migrationSql), serves a role that may only run the functions and use the table', async () => {
      const schema = `idem_h_${randomBytes(4).toString('hex')}`
      const role = `idem_app_${randomBytes(4).toString('hex')}`
      await admin.query(`CREATE SCHEMA ${schema}`)
      await admin.query(migrationSql(schema, 'recs'))
      await admin.query(`CREATE ROLE ${role} LOGIN`)
      await admin.query(`GRANT USAGE ON SCHEMA ${schema} TO ${role}`)
      await admin.query(`GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA ${schema} TO ${role}`)
      await admin.query(
        `GRANT SELECT, INSERT, UPDATE, DELETE ON ${schema}.recs, ${schema}.recs_leases, ${schema}.recs_steps TO ${role}`,
      )
      try {
        const url = new URL(inject('postgresUrl'))
        url.username = role
        const { store } = open({ schema, table: 'recs' }, { connectionString: url.toString() })
        const request = claimRequest(store)
        const claim = await store.claim(request)
        expect(claim.kind).toBe(ClaimReply.ACQUIRED)
        if (claim.kind !== ClaimReply.ACQUIRED) return
        const held = { key: request.key, owner: request.owner, attempt: claim.attempt, rev: claim.rev }
        expect((await store.complete(held, Buffer.from('ok'), request)).kind).toBe(TransitionReply.OK)
        expect((await store.claim({ ...request, owner: token() })).kind).toBe(ClaimReply.COMPLETED_REPLAY)
        expect(await store.sweep()).toBe(0)
        // At its version migrate() only reads the catalog, so the application's role may call it
        // at startup; changing the schema is the migrating role's job.
        await expect(store.migrate()).resolves.toEqual({ version: POSTGRES_SCHEMA_VERSION })
        const { store: elsewhere } = open({ schema, table: 'other' }, { connectionString: url.toString() })
        await expect(elsewhere.migrate()).rejects.toMatchObject({ code: 'ERR_IDEM_STORE_MISCONFIGURED' })
      } finally {
        for (const store of stores.splice(0)) await store.close()
        for (const pool of pools.splice(0)) await pool.end()
        await admin.query(`DROP SCHEMA ${schema} CASCADE`)
        await admin.query(`DROP ROLE ${role}`)
      }
    })
  })

  describe('the sweeper', () => {
    const count = async (keys: readonly string[], table = 'idemkit_records') =>
      Number((await admin.query(`SELECT count(*) FROM ${table} WHERE key = ANY($1)`, [keys])).rows[0].count)

    it('deletes only rows past expires_at, skips a row another session holds, and claim never needed it', async () => {
      // A table of its own: no other test's rows expire into the counts.
      const schema = `idem_w_${randomBytes(4).toString('hex')}`
      const { store } = open({ sweepBatch: 2, schema })
      await store.migrate()
      const short = { leaseMs: 1, failureRetentionMs: 1 }
      const expired = Array.from({ length: 5 }, () => claimRequest(store, short))
      for (const request of expired) await store.claim(request)
      const live = claimRequest(store)
      await store.claim(live)
      await sleep(20)
      // An expired row reads as absent before any sweep.
      expect(await store.inspect(expired[0]?.key as string, token())).toEqual({ kind: 'ABSENT' })
      await admin.query('BEGIN')
      await admin.query(`SELECT 1 FROM ${store.table} WHERE key = $1 FOR UPDATE`, [expired[4]?.key])

      const deleted = await store.sweep()
      await admin.query('ROLLBACK')

      expect(deleted).toBe(4)
      expect(
        await count(
          expired.map((request) => request.key),
          store.table,
        ),
      ).toBe(1)
      expect(await count([live.key], store.table)).toBe(1)
      expect(await store.sweep()).toBe(1)
      expect(
        await count(
          expired.map((request) => request.key),
          store.table,
        ),
      ).toBe(0)
      await admin.query(`DROP SCHEMA ${schema} CASCADE`)
    })

    it('reads the expiry index only as far as the rows that expired, not the live rows after them', async () => {
      const schema = `idem_w_${randomBytes(4).toString('hex')}`
      const { store } = open({ schema })
      await store.migrate()
      const expired = Array.from({ length: 5 }, () => claimRequest(store, { leaseMs: 1, failureRetentionMs: 1 }))
      for (const request of expired) await store.claim(request)
      const live = claimRequest(store)
      await store.claim(live)
      // 20,000 more live rows, copies of the live one: a round that reads past the expired rows
      // into them reads the whole index.
      await admin.query(
        `INSERT INTO ${store.table} SELECT 'copy-' || g, state, owner, attempt, rev, op, fp, codec, policy,
           lease_until, replay_until, expires_at, resp, created_at, updated_at
         FROM ${store.table}, generate_series(1, 20000) g WHERE key = $1`,
        [live.key],
      )
      await admin.query(`ANALYZE ${store.table}`)
      await sleep(20)
      /** Index entries read from the expiry index so far, as this session's flushed statistics say. */
      const indexRead = async () => {
        await admin.query('SELECT pg_stat_force_next_flush()')
        await admin.query('SELECT pg_stat_clear_snapshot()')
        const { rows } = await admin.query(
          `SELECT idx_tup_read FROM pg_stat_user_indexes WHERE schemaname = $1 AND indexrelname = 'idemkit_records_expires_at'`,
          [schema],
        )
        return Number(rows[0]?.idx_tup_read)
      }
      const before = await indexRead()

      // The sweep function itself, on this session, so its statistics are this session's.
      const { rows } = await admin.query(`SELECT ${store.table}_sweep_v3(1000, 4242) AS n`)
      const read = (await indexRead()) - before

      expect(rows[0]?.n).toBe(5)
      expect(await count([live.key, 'copy-1', 'copy-20000'], store.table)).toBe(3)
      // The 5 expired rows (and the index's boundary), not the 20,001 live ones.
      expect(read).toBeGreaterThanOrEqual(5)
      expect(read).toBeLessThan(100)
      await admin.query(`DROP SCHEMA ${schema} CASCADE`)
    })

    it('ends the server session of a sweep that got no reply in time, so it does not run on', async () => {
      const schema = `idem_w_${randomBytes(4).toString('hex')}`
      const { store } = open({ schema, lockTimeoutMs: 300, statementTimeoutMs: 1_000 })
      await store.migrate()
      // pg_stat_activity as it is now: this session's open transaction would otherwise keep its first read.
      const sweeping = async () => {
        await admin.query('SELECT pg_stat_clear_snapshot()')
        const { rows } = await admin.query(
          `SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%' || $1 || '%_sweep_v3%' AND pid <> pg_backend_pid()`,
          [schema],
        )
        return Number(rows[0].count)
      }
      // The table held by this session: the sweep's delete waits for it (no lock_timeout of its own).
      await admin.query('BEGIN')
      await admin.query(`LOCK TABLE ${store.table} IN ACCESS EXCLUSIVE MODE`)
      try {
        const error = await store.sweep().catch((e: unknown) => e)
        expect(error).toBeInstanceOf(StoreIndeterminateError)
        // Its session is ended in the background: gone while the table is still held.
        for (let i = 0; i < 50 && (await sweeping()) > 0; i++) await sleep(100)
        expect(await sweeping()).toBe(0)
      } finally {
        await admin.query('ROLLBACK')
      }
      await admin.query(`DROP SCHEMA ${schema} CASCADE`)
    })

    it('lets one instance sweep at a time', async () => {
      const { store } = open()
      await admin.query('BEGIN')
      await admin.query('SELECT pg_advisory_xact_lock($1)', [lockKey('sweep', 'public', 'idemkit_records')])

      expect(await store.sweep()).toBe(-1)
      await admin.query('ROLLBACK')
      expect(await store.sweep()).toBeGreaterThanOrEqual(0)
    })

    it('sweeps every sweepIntervalMs and reports it', async () => {
      const events: PostgresStoreEvent[] = []
      const { store } = open({ sweepIntervalMs: 50, onEvent: (event) => events.push(event) })
      const request = claimRequest(store, { leaseMs: 1, failureRetentionMs: 1 })
      const claimed: ClaimResult = await store.claim(request)
      expect(claimed.kind).toBe(ClaimReply.ACQUIRED)

      for (let i = 0; i < 50 && (await count([request.key])) > 0; i++) await sleep(20)

      expect(await count([request.key])).toBe(0)
      expect(events.some((event) => event.type === 'swept' && event.deleted >= 1)).toBe(true)
    })

    it('warns the process by default when a sweep fails', async () => {
      const warnings: Error[] = []
      const listen = (warning: Error) => warnings.push(warning)
      process.on('warning', listen)
      try {
        open({ table: 'idemkit_never_migrated', sweepIntervalMs: 20 })
        for (let i = 0; i < 50 && warnings.length === 0; i++) await sleep(20)
      } finally {
        process.off('warning', listen)
      }

      expect(warnings[0]).toMatchObject({ name: 'IdempotencyWarning', code: 'IDEMKIT_POSTGRES_SWEEP_FAILED' })
    })

    it('reports a failing sweep once, until one succeeds', async () => {
      const events: PostgresStoreEvent[] = []
      const { store } = open({ table: 'idemkit_never_migrated', sweepIntervalMs: 20, onEvent: (e) => events.push(e) })
      await sleep(200)
      await store.close()

      expect(events.filter((event) => event.type === 'sweep-failed')).toHaveLength(1)
      expect(events[0]?.message).toContain('migrate()')
    })
  })

  it('keeps a response of any bytes, up to megabytes, exactly', async () => {
    const { store } = open()
    const base = claimRequest(store)
    const first = await store.claim(base)
    if (first.kind !== ClaimReply.ACQUIRED) throw new Error(first.kind)
    const response = randomBytes(2 * 1024 * 1024)

    expect(await store.complete({ ...base, attempt: 1, rev: first.rev }, response, base)).toEqual({
      kind: TransitionReply.OK,
      rev: first.rev + 1,
    })
    const replay = await store.claim({ ...base, owner: token() })

    expect(replay.kind).toBe(ClaimReply.COMPLETED_REPLAY)
    expect(replay.kind === ClaimReply.COMPLETED_REPLAY && replay.response.equals(response)).toBe(true)
  })
})
