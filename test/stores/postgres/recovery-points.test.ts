/**
 * Recovery points (`step(name, run)` of a `transaction: true` run on the PostgreSQL store,
 * sql/008-recovery-points.sql): each step commits with its point in a transaction of its own; a
 * re-run of the record skips the steps that committed and gets their results back; a stale
 * owner's step is refused and rolls back; misuse is refused before anything commits. A
 * business table of the test's own stands for the application's.
 */
import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, inject, it } from 'vitest'
import { jsonCodec } from '../../../src/core/codec.js'
import { ErrorCode } from '../../../src/core/errors.js'
import { type ActionContext, execute } from '../../../src/core/executor.js'
import { resolvePolicy } from '../../../src/core/policy.js'
import { ExpiredExecution, TransitionReply } from '../../../src/core/record.js'
import { keepsSteps } from '../../../src/core/store-transaction.js'
import { memoryStore } from '../../../src/stores/memory/index.js'
import { type PostgresStore, postgresStore } from '../../../src/stores/postgres/index.js'
import { sleep } from '../../helpers/sleep.js'
import { testPostgresPool, transactionalDeposit } from '../../helpers/stores.js'

const TABLE = 'idemkit_test_step_effects'

describe('recovery points on the PostgreSQL store', () => {
  let pool: pg.Pool
  let store: PostgresStore
  let admin: pg.Client

  beforeAll(async () => {
    admin = new pg.Client({ connectionString: inject('postgresUrl') })
    await admin.connect()
    await admin.query(
      `CREATE TABLE IF NOT EXISTS ${TABLE} (id bigserial PRIMARY KEY, scope text NOT NULL, step text NOT NULL, token int NOT NULL)`,
    )
  })

  afterAll(async () => {
    await admin.query(`DROP TABLE IF EXISTS ${TABLE}`)
    await admin.end()
  })

  beforeEach(() => {
    pool = testPostgresPool()
    store = postgresStore({ pool, keyPrefix: 'test', sweepIntervalMs: 0 })
  })

  afterEach(async () => {
    await store.close()
    await pool.end()
  })

  const newKey = () => `test:idem:1:d1:op:${randomBytes(32).toString('hex')}`
  const effects = async (key: string) => {
    const { rows } = await admin.query<{ step: string; n: number }>(
      `SELECT step, count(*)::int AS n FROM ${TABLE} WHERE scope = $1 GROUP BY step ORDER BY step`,
      [key],
    )
    return Object.fromEntries(rows.map((row) => [row.step, row.n]))
  }
  const points = async (key: string) =>
    (await admin.query('SELECT name, attempt, result FROM idemkit_records_steps WHERE key = $1 ORDER BY name', [key]))
      .rows

  /** A step that writes one effect row and answers its id and the token that wrote it. */
  const effect = (context: ActionContext, key: string, name: string) =>
    context.step(name, async (db) => {
      const { rows } = await db.query<{ id: string }>(
        `INSERT INTO ${TABLE} (scope, step, token) VALUES ($1, $2, $3) RETURNING id`,
        [key, name, context.fencingToken],
      )
      return { id: Number(rows[0]?.id), token: context.fencingToken, at: new Date(0) }
    })

  it('a re-run skips the steps that committed, gets their results back, and commits the rest once', async () => {
    const key = newKey()
    const ran: string[] = []
    let failAfterReserve = true
    const action = async (context: ActionContext) => {
      const reserve = await effect(context, key, 'reserve')
      ran.push(`reserve ${context.fencingToken}`)
      if (failAfterReserve) {
        failAfterReserve = false
        throw Object.assign(new Error('the payment service is down'), { retryable: true })
      }
      const charge = await effect(context, key, 'charge')
      await context.db?.query(`INSERT INTO ${TABLE} (scope, step, token) VALUES ($1, 'final', $2)`, [
        key,
        context.fencingToken,
      ])
      return { reserve, charge }
    }
    const first = await transactionalDeposit(store, key, 2_000, action)
    expect(first.kind).toBe('FAILED')
    expect(await effects(key)).toEqual({ reserve: 1 })

    const second = await transactionalDeposit(store, key, 2_000, action)
    expect(second.kind).toBe('EXECUTED')
    // The result of the step that committed on attempt 1, through JSON (the Date as its string).
    const value = (second as { value: { reserve: { token: number; at: unknown }; charge: { token: number } } }).value
    expect(value.reserve).toMatchObject({ token: 1, at: new Date(0).toISOString() })
    expect(value.charge.token).toBe(2)
    expect(ran).toEqual(['reserve 1', 'reserve 2'])
    expect(await effects(key)).toEqual({ charge: 1, final: 1, reserve: 1 })
    expect((await points(key)).map((point) => [point.name, Number(point.attempt)])).toEqual([
      ['charge', 2],
      ['reserve', 1],
    ])
    const replay = await transactionalDeposit(store, key, 2_000, action)
    expect(replay).toEqual({ kind: 'REPLAYED', value })
  })

  it('a step that throws keeps nothing of its writes, and the run goes on in a new transaction', async () => {
    const key = newKey()
    const outcome = await transactionalDeposit(store, key, 2_000, async (context) => {
      await expect(
        context.step('fails', async (db) => {
          await db.query(`INSERT INTO ${TABLE} (scope, step, token) VALUES ($1, 'fails', 1)`, [key])
          throw new Error('no stock')
        }),
      ).rejects.toThrow('no stock')
      return effect(context, key, 'after')
    })
    expect(outcome.kind).toBe('EXECUTED')
    expect(await effects(key)).toEqual({ after: 1 })
  })

  it('refuses misuse before anything of the step commits', async () => {
    const key = newKey()
    const codes: unknown[] = []
    const outcome = await transactionalDeposit(store, key, 2_000, async (context) => {
      const code = (promise: Promise<unknown>) =>
        promise.then(
          () => codes.push('resolved'),
          (error: { code?: unknown }) => codes.push(error.code),
        )
      await effect(context, key, 'once')
      await code(effect(context, key, 'once'))
      await code(context.step('big', async () => 10n))
      const both = await Promise.allSettled([effect(context, key, 'a'), effect(context, key, 'b')])
      for (const settled of both) if (settled.status === 'rejected') codes.push(settled.reason.code)
      await context.db?.query(`INSERT INTO ${TABLE} (scope, step, token) VALUES ($1, 'outside', 1)`, [key])
      await code(effect(context, key, 'c'))
      return 'done'
    })
    expect(codes).toEqual([
      ErrorCode.STEP_MISUSED,
      ErrorCode.STEP_MISUSED,
      ErrorCode.STEP_MISUSED,
      ErrorCode.STEP_MISUSED,
    ])
    expect(outcome.kind).toBe('EXECUTED')
    // 'big' and 'c' kept nothing; 'a' committed, 'b' was refused while 'a' ran; 'outside' was
    // written after the last step that committed, so it commits with the answer.
    expect(await effects(key)).toEqual({ a: 1, once: 1, outside: 1 })
  })

  it('a stale owner cannot commit a step: refused, rolled back', async () => {
    const key = newKey()
    const times = { leaseMs: 300, replayWindowMs: 60_000, failureRetentionMs: 60_000 }
    const claim = (owner: string, expiredExecution: ExpiredExecution) =>
      store.claim({
        key,
        owner,
        fingerprint: 'fp',
        operation: 'op',
        codec: 'json@1',
        policy: 'p',
        start: true,
        expiredExecution,
        ...times,
      })
    // The session outlives the pause (the server would end it idle after a lease by default,
    // which rolls the step back too): the fence itself refuses the step.
    await store.close()
    store = postgresStore({ pool, keyPrefix: 'test', sweepIntervalMs: 0, transactionIdleTimeoutMs: 60_000 })
    const first = await claim('a'.repeat(64), ExpiredExecution.RECOVER)
    if (first.kind !== 'ACQUIRED') throw new Error(first.kind)
    const ref = { key, owner: 'a'.repeat(64), attempt: first.attempt, rev: first.rev }
    const transaction = await store.beginTransaction(ref, times)
    if (!keepsSteps(transaction)) throw new Error('no steps')
    expect(await transaction.openStep(ref, 'reserve')).toEqual({ committed: false })
    await transaction.db.query(`INSERT INTO ${TABLE} (scope, step, token) VALUES ($1, 'stale', 1)`, [key])
    await sleep(450)
    const second = await claim('b'.repeat(64), ExpiredExecution.RESUME)
    expect(second).toMatchObject({ kind: 'TAKEN_OVER', attempt: 2 })

    expect(await transaction.commitStep(ref, 'reserve', '{"stale":true}')).toEqual({ kind: TransitionReply.NOT_OWNER })
    // Rolled back, and the run's next transaction began: it can still be ended.
    await transaction.rollback()
    expect(await effects(key)).toEqual({})
    expect(await points(key)).toEqual([])
  })

  it('keeps the isolation level the handler chose for the transactions after each step', async () => {
    const key = newKey()
    const outcome = await transactionalDeposit(store, key, 2_000, async (context) => {
      await context.db?.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ')
      await effect(context, key, 'one')
      const { rows } = (await context.db?.query<{ transaction_isolation: string }>('SHOW transaction_isolation')) ?? {
        rows: [],
      }
      return rows[0]?.transaction_isolation
    })
    expect(outcome).toMatchObject({ kind: 'EXECUTED', value: 'repeatable read' })
  })

  it('a record created afresh after it expired runs its steps again; the sweeper deletes points with the record', async () => {
    const key = newKey()
    const run = () => transactionalDeposit(store, key, 2_000, async (context) => effect(context, key, 'reserve'))
    expect((await run()).kind).toBe('EXECUTED')
    await admin.query(
      "UPDATE idemkit_records SET replay_until = now() - interval '1 second', expires_at = now() - interval '1 second' WHERE key = $1",
      [key],
    )
    expect((await run()).kind).toBe('EXECUTED')
    expect(await effects(key)).toEqual({ reserve: 2 })
    expect((await points(key)).map((point) => Number(point.attempt))).toEqual([1])

    await admin.query(
      "UPDATE idemkit_records SET replay_until = now() - interval '1 second', expires_at = now() - interval '1 second' WHERE key = $1",
      [key],
    )
    await store.sweep()
    expect(await points(key)).toEqual([])
  })

  it("deletes the points with the record from an earlier version's sweeper too (`_sweep_v2`, schemas 2 to 7)", async () => {
    const key = newKey()
    const run = () => transactionalDeposit(store, key, 2_000, async (context) => effect(context, key, 'reserve'))
    expect((await run()).kind).toBe('EXECUTED')
    expect(await points(key)).toHaveLength(1)
    await admin.query(
      "UPDATE idemkit_records SET replay_until = now() - interval '1 second', expires_at = now() - interval '1 second' WHERE key = $1",
      [key],
    )
    // As an instance of schema 7 sweeps: its own lock number, a batch of 1,000.
    const { rows } = await admin.query<{ n: number }>('SELECT idemkit_records_sweep_v2(1000, $1) AS n', [
      Number.parseInt(randomBytes(4).toString('hex'), 16),
    ])
    expect(rows[0]?.n).toBeGreaterThanOrEqual(1)
    expect((await admin.query('SELECT 1 FROM idemkit_records WHERE key = $1', [key])).rows).toEqual([])
    expect(await points(key)).toEqual([])
  })

  it.each([
    ['the memory store', () => memoryStore({ keyPrefix: 'test' })],
    ['the PostgreSQL store without transaction: true', () => store],
  ])('step on %s rejects, naming the fix', async (_name, storeOf) => {
    const chosen = storeOf()
    const seen = await execute({
      store: chosen,
      key: newKey(),
      fingerprint: 'f',
      operation: 'op',
      codec: jsonCodec(),
      policy: resolvePolicy({}),
      action: (context) =>
        context
          .step('x', async () => 1)
          .catch((error: { code?: string; message?: string }) => [error.code, error.message]),
    })
    expect(seen).toMatchObject({
      kind: 'EXECUTED',
      value: [ErrorCode.INVALID_OPTION, expect.stringMatching(/transaction: true .* PostgreSQL store/)],
    })
  })
})
