/**
 * The cost per request of an ORM adapter's transaction against `transaction: true` on the raw pg
 * client: the same executor run (a claim, the transaction, one INSERT, the completion, COMMIT) of
 * a new key, taking turns, on a PostgreSQL cluster started for the run.
 *
 *   npx tsx scripts/bench/studies/orm-transactions.ts [--ops 500] [--rounds 5]
 */
import { randomUUID } from 'node:crypto'
import { PrismaPg } from '@prisma/adapter-pg'
import { sql } from 'drizzle-orm'
import { drizzle } from 'drizzle-orm/node-postgres'
import knexFactory from 'knex'
import { Kysely, PostgresDialect } from 'kysely'
import pg from 'pg'
import { DataSource } from 'typeorm'
import { jsonCodec } from '../../../src/core/codec.js'
import { execute } from '../../../src/core/executor.js'
import { resolvePolicy } from '../../../src/core/policy.js'
import type { AppTransactions } from '../../../src/core/store-transaction.js'
import { drizzleTransactions } from '../../../src/orm/drizzle.js'
import { knexTransactions } from '../../../src/orm/knex.js'
import { kyselyTransactions } from '../../../src/orm/kysely.js'
import { prismaTransactions } from '../../../src/orm/prisma.js'
import { typeormTransactions } from '../../../src/orm/typeorm.js'
import { postgresStore } from '../../../src/stores/postgres/index.js'
import { PrismaClient } from '../../../test/prisma/generated/client.js'
import { startPostgresServer } from '../../postgres-server.js'
import { prismaGenerate } from '../../prisma-generate.mjs'

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`)
  return i === -1 ? fallback : Number(process.argv[i + 1])
}
const OPS = arg('ops', 500)
const ROUNDS = arg('rounds', 5)

const server = await startPostgresServer()
const pool = new pg.Pool({ connectionString: server.url, max: 4 })
const store = postgresStore({ pool, sweepIntervalMs: 0 })
await store.migrate()
await pool.query('CREATE TABLE bench_rows (id serial PRIMARY KEY, k text NOT NULL)')
const knex = knexFactory({ client: 'pg', connection: server.url, pool: { min: 1, max: 4 } })
const policy = resolvePolicy({ leaseMs: 5_000 })
const INSERT = 'INSERT INTO bench_rows (k) VALUES ($1)'

type Case = readonly [
  name: string,
  transaction: true | AppTransactions,
  write: (tx: unknown, db: unknown, k: string) => Promise<unknown>,
]
const raw = (db: unknown, k: string) => (db as pg.PoolClient).query(INSERT, [k])
const drizzleAdapter = drizzleTransactions(drizzle({ client: pool }))
const kyselyAdapter = kyselyTransactions(
  new Kysely<{ bench_rows: { k: string } }>({ dialect: new PostgresDialect({ pool }) }),
)
const knexAdapter = knexTransactions(knex)
const dataSource = await new DataSource({ type: 'postgres', url: server.url, poolSize: 4 }).initialize()
const typeormAdapter = typeormTransactions(dataSource)
prismaGenerate()
const prisma = new PrismaClient({ adapter: new PrismaPg(pool) })
const prismaAdapter = prismaTransactions(prisma)
const cases: Case[] = [
  ['raw pg (transaction: true)', true, (_tx, db, k) => raw(db, k)],
  [
    'drizzle',
    drizzleAdapter,
    (tx, _db, k) => drizzleAdapter.tx({ tx }).execute(sql`INSERT INTO bench_rows (k) VALUES (${k})`),
  ],
  ['kysely', kyselyAdapter, (tx, _db, k) => kyselyAdapter.tx({ tx }).insertInto('bench_rows').values({ k }).execute()],
  ['knex', knexAdapter, (tx, _db, k) => knexAdapter.tx({ tx })('bench_rows').insert({ k })],
  ['typeorm', typeormAdapter, (tx, _db, k) => typeormAdapter.tx({ tx }).query(INSERT, [k])],
  [
    'prisma',
    prismaAdapter,
    (tx, _db, k) => prismaAdapter.tx({ tx }).$executeRaw`INSERT INTO bench_rows (k) VALUES (${k})`,
  ],
]

async function one(transaction: true | AppTransactions, write: Case[2]): Promise<void> {
  const outcome = await execute({
    store,
    key: randomUUID(),
    fingerprint: 'f',
    operation: 'bench',
    codec: jsonCodec(),
    policy,
    transaction,
    action: async (context) => {
      await write(context.tx, context.db, context.fencingToken.toString())
      return { ok: true }
    },
  })
  if (outcome.kind !== 'EXECUTED') throw new Error(`${outcome.kind}`)
}

const results = new Map<string, number[]>(cases.map(([name]) => [name, []]))
for (const [, transaction, write] of cases) for (let i = 0; i < 50; i++) await one(transaction, write)
for (let round = 0; round < ROUNDS; round++) {
  for (const [name, transaction, write] of cases) {
    const started = performance.now()
    for (let i = 0; i < OPS; i++) await one(transaction, write)
    results.get(name)?.push(((performance.now() - started) * 1000) / OPS)
  }
}
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? 0
const base = median(results.get('raw pg (transaction: true)') ?? [])
console.log(
  `PostgreSQL ${server.url.split('@').pop()}, ${OPS} requests × ${ROUNDS} rounds per case, one at a time, cases taking turns`,
)
console.log('| case | µs per request, median (rounds) | against raw pg |')
console.log('| --- | ---: | ---: |')
for (const [name, values] of results) {
  const m = median(values)
  console.log(
    `| ${name} | ${Math.round(m)} (${values.map(Math.round).join(', ')}) | ${m === base ? '—' : `+${Math.round(m - base)} µs (${((m / base - 1) * 100).toFixed(0)} %)`} |`,
  )
}
await knex.destroy()
await dataSource.destroy()
await prisma.$disconnect()
await store.close()
await pool.end()
await server.stop()
