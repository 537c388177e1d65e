/**
 * The ORMs the transaction port is tested with, each on the app's own `pg.Pool`: its adapter
 * (`idemkit/drizzle`, ...) and a deposit written the ORM's way (a row in `orm_deposits`, the amount
 * added to the account's row in `orm_balances`), for the in-process tests (test/orm/) and the
 * fault app's /deposits-<orm> routes (test/faults/apps/fault-app.ts).
 */
import { eq, sql } from 'drizzle-orm'
import { drizzle } from 'drizzle-orm/node-postgres'
import { integer, pgTable, serial, text } from 'drizzle-orm/pg-core'
import type pg from 'pg'
import type { OrmAdapter } from '../../src/orm/adapter.js'
import { drizzleTransactions } from '../../src/orm/drizzle.js'

/** A deposit as the tests write it. */
export interface DepositRow {
  readonly route: string
  readonly principal: string
  readonly key: string
  readonly account: string
  readonly amount: number
  readonly token: number
  readonly pid: number
}

/** The isolation levels the runs are tested under. */
export type Isolation = 'read committed' | 'repeatable read'

/** One ORM on a pool: its adapter and the deposit written through the run's transaction object. */
export interface OrmKit {
  readonly name: string
  // biome-ignore lint/suspicious/noExplicitAny: each ORM's own transaction object
  readonly adapter: OrmAdapter<any>
  /** Inserts the row and adds the amount to the account's balance through `tx`; the new balance. */
  deposit(tx: unknown, row: DepositRow): Promise<number>
  /** A plain statement through `tx` (the ORM's raw SQL). */
  execute(tx: unknown, text: string): Promise<unknown>
  close(): Promise<void>
}

/** The tables the deposits go to, made once per database (safe from processes starting together). */
export async function createDepositTables(pool: pg.Pool): Promise<void> {
  await pool.query(
    `SELECT pg_advisory_xact_lock(hashtext('idemkit orm tables'));
     CREATE TABLE IF NOT EXISTS orm_deposits (id serial PRIMARY KEY, route text NOT NULL, principal text NOT NULL,
     key text NOT NULL, account text NOT NULL, amount int NOT NULL, token int NOT NULL, pid int NOT NULL);
     CREATE TABLE IF NOT EXISTS orm_balances (account text PRIMARY KEY, balance int NOT NULL)`,
  )
}

const deposits = pgTable('orm_deposits', {
  id: serial('id').primaryKey(),
  route: text('route').notNull(),
  principal: text('principal').notNull(),
  key: text('key').notNull(),
  account: text('account').notNull(),
  amount: integer('amount').notNull(),
  token: integer('token').notNull(),
  pid: integer('pid').notNull(),
})
const balances = pgTable('orm_balances', {
  account: text('account').primaryKey(),
  balance: integer('balance').notNull(),
})

type DrizzleTx = Parameters<Parameters<ReturnType<typeof drizzle>['transaction']>[0]>[0]

function drizzleKit(pool: pg.Pool, isolationLevel: Isolation): OrmKit {
  const db = drizzle({ client: pool })
  const adapter = drizzleTransactions(db, { isolationLevel })
  return {
    name: 'drizzle',
    adapter,
    async deposit(tx, row) {
      const run = tx as DrizzleTx
      await run.insert(deposits).values(row)
      const [updated] = await run
        .update(balances)
        .set({ balance: sql`${balances.balance} + ${row.amount}` })
        .where(eq(balances.account, row.account))
        .returning({ balance: balances.balance })
      return updated?.balance ?? 0
    },
    execute: (tx, statement) => (tx as DrizzleTx).execute(sql.raw(statement)),
    close: async () => {},
  }
}

/** Every ORM's kit, in the order the adapters landed. */
export const ORM_KITS: readonly (readonly [name: string, make: (pool: pg.Pool, isolation: Isolation) => OrmKit])[] = [
  ['drizzle', drizzleKit],
]
