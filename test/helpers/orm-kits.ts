/**
 * The ORMs the transaction port is tested with, each on the app's own `pg.Pool`: its adapter
 * (`idemkit/drizzle`, ...) and a deposit written the ORM's way (a row in `orm_deposits`, the amount
 * added to the account's row in `orm_balances`), for the in-process tests (test/orm/) and the
 * fault app's /deposits-<orm> routes (test/faults/apps/fault-app.ts).
 */

import { PrismaPg } from '@prisma/adapter-pg'
import { eq, sql } from 'drizzle-orm'
import { drizzle } from 'drizzle-orm/node-postgres'
import { integer, pgTable, serial, text } from 'drizzle-orm/pg-core'
import knexFactory, { type Knex } from 'knex'
import { type Generated, Kysely, sql as kyselySql, PostgresDialect, type Transaction } from 'kysely'
import type pg from 'pg'
import { DataSource, type EntityManager } from 'typeorm'
import type { OrmAdapter } from '../../src/orm/adapter.js'
import { drizzleTransactions } from '../../src/orm/drizzle.js'
import { knexTransactions } from '../../src/orm/knex.js'
import { kyselyTransactions } from '../../src/orm/kysely.js'
import { prismaTransactions } from '../../src/orm/prisma.js'
import { typeormTransactions } from '../../src/orm/typeorm.js'
import { PrismaClient } from '../prisma/generated/client.js'

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

/** Every level the runs are tested under. */
export const ISOLATIONS: readonly Isolation[] = ['read committed', 'repeatable read']

/** The fault app's route of an ORM's deposits at a level (test/faults/apps/fault-app.ts). */
export function depositRoute(name: string, isolation: Isolation): string {
  return isolation === 'read committed' ? `/deposits-${name}` : `/deposits-${name}-repeatable-read`
}

/** The level `transaction_isolation` names, from the rows a `SHOW transaction_isolation` answered. */
function isolationOf(rows: readonly { transaction_isolation?: unknown }[] | undefined): string {
  return String(rows?.[0]?.transaction_isolation)
}

/** One ORM on a pool: its adapter and the deposit written through the run's transaction object. */
export interface OrmKit {
  readonly name: string
  // biome-ignore lint/suspicious/noExplicitAny: each ORM's own transaction object
  readonly adapter: OrmAdapter<any>
  /** Inserts the row and adds the amount to the account's balance through `tx`; the new balance. */
  deposit(tx: unknown, row: DepositRow): Promise<number>
  /** A plain statement through `tx` (the ORM's raw SQL). */
  execute(tx: unknown, text: string): Promise<unknown>
  /** The isolation level `tx` runs at, as PostgreSQL names it (`SHOW transaction_isolation`). */
  isolation(tx: unknown): Promise<string>
  close(): Promise<void>
  /** Settles once the ORM can run (TypeORM's data source initialised). */
  readonly ready?: Promise<unknown>
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
    isolation: async (tx) =>
      isolationOf(
        (await (tx as DrizzleTx).execute<{ transaction_isolation: string }>(sql`SHOW transaction_isolation`)).rows,
      ),
    close: async () => {},
  }
}

interface KyselyTables {
  orm_deposits: DepositRow & { id: Generated<number> }
  orm_balances: { account: string; balance: number }
}

function kyselyKit(pool: pg.Pool, isolationLevel: Isolation): OrmKit {
  const db = new Kysely<KyselyTables>({ dialect: new PostgresDialect({ pool }) })
  const adapter = kyselyTransactions(db, { isolationLevel })
  return {
    name: 'kysely',
    adapter,
    async deposit(tx, row) {
      const run = tx as Transaction<KyselyTables>
      await run.insertInto('orm_deposits').values(row).execute()
      const updated = await run
        .updateTable('orm_balances')
        .set((eb) => ({ balance: eb('balance', '+', row.amount) }))
        .where('account', '=', row.account)
        .returning('balance')
        .executeTakeFirst()
      return updated?.balance ?? 0
    },
    execute: (tx, statement) => kyselySql.raw(statement).execute(tx as Transaction<KyselyTables>),
    isolation: async (tx) =>
      isolationOf(
        (
          await kyselySql<{ transaction_isolation: string }>`SHOW transaction_isolation`.execute(
            tx as Transaction<KyselyTables>,
          )
        ).rows,
      ),
    // The pool is the test's: Kysely's destroy() would end it.
    close: async () => {},
  }
}

function knexKit(pool: pg.Pool, isolationLevel: Isolation): OrmKit {
  // Knex keeps a pool of its own, on the same database.
  const knex = knexFactory({ client: 'pg', connection: pool.options.connectionString, pool: { min: 0, max: 20 } })
  const adapter = knexTransactions(knex, { isolationLevel })
  return {
    name: 'knex',
    adapter,
    async deposit(tx, row) {
      const trx = tx as Knex.Transaction
      await trx('orm_deposits').insert(row)
      const [updated] = await trx('orm_balances')
        .where({ account: row.account })
        .increment('balance', row.amount)
        .returning('balance')
      return (updated as { balance?: number } | undefined)?.balance ?? 0
    },
    execute: (tx, statement) => (tx as Knex.Transaction).raw(statement),
    isolation: async (tx) => isolationOf((await (tx as Knex.Transaction).raw('SHOW transaction_isolation')).rows),
    close: () => knex.destroy(),
  }
}

function typeormKit(pool: pg.Pool, isolationLevel: Isolation): OrmKit {
  // TypeORM keeps a pool of its own, on the same database; its writes here are its raw queries.
  const dataSource = new DataSource({ type: 'postgres', url: pool.options.connectionString, poolSize: 20 })
  const adapter = typeormTransactions(
    dataSource,
    isolationLevel === 'read committed' ? 'READ COMMITTED' : 'REPEATABLE READ',
  )
  return {
    name: 'typeorm',
    adapter,
    ready: dataSource.initialize(),
    async deposit(tx, row) {
      const manager = tx as EntityManager
      await manager.query(
        'INSERT INTO orm_deposits (route, principal, key, account, amount, token, pid) VALUES ($1, $2, $3, $4, $5, $6, $7)',
        [row.route, row.principal, row.key, row.account, row.amount, row.token, row.pid],
      )
      const rows: { balance: number }[] = await manager.query(
        'WITH u AS (UPDATE orm_balances SET balance = balance + $2 WHERE account = $1 RETURNING balance) SELECT balance FROM u',
        [row.account, row.amount],
      )
      return rows[0]?.balance ?? 0
    },
    execute: (tx, statement) => (tx as EntityManager).query(statement),
    isolation: async (tx) => isolationOf(await (tx as EntityManager).query('SHOW transaction_isolation')),
    close: () => dataSource.destroy(),
  }
}

type PrismaTx = Parameters<Parameters<PrismaClient['$transaction']>[0]>[0]

function prismaKit(pool: pg.Pool, isolationLevel: Isolation): OrmKit {
  // Prisma 7 over the test's own pool through its driver adapter: no query engine.
  const prisma = new PrismaClient({ adapter: new PrismaPg(pool) })
  const adapter = prismaTransactions(prisma, {
    isolationLevel: isolationLevel === 'read committed' ? 'ReadCommitted' : 'RepeatableRead',
  })
  return {
    name: 'prisma',
    adapter,
    async deposit(tx, row) {
      const run = tx as PrismaTx
      await run.ormDeposit.create({ data: row })
      // As the other kits' UPDATE: an account without a balance row moves nothing (0), where
      // Prisma's update() would throw P2025.
      await run.ormBalance.updateMany({
        where: { account: row.account },
        data: { balance: { increment: row.amount } },
      })
      const updated = await run.ormBalance.findUnique({ where: { account: row.account }, select: { balance: true } })
      return updated?.balance ?? 0
    },
    execute: (tx, statement) => (tx as PrismaTx).$executeRawUnsafe(statement),
    isolation: async (tx) =>
      isolationOf(
        await (tx as PrismaTx).$queryRawUnsafe<{ transaction_isolation: string }[]>('SHOW transaction_isolation'),
      ),
    // The pool is the test's: the adapter does not end it.
    close: () => prisma.$disconnect(),
  }
}

/** Every ORM's kit, in the order the adapters landed. */
export const ORM_KITS: readonly (readonly [name: string, make: (pool: pg.Pool, isolation: Isolation) => OrmKit])[] = [
  ['drizzle', drizzleKit],
  ['kysely', kyselyKit],
  ['knex', knexKit],
  ['typeorm', typeormKit],
  ['prisma', prismaKit],
]
