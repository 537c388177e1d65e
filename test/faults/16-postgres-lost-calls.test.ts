/**
 * Fault 16: a PostgreSQL store call lost on its way, on the suite's own cluster.
 * - The store's connection killed with `pg_terminate_backend` while its claim or complete waits
 *   for a row lock the test holds (sent, not applied: a FATAL 57P01 reply, indeterminate).
 * - The claim's or complete's reply lost after PostgreSQL committed it (a TCP proxy drops what
 *   the server sends, then resets the connection).
 * Either way the executor reconciles by inspecting the record: one execution, a fresh 201, and
 * the retry replays it byte for byte.
 * - 16c: the backend of a claim's connection paused (SIGSTOP) before it runs the claim: no
 *   reply within statementTimeoutMs; the store ends that session on the server, answers no call
 *   of the record until it is gone (an inspect on another connection would read a record the
 *   claim may still change), and once continued the session dies before the claim lands.
 * - 16d: a takeover claim paused while it runs, waiting for the row lock another session holds,
 *   which is then released to it: the same, for a statement the server is already running; once
 *   the session is gone the store answers again, and what it answers is what the row holds.
 */
import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import type { AppProcess } from '../helpers/app-process.js'
import { createExecutionLog, type ExecutionLog } from '../helpers/execution-log.js'
import { type Answer, post, recordKey, startFaultApp, until } from '../helpers/fault-app.js'
import { recordFigures } from '../helpers/figures.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'

const TABLE = 'public.idemkit_records'

describe('fault 16: PostgreSQL calls lost after they were sent', () => {
  let direct: AppProcess
  let proxied: AppProcess
  let proxy: TcpProxy
  /** Holds the row locks; `watch` reads pg_stat_activity (frozen inside a transaction). */
  let admin: pg.Client
  let watch: pg.Client
  let log: ExecutionLog

  beforeAll(async () => {
    const url = new URL(inject('postgresUrl'))
    proxy = await startTcpProxy(Number(url.port))
    log = createExecutionLog()
    admin = new pg.Client({ connectionString: url.href })
    watch = new pg.Client({ connectionString: url.href })
    await Promise.all([admin.connect(), watch.connect()])
    ;[direct, proxied] = await Promise.all([
      startFaultApp({ DATABASE_URL: url.href, EXECUTION_LOG: log.path }),
      startFaultApp({ DATABASE_URL: `postgres://postgres@127.0.0.1:${proxy.port}/postgres`, EXECUTION_LOG: log.path }),
    ])
  })

  afterAll(async () => {
    await Promise.all([direct?.stop(), proxied?.stop()])
    await Promise.all([admin?.end(), watch?.end()])
    await proxy?.close()
    log.remove()
  })

  /** The backend of the store call `fn` waiting for a lock, found in pg_stat_activity. */
  function waitingBackend(fn: string): Promise<number> {
    return until(`a ${fn} call waiting for a lock`, async () => {
      const { rows } = await watch.query<{ pid: number }>(
        `SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1 AND pid <> pg_backend_pid()`,
        [`%idemkit_records_${fn}_v_(%`],
      )
      return rows[0]?.pid
    })
  }

  async function rowState(user: string, key: string): Promise<string | undefined> {
    const { rows } = await watch.query<{ state: string }>(`SELECT state FROM ${TABLE} WHERE key = $1`, [
      recordKey(user, key),
    ])
    return rows[0]?.state
  }

  const executions = (user: string, key: string) => log.executions((e) => e.user === user && e.key === key).length
  const show = (a: Answer) => `${a.status}${a.replayed ? ' replay' : ''}${a.code ? ` ${a.code}` : ''}`

  it('reconciles a claim and a complete whose connection was terminated while they waited', async (context) => {
    const user = `fault16a-${randomUUID().slice(0, 8)}`
    const body = { item: 'book', qty: 1, delayMs: 300 }

    // Claim: the test holds the key's row (inserted, not committed), the claim's insert waits on it.
    const claimKey = randomUUID()
    await admin.query('BEGIN')
    await admin.query(
      `INSERT INTO ${TABLE} (key, state, owner, attempt, rev, op, fp, codec, policy, lease_until, expires_at, created_at, updated_at)
       VALUES ($1, 'CLAIMED', repeat('0', 64), 1, 1, 'x', 'x', 'x', 'x', now(), now() + interval '1 hour', now(), now())`,
      [recordKey(user, claimKey)],
    )
    const claimed = post(direct.url, { user, key: claimKey, body })
    const claimBackend = await waitingBackend('claim')
    await watch.query('SELECT pg_terminate_backend($1)', [claimBackend])
    await admin.query('ROLLBACK')
    const claimAnswer = await claimed
    const claimRetry = await post(direct.url, { user, key: claimKey, body })

    // Complete: the test locks the EXECUTING row while the handler runs; complete waits on it.
    const completeKey = randomUUID()
    const completed = post(direct.url, { user, key: completeKey, body })
    await until('the handler to run', () => (executions(user, completeKey) === 1 ? true : undefined))
    await admin.query('BEGIN')
    await admin.query(`SELECT 1 FROM ${TABLE} WHERE key = $1 FOR UPDATE`, [recordKey(user, completeKey)])
    const completeBackend = await waitingBackend('complete')
    await watch.query('SELECT pg_terminate_backend($1)', [completeBackend])
    await admin.query('ROLLBACK')
    const completeAnswer = await completed
    const completeRetry = await post(direct.url, { user, key: completeKey, body })

    recordFigures(context, '16a', 'PostgreSQL connection terminated while a claim / a complete waited', {
      'claim: answer, retry': `${show(claimAnswer)}, ${show(claimRetry)}`,
      'claim: executions': executions(user, claimKey),
      'complete: answer, retry': `${show(completeAnswer)}, ${show(completeRetry)}`,
      'complete: executions': executions(user, completeKey),
    })
    for (const [answer, retry, key] of [
      [claimAnswer, claimRetry, claimKey],
      [completeAnswer, completeRetry, completeKey],
    ] as const) {
      expect(answer).toMatchObject({ status: 201, replayed: false })
      expect(retry).toMatchObject({ status: 201, replayed: true, body: answer.body })
      expect(executions(user, key)).toBe(1)
    }
  })

  it('reconciles a claim and a complete whose reply was lost after PostgreSQL committed them', async (context) => {
    const user = `fault16b-${randomUUID().slice(0, 8)}`
    const body = { item: 'book', qty: 1, delayMs: 300 }

    // Claim: every reply dropped from the start; the claim commits, its reply never arrives.
    const claimKey = randomUUID()
    const droppedBefore = proxy.stats.dropped
    proxy.setMode('drop-replies')
    const claimed = post(proxied.url, { user, key: claimKey, body })
    await proxy.waitFor((stats) => stats.dropped > droppedBefore)
    const committedClaim = await until('the claim to commit', () => rowState(user, claimKey))
    proxy.setMode('pass')
    const claimAnswer = await claimed
    const claimRetry = await post(proxied.url, { user, key: claimKey, body })

    // Complete: replies dropped once the handler runs; the complete commits, its reply is lost.
    const completeKey = randomUUID()
    const completed = post(proxied.url, { user, key: completeKey, body })
    await until('the handler to run', () => (executions(user, completeKey) === 1 ? true : undefined))
    const dropped = proxy.stats.dropped
    proxy.setMode('drop-replies')
    await proxy.waitFor((stats) => stats.dropped > dropped)
    const committedComplete = await until('the complete to commit', async () =>
      (await rowState(user, completeKey)) === 'COMPLETED' ? 'COMPLETED' : undefined,
    )
    proxy.setMode('pass')
    const completeAnswer = await completed
    const completeRetry = await post(proxied.url, { user, key: completeKey, body })

    recordFigures(context, '16b', 'PostgreSQL reply lost after a claim / a complete committed', {
      'claim: row when the reply was lost': committedClaim,
      'claim: answer, retry': `${show(claimAnswer)}, ${show(claimRetry)}`,
      'claim: executions': executions(user, claimKey),
      'complete: row when the reply was lost': committedComplete,
      'complete: answer, retry': `${show(completeAnswer)}, ${show(completeRetry)}`,
      'complete: executions': executions(user, completeKey),
    })
    expect(committedClaim).toBe('EXECUTING')
    for (const [answer, retry, key] of [
      [claimAnswer, claimRetry, claimKey],
      [completeAnswer, completeRetry, completeKey],
    ] as const) {
      expect(answer).toMatchObject({ status: 201, replayed: false })
      expect(retry).toMatchObject({ status: 201, replayed: true, body: answer.body })
      expect(executions(user, key)).toBe(1)
    }
  })
})

describe('fault 16c: a claim whose server session stalls past statementTimeoutMs', () => {
  // The backend of the store's connection paused (SIGSTOP) before the claim reaches it: the
  // claim gets no reply, and closing the connection does not stop the backend from running it
  // once it is continued. Inspecting on another connection of the pool meanwhile would find no
  // record: not the answer, as the claim could still land, as EXECUTING under an owner whose
  // handler never ran.
  it('ends the stalled session, answers nothing about the record until it is gone, and the claim never lands', async (context) => {
    const { postgresStore } = await import('../../src/stores/postgres/index.js')
    const { StoreIndeterminateError, StoreUnavailableError } = await import('../../src/core/errors.js')
    const { claimRequest } = await import('../helpers/stores.js')
    const url = inject('postgresUrl')
    const pool = new pg.Pool({ connectionString: url, max: 1 })
    pool.on('error', () => undefined)
    const store = postgresStore({
      pool,
      keyPrefix: 'test',
      sweepIntervalMs: 0,
      lockTimeoutMs: 300,
      statementTimeoutMs: 800,
      acquireTimeoutMs: 2_000,
    })
    const watch = new pg.Client({ connectionString: url })
    await watch.connect()
    // The store's first claim reads the table's schema version before its first fast statement:
    // done here, so the claim below is the call that stalls.
    await store.claim(claimRequest(store))
    // The pool's one connection, open: the claim takes it.
    const first = await pool.connect()
    const pids = [(first as unknown as { processID: number }).processID]
    first.release()
    const request = claimRequest(store)
    let paused: number[] = []
    try {
      paused = pids
      for (const pid of paused) process.kill(pid, 'SIGSTOP')
      const claimed = await store.claim(request).catch((error: unknown) => error)
      // While the session is still there (paused: it cannot end), the record is not answered for.
      const inspected = await store.inspect(request.key, request.owner).catch((error: unknown) => error)
      for (const pid of paused) process.kill(pid, 'SIGCONT')
      paused = []
      await until('the stalled sessions gone', async () => {
        const { rows } = await watch.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = ANY($1)', [
          pids,
        ])
        return rows[0].n === 0 ? true : undefined
      })
      const row = await watch.query(`SELECT state, owner FROM ${TABLE} WHERE key = $1`, [request.key])
      const after = await store.inspect(request.key, request.owner)
      const fresh = await store.claim({ ...request, owner: randomUUID().replaceAll('-', '').repeat(2) })

      recordFigures(context, '16c', 'a claim whose server session stalls', {
        claim: (claimed as Error).name,
        'inspect while the session is there': (inspected as Error).name ?? String(inspected),
        'row after the resume': row.rows.length === 0 ? 'none' : row.rows[0].state,
        'a new claim of the key': fresh.kind,
      })
      expect(claimed).toBeInstanceOf(StoreIndeterminateError)
      expect(inspected).toBeInstanceOf(StoreUnavailableError)
      expect(row.rows).toEqual([])
      expect(after).toEqual({ kind: 'ABSENT' })
      expect(fresh.kind).toBe('ACQUIRED')
    } finally {
      for (const pid of paused) process.kill(pid, 'SIGCONT')
      await store.close()
      await pool.end()
      await watch.end()
    }
  }, 60_000)

  // The claim is running: it waits for the row lock of a takeover, its backend is paused, and
  // the lock is then released to it. Until that session is gone the claim may still take the
  // record over, so inspecting it on another connection is no answer.
  it('16d: a takeover claim paused while it waits for a row lock: no answer about the record until its session is gone, then the row’s', async (context) => {
    const { postgresStore } = await import('../../src/stores/postgres/index.js')
    const { StoreIndeterminateError, StoreUnavailableError } = await import('../../src/core/errors.js')
    const { claimRequest } = await import('../helpers/stores.js')
    const url = inject('postgresUrl')
    const pool = new pg.Pool({ connectionString: url, max: 2 })
    pool.on('error', () => undefined)
    const store = postgresStore({
      pool,
      keyPrefix: 'test',
      sweepIntervalMs: 0,
      lockTimeoutMs: 2_000,
      statementTimeoutMs: 3_000,
      acquireTimeoutMs: 2_000,
    })
    const locker = new pg.Client({ connectionString: url })
    const watch = new pg.Client({ connectionString: url })
    await Promise.all([locker.connect(), watch.connect()])
    // A claim whose lease has run out: the next claim takes it over, under the row's lock.
    const base = claimRequest(store, { start: false, leaseMs: 20 })
    await store.claim(base)
    await new Promise((resolve) => setTimeout(resolve, 60))
    const takeover = { ...base, owner: randomUUID().replaceAll('-', '').repeat(2) }
    let paused: number | undefined
    try {
      await locker.query('BEGIN')
      await locker.query(`SELECT 1 FROM ${TABLE} WHERE key = $1 FOR UPDATE`, [base.key])
      const claiming = store.claim(takeover).catch((error: unknown) => error)
      const pid = await until('the takeover claim waiting for the row lock', async () => {
        const { rows } = await watch.query<{ pid: number }>(
          `SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%idemkit_records_claim_v_(%'`,
        )
        return rows[0]?.pid
      })
      process.kill(pid, 'SIGSTOP')
      paused = pid
      // The lock goes to the paused claim, which cannot use it yet.
      await locker.query('COMMIT')
      const claimed = await claiming
      const inspected = await store.inspect(base.key, takeover.owner).catch((error: unknown) => error)
      process.kill(pid, 'SIGCONT')
      paused = undefined
      await until('the paused session gone', async () => {
        const { rows } = await watch.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = $1', [pid])
        return rows[0].n === 0 ? true : undefined
      })
      const { rows } = await watch.query<{ owner: string; state: string }>(
        `SELECT owner, state FROM ${TABLE} WHERE key = $1`,
        [base.key],
      )
      const landed = rows[0]?.owner === takeover.owner
      const after = await store.inspect(base.key, takeover.owner)
      const next = await store.claim({ ...base, owner: randomUUID().replaceAll('-', '').repeat(2) })

      recordFigures(context, '16d', 'a takeover claim paused while it waits for a row lock', {
        claim: (claimed as Error).name,
        'inspect while the session is there': (inspected as Error).name ?? String(inspected),
        'the paused claim after the resume': landed ? 'landed' : 'never landed',
        'inspect once it is gone': after.kind,
        'a new claim of the key': next.kind,
      })
      expect(claimed).toBeInstanceOf(StoreIndeterminateError)
      expect(inspected).toBeInstanceOf(StoreUnavailableError)
      // Once the session is gone the store answers from the row as it is: held by the paused
      // claim if it landed (a new claim is in progress), else still the expired claim's, which
      // the next claim takes over.
      expect(rows).toHaveLength(1)
      if (landed) {
        expect(after).toMatchObject({ kind: 'CLAIMED', mine: true, attempt: 2 })
        expect(next.kind).toBe('IN_PROGRESS')
      } else {
        expect(rows[0]?.owner).toBe(base.owner)
        expect(after).toMatchObject({ kind: 'CLAIMED', mine: false, attempt: 1, leaseRemainingMs: 0 })
        expect(next.kind).toBe('TAKEN_OVER')
      }
    } finally {
      if (paused !== undefined) process.kill(paused, 'SIGCONT')
      await locker.query('ROLLBACK').catch(() => undefined)
      await store.close()
      await pool.end()
      await Promise.all([locker.end(), watch.end()])
    }
  }, 60_000)
})
