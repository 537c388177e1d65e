/**
 * An inbox consumer in a process of its own, for the test that kills it between its write and
 * the commit: messages arrive on stdin, one JSON object a line (`{ id, account, amount }`), and
 * each is handled by `idempotent()` with `transaction: true` on the PostgreSQL store, its effect a
 * row in `inbox_deposits` and a balance in `inbox_accounts`, written through the run's
 * transaction. Each message is answered on stdout: `ok <id> <result JSON>`, or
 * `error <id> <code> <retryAfterMs>`. With HANG_ON=<id>, the message with that id prints
 * `written <id>` once its writes are made and waits forever, before the commit.
 *
 * With ORM=<name> (drizzle, kysely, knex, typeorm: test/helpers/orm-kits.ts), `transaction` is
 * that ORM's adapter and the writes go through the ORM's own transaction object
 * (`adapter.tx(context)`): the row in `orm_deposits` (its key the message id, its route
 * `inbox-<name>`) and the balance in `orm_balances`.
 *
 * Environment: DATABASE_URL, IDEMPOTENCY_SECRET, LEASE_MS, HANG_ON, ORM.
 */
import { createInterface } from 'node:readline'
import pg from 'pg'
import { IdempotencyError } from '../../../src/core/errors.js'
import type { ActionContext } from '../../../src/core/run/types.js'
import { idempotent } from '../../../src/jobs/idempotent.js'
import { postgresStore } from '../../../src/stores/postgres/index.js'
import { ORM_KITS } from '../../helpers/orm-kits.js'

interface Deposit {
  readonly id: string
  readonly account: string
  readonly amount: number
}

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 8 })
pool.on('error', () => undefined)
const store = postgresStore({ pool, sweepIntervalMs: 0 })
const hangOn = process.env.HANG_ON
const options = {
  store,
  secrets: { current: 1, keys: { 1: process.env.IDEMPOTENCY_SECRET } },
  operation: 'deposit',
  key: 'id',
  leaseMs: Number(process.env.LEASE_MS ?? 30_000),
} as const

async function hang(message: Deposit): Promise<void> {
  if (message.id !== hangOn) return
  console.log(`written ${message.id}`)
  await new Promise(() => undefined)
}

const make = ORM_KITS.find(([name]) => name === process.env.ORM)?.[1]
const kit = make?.(pool, 'read committed')
await kit?.ready

const depositInOrm = idempotent(
  async (message: Deposit, context: ActionContext) => {
    if (kit === undefined) throw new Error('ORM names no kit')
    const balance = await kit.deposit(kit.adapter.tx(context), {
      route: `inbox-${kit.name}`,
      principal: 'inbox',
      key: message.id,
      account: message.account,
      amount: message.amount,
      token: context.fencingToken,
      pid: process.pid,
    })
    await hang(message)
    return { balance, token: context.fencingToken }
  },
  { ...options, operation: `deposit-${process.env.ORM}`, transaction: kit?.adapter ?? false },
)

const depositInPg = idempotent(
  async (message: Deposit, { db, fencingToken }: ActionContext) => {
    if (db === undefined) throw new Error('transaction: true gives the function db')
    await db.query('INSERT INTO inbox_deposits (message_id, account, amount, token) VALUES ($1, $2, $3, $4)', [
      message.id,
      message.account,
      message.amount,
      fencingToken,
    ])
    const { rows } = await db.query<{ balance: number }>(
      'UPDATE inbox_accounts SET balance = balance + $2 WHERE id = $1 RETURNING balance',
      [message.account, message.amount],
    )
    await hang(message)
    return { balance: rows[0]?.balance, token: fencingToken }
  },
  { ...options, transaction: true },
)
const deposit = kit === undefined ? depositInPg : depositInOrm

const lines = createInterface({ input: process.stdin })
console.log('ready')
for await (const line of lines) {
  const message = JSON.parse(line) as Deposit
  // One message at a time, as a queue's consumer with a prefetch of 1 would.
  try {
    console.log(`ok ${message.id} ${JSON.stringify(await deposit(message))}`)
  } catch (error) {
    const code = error instanceof IdempotencyError ? error.code : 'HANDLER'
    const retryAfterMs = (error as { retryAfterMs?: number }).retryAfterMs ?? 0
    console.log(`error ${message.id} ${code} ${retryAfterMs}`)
  }
}
await kit?.close()
await store.close()
await pool.end()
