/**
 * `transaction: true` on the PostgreSQL store, through the executor: the action's writes
 * through `db` and the record's completion commit together or not at all. A business table
 * of the test's own stands for the application's; the suite's cluster holds both.
 */
import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, inject, it } from 'vitest'
import { jsonCodec } from '../../../src/core/codec.js'
import { ErrorCode, type IdempotencyError } from '../../../src/core/errors.js'
import { type ActionContext, execute } from '../../../src/core/executor.js'
import { resolvePolicy } from '../../../src/core/policy.js'
import { InspectReply } from '../../../src/core/record.js'
import { memoryStore } from '../../../src/stores/memory/index.js'
import { type PostgresStore, postgresStore } from '../../../src/stores/postgres/index.js'
import { testPostgresPool, transactionalDeposit } from '../../helpers/stores.js'
import { startTcpProxy } from '../../helpers/tcp-proxy.js'

const TABLE = 'idemkit_test_deposits'

describe('transaction: true on the PostgreSQL store', () => {
  let pool: pg.Pool
  let store: PostgresStore
  let admin: pg.Client

  beforeAll(async () => {
    admin = new pg.Client({ connectionString: inject('postgresUrl') })
    await admin.connect()
    await admin.query(
      `CREATE TABLE IF NOT EXISTS ${TABLE} (id bigserial PRIMARY KEY, scope text NOT NULL, amount int NOT NULL,
       tag text CONSTRAINT one_tag UNIQUE DEFERRABLE INITIALLY DEFERRED)`,
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

  /** One request of a scope of its own: a deposit of `amount` written through the run's `db`. */
  function deposit(key: string, action?: (context: ActionContext) => Promise<unknown>) {
    return transactionalDeposit(
      store,
      key,
      2_000,
      action ??
        (async (context) => {
          await context.db?.query(`INSERT INTO ${TABLE} (scope, amount) VALUES ($1, 10)`, [key])
          return { deposited: 10 }
        }),
    )
  }

  const newKey = () => `test:idem:1:d1:op:${randomBytes(32).toString('hex')}`
  const rows = async (key: string) =>
    (await admin.query(`SELECT count(*)::int AS n FROM ${TABLE} WHERE scope = $1`, [key])).rows[0].n as number
  const stateOf = async (key: string) => {
    const found = await store.inspect(key, '0'.repeat(64))
    return found.kind
  }

  it('commits the writes and the completion together, and replays without writing again', async () => {
    const key = newKey()
    const first = await deposit(key)
    const second = await deposit(key)

    expect(first).toEqual({ kind: 'EXECUTED', value: { deposited: 10 }, attempt: 1 })
    expect(second).toEqual({ kind: 'REPLAYED', value: { deposited: 10 } })
    expect(await rows(key)).toBe(1)
    expect(await stateOf(key)).toBe(InspectReply.COMPLETED)
  })

  it('hands the action a connection inside an open transaction', async () => {
    const key = newKey()
    let seen: unknown
    await deposit(key, async (context) => {
      const found = await context.db?.query<{ same: boolean }>('SELECT now() = statement_timestamp() AS same')
      seen = { status: (context.db as pg.PoolClient).getTransactionStatus(), nowIsStatementTime: found?.rows[0]?.same }
      return {}
    })
    // Inside BEGIN, now() is the transaction's start, not this statement's.
    expect(seen).toEqual({ status: 'T', nowIsStatementTime: false })
  })

  it('lets the action choose its isolation level as its first statement', async () => {
    const key = newKey()
    const outcome = await deposit(key, async (context) => {
      await context.db?.query('SET TRANSACTION ISOLATION LEVEL SERIALIZABLE')
      const found = await context.db?.query<{ level: string }>(
        "SELECT current_setting('transaction_isolation') AS level",
      )
      await context.db?.query(`INSERT INTO ${TABLE} (scope, amount) VALUES ($1, 10)`, [key])
      return { level: found?.rows[0]?.level }
    })
    expect(outcome).toEqual({ kind: 'EXECUTED', value: { level: 'serializable' }, attempt: 1 })
    expect(await rows(key)).toBe(1)
  })

  it('rolls back what a failing action wrote, records FAILED_RETRYABLE, and runs it again on a retry', async () => {
    const key = newKey()
    const failed = await deposit(key, async (context) => {
      await context.db?.query(`INSERT INTO ${TABLE} (scope, amount) VALUES ($1, 10)`, [key])
      throw new Error('the card network timed out')
    })
    expect(failed).toMatchObject({ kind: 'FAILED', classification: 'retryable', recorded: true })
    expect(await rows(key)).toBe(0)
    expect(await stateOf(key)).toBe(InspectReply.FAILED_RETRYABLE)

    const retried = await deposit(key)
    expect(retried).toEqual({ kind: 'EXECUTED', value: { deposited: 10 }, attempt: 2 })
    expect(await rows(key)).toBe(1)
  })

  it('refuses the completion of a run whose scope was taken over, and keeps none of its writes', async () => {
    const key = newKey()
    const outcome = await deposit(key, async (context) => {
      await context.db?.query(`INSERT INTO ${TABLE} (scope, amount) VALUES ($1, 10)`, [key])
      // Another instance takes the scope over meanwhile (attempt + 1, a new owner).
      await admin.query(
        `UPDATE idemkit_records SET attempt = attempt + 1, owner = repeat('f', 64), rev = rev + 1 WHERE key = $1`,
        [key],
      )
      return { deposited: 10 }
    })

    expect(outcome).toMatchObject({ kind: 'UNRECORDED', reason: 'LOST_OWNERSHIP' })
    expect(await rows(key)).toBe(0)
  })

  it('rolls back when the commit fails (a deferred constraint), records FAILED_RETRYABLE and answers ROLLED_BACK', async () => {
    const key = newKey()
    const outcome = await deposit(key, async (context) => {
      // The same tag twice: the deferred unique constraint fails at COMMIT, not here.
      await context.db?.query(`INSERT INTO ${TABLE} (scope, amount, tag) VALUES ($1, 10, $1), ($1, 10, $1)`, [key])
      return { deposited: 10 }
    })

    expect(outcome).toMatchObject({ kind: 'UNRECORDED', reason: 'ROLLED_BACK' })
    expect(await rows(key)).toBe(0)
    expect(await stateOf(key)).toBe(InspectReply.FAILED_RETRYABLE)
  })

  it('rolls back an action that left its transaction aborted, though it returned a result', async () => {
    const key = newKey()
    const outcome = await deposit(key, async (context) => {
      await context.db?.query(`INSERT INTO ${TABLE} (scope, amount) VALUES ($1, 10)`, [key])
      await context.db?.query('SELECT 1 / 0').catch(() => undefined)
      return { deposited: 10 }
    })

    expect(outcome).toMatchObject({ kind: 'UNRECORDED', reason: 'ROLLED_BACK' })
    expect(await rows(key)).toBe(0)
    expect(await stateOf(key)).toBe(InspectReply.FAILED_RETRYABLE)
  })

  it('records an unknown effect when the action commits its transaction itself', async () => {
    const key = newKey()
    const outcome = await deposit(key, async (context) => {
      await context.db?.query(`INSERT INTO ${TABLE} (scope, amount) VALUES ($1, 10)`, [key])
      await context.db?.query('COMMIT')
      return { deposited: 10 }
    })

    expect(outcome).toMatchObject({ kind: 'UNRECORDED', reason: 'STORE_UNAVAILABLE' })
    expect((outcome as { cause?: IdempotencyError }).cause?.code).toBe(ErrorCode.TRANSACTION_ENDED)
    // The write committed without the record: its effect happened, so no retry may run it again.
    expect(await rows(key)).toBe(1)
    expect(await stateOf(key)).toBe(InspectReply.ABANDONED)
  })

  it('answers from the record when the reply to COMMIT is lost after PostgreSQL committed', async () => {
    const url = new URL(inject('postgresUrl'))
    const proxy = await startTcpProxy(Number(url.port))
    const proxied = testPostgresPool({ connectionString: `postgres://postgres@127.0.0.1:${proxy.port}/postgres` })
    const own = postgresStore({ pool: proxied, keyPrefix: 'test', sweepIntervalMs: 0, statementTimeoutMs: 3_000 })
    try {
      const key = newKey()
      const request = {
        store: own,
        key,
        fingerprint: 'f1:lost-commit',
        operation: 'POST /deposits',
        codec: jsonCodec(),
        policy: resolvePolicy({}),
        transaction: true,
        action: async (context: ActionContext) => {
          await context.db?.query(`INSERT INTO ${TABLE} (scope, amount) VALUES ($1, 10)`, [key])
          proxy.dropRepliesAfter('COMMIT')
          return { deposited: 10 }
        },
      }
      const outcome = await execute(request)
      expect(proxy.stats.dropped).toBeGreaterThan(0)
      expect(outcome).toEqual({ kind: 'EXECUTED', value: { deposited: 10 }, attempt: 1 })
      expect(await rows(key)).toBe(1)
      expect(await execute(request)).toEqual({ kind: 'REPLAYED', value: { deposited: 10 } })
      expect(await rows(key)).toBe(1)
    } finally {
      await own.close()
      await proxied.end()
      await proxy.close()
    }
  })

  it('gives the connection back to the pool after every outcome', async () => {
    const small = testPostgresPool({ max: 2 })
    const own = postgresStore({ pool: small, keyPrefix: 'test', sweepIntervalMs: 0 })
    try {
      for (let i = 0; i < 6; i++) {
        const key = newKey()
        await execute({
          store: own,
          key,
          fingerprint: 'f1:x',
          operation: 'POST /deposits',
          codec: jsonCodec(),
          policy: resolvePolicy({}),
          transaction: true,
          action: async (context) => {
            await context.db?.query(`INSERT INTO ${TABLE} (scope, amount) VALUES ($1, 1)`, [key])
            if (i % 3 === 1) throw new Error('fails')
            if (i % 3 === 2) await context.db?.query('SELECT 1 / 0').catch(() => undefined)
            return { i }
          },
        })
      }
      expect(small.totalCount - small.idleCount).toBe(0)
      // Every connection back in the pool is outside any transaction.
      const idle = await Promise.all([small.connect(), small.connect()])
      for (const client of idle) {
        expect((await client.query('SELECT pg_current_xact_id_if_assigned() AS xid')).rows[0].xid).toBeNull()
        expect(client.getTransactionStatus()).toBe('I')
        client.release()
      }
    } finally {
      await own.close()
      await small.end()
    }
  })

  it('refuses transaction: true on a store that cannot run transactions', async () => {
    const memory = memoryStore()
    await expect(
      execute({
        store: memory,
        key: newKey(),
        fingerprint: 'f1:x',
        operation: 'op',
        codec: jsonCodec(),
        policy: resolvePolicy({}),
        transaction: true,
        action: () => ({}),
      }),
    ).rejects.toThrow(/needs a store that runs transactions/)
    await memory.close()
  })
})
