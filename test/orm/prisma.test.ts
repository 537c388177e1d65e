/**
 * What is Prisma's own in `idemkit/prisma`: its interactive transaction's `timeout`. Prisma rolls
 * a transaction back once `timeout` has passed (5 s by default), whatever it is doing; the adapter
 * sets no practical limit unless given one, since idemkit renews a live run's lease beside the
 * transaction and the server ends a stalled one (`transactionIdleTimeoutMs`). On the suite's
 * PostgreSQL, through the executor.
 */
import { randomUUID } from 'node:crypto'
import { PrismaPg } from '@prisma/adapter-pg'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { jsonCodec } from '../../src/core/codec.js'
import { execute } from '../../src/core/executor.js'
import { resolvePolicy } from '../../src/core/policy.js'
import { type PrismaTransactionOptions, prismaTransactions } from '../../src/orm/prisma.js'
import { type PostgresStore, postgresStore } from '../../src/stores/postgres/index.js'
import { createDepositTables } from '../helpers/orm-kits.js'
import { testPostgresPool } from '../helpers/stores.js'
import { PrismaClient } from '../prisma/generated/client.js'

describe('idemkit/prisma: the interactive transaction timeout', () => {
  let pool: pg.Pool
  let store: PostgresStore
  let prisma: PrismaClient
  let admin: pg.Client

  beforeAll(async () => {
    admin = new pg.Client({ connectionString: inject('postgresUrl') })
    await admin.connect()
    pool = testPostgresPool({ max: 10 })
    await createDepositTables(pool)
    store = postgresStore({ pool, keyPrefix: 'test', sweepIntervalMs: 0 })
    prisma = new PrismaClient({ adapter: new PrismaPg(pool) })
  })

  afterAll(async () => {
    await prisma?.$disconnect()
    await store?.close()
    await pool?.end()
    await admin?.end()
  })

  /** One deposit of a new key, its handler holding `holdMs` after the writes. */
  async function deposit(options: PrismaTransactionOptions, holdMs: number) {
    const account = `acct-${randomUUID()}`
    await admin.query('INSERT INTO orm_balances (account, balance) VALUES ($1, 100)', [account])
    const adapter = prismaTransactions(prisma, options)
    const key = `test:${randomUUID()}`
    const outcome = await execute({
      store,
      key,
      fingerprint: 'f1:deposit',
      operation: 'POST /deposits',
      codec: jsonCodec(),
      policy: resolvePolicy({ leaseMs: 1_500 }),
      transaction: adapter,
      action: async (context) => {
        const tx = adapter.tx(context)
        const row = { route: 'prisma', principal: 'alice', key, account, amount: 10, token: 1, pid: 0 }
        await tx.ormDeposit.create({ data: row })
        await tx.ormBalance.update({ where: { account }, data: { balance: { increment: 10 } } })
        await new Promise((resolve) => setTimeout(resolve, holdMs))
        return { deposited: 10 }
      },
    })
    const { rows } = await admin.query('SELECT balance FROM orm_balances WHERE account = $1', [account])
    const record = await admin.query('SELECT state FROM idemkit_records WHERE key = $1', [key])
    return { outcome, balance: rows[0]?.balance as number, state: record.rows[0]?.state as string }
  }

  it("a handler longer than Prisma's 5 s default and than the lease commits with the adapter's default", async () => {
    const { outcome, balance, state } = await deposit({ isolationLevel: 'ReadCommitted' }, 6_000)
    expect(outcome.kind).toBe('EXECUTED')
    expect(balance).toBe(110)
    expect(state).toBe('COMPLETED')
  }, 60_000)

  it('a timeout given on purpose rolls a longer handler back: nothing kept, the run unrecorded', async () => {
    const { outcome, balance, state } = await deposit({ timeout: 400 }, 1_200)
    // Prisma rolled the transaction back: the completion finds it closed, nothing committed, and
    // the record is left for a retry to run again.
    expect(outcome).toMatchObject({ kind: 'UNRECORDED', reason: 'ROLLED_BACK' })
    expect(balance).toBe(100)
    expect(state).toBe('FAILED_RETRYABLE')
  }, 60_000)
})
