// docs/postgresql.md "Knex" as a user writes it against the installed tarball: the handler
// writes through Knex's `Transaction` (`ledger.tx(...)`, typed), and the stored answer commits
// with it. Installed: idemkit, knex, pg, @types/pg.
import { idempotency, idempotencyOf, postgresStore } from 'idemkit/fetch'
import { knexTransactions } from 'idemkit/knex'
import knexFactory, { type Knex } from 'knex'
import pg from 'pg'
import { answer, orderOf, SECRETS, serve } from './serve.js'

async function main(): Promise<void> {
  const knex = knexFactory({ client: 'pg', connection: process.env.DATABASE_URL })
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 4 })
  const store = postgresStore({ pool, table: 'consumer_records', sweepIntervalMs: 0 })
  await store.migrate()
  await knex.raw('CREATE TABLE IF NOT EXISTS consumer_knex_orders (key text NOT NULL, item text NOT NULL)')
  const ledger = knexTransactions(knex, { isolationLevel: 'read committed' })
  const idem = idempotency({ store, secrets: SECRETS, anonymous: true })
  const handler = idem(
    async (request) => {
      const tx: Knex.Transaction = ledger.tx(idempotencyOf(request))
      const { key, item } = await orderOf(request)
      await tx('consumer_knex_orders').insert({ key, item })
      const rows = await tx('consumer_knex_orders').where({ key }).select('item')
      return answer(item, rows.length)
    },
    { transaction: ledger },
  )
  // Type-checked, never called: `tx` is Knex's Transaction, not `any`.
  const typed = (request: Request) =>
    // @ts-expect-error no such method
    ledger.tx(idempotencyOf(request)).noSuchMethod()
  void typed
  await serve(handler)
}

void main()
