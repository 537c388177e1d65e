import type { ExtractTablesWithRelations } from 'drizzle-orm'
import { drizzle, type NodePgQueryResultHKT } from 'drizzle-orm/node-postgres'
import type { PgTransaction } from 'drizzle-orm/pg-core'
import knexFactory, { type Knex } from 'knex'
import { Kysely, PostgresDialect, type Transaction } from 'kysely'
import pg from 'pg'
import { DataSource, type EntityManager } from 'typeorm'
import { describe, expectTypeOf, it } from 'vitest'
import { idempotentProcessor } from '../../src/bullmq/index.js'
import { type ActionContext, idempotent, idempotentBatch } from '../../src/index.js'
import { drizzleTransactions } from '../../src/orm/drizzle.js'
import { knexTransactions } from '../../src/orm/knex.js'
import { kyselyTransactions } from '../../src/orm/kysely.js'
import { typeormTransactions } from '../../src/orm/typeorm.js'
import { postgresStore } from '../../src/stores/postgres/index.js'

const pool = new pg.Pool()
const base = { store: postgresStore({ pool }), secrets: { current: 1, keys: { 1: 'x'.repeat(32) } }, operation: 'op' }

describe('idempotent() with an ORM adapter: types', () => {
  it("hands the function the ORM's own transaction object, typed, through adapter.tx(context)", () => {
    const drizzleLedger = drizzleTransactions(drizzle({ client: pool }))
    const deposit = idempotent(
      async (message: { id: string }, context: ActionContext) => {
        const tx = drizzleLedger.tx(context)
        expectTypeOf(tx).not.toBeAny()
        type Schema = Record<string, unknown>
        expectTypeOf(tx).toExtend<PgTransaction<NodePgQueryResultHKT, Schema, ExtractTablesWithRelations<Schema>>>()
        return message.id
      },
      { ...base, key: 'id', transaction: drizzleLedger },
    )
    expectTypeOf(deposit).toEqualTypeOf<(message: { id: string }) => Promise<string>>()

    const knexLedger = knexTransactions(knexFactory({ client: 'pg' }))
    idempotentBatch(
      async (message: { id: string }, context) => {
        expectTypeOf(knexLedger.tx(context)).toEqualTypeOf<Knex.Transaction>()
        return message.id
      },
      { ...base, key: 'id', transaction: knexLedger },
    )

    interface Tables {
      ledger: { id: string }
    }
    const kyselyLedger = kyselyTransactions(new Kysely<Tables>({ dialect: new PostgresDialect({ pool }) }))
    idempotentProcessor<{ id: string }, string>(
      async (job, context) => {
        expectTypeOf(kyselyLedger.tx(context)).toEqualTypeOf<Transaction<Tables>>()
        return job.data.id
      },
      { ...base, transaction: kyselyLedger },
    )

    const typeormLedger = typeormTransactions(new DataSource({ type: 'postgres' }))
    idempotent(
      async (id: string, context: ActionContext) => {
        expectTypeOf(typeormLedger.tx(context)).toEqualTypeOf<EntityManager>()
        return id
      },
      { ...base, key: (id) => id, transaction: typeormLedger },
    )
  })

  it('refuses a transaction option that is neither a boolean nor an adapter', () => {
    // @ts-expect-error an ORM's database object is not its adapter
    idempotent(async (id: string) => id, { ...base, key: (id) => id, transaction: drizzle({ client: pool }) })
  })
})
