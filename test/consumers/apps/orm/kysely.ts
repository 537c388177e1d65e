// docs/postgresql.md "Kysely" as a user writes it against the installed tarball: the handler
// writes through Kysely's `Transaction<Tables>` (`ledger.tx(...)`, typed), and the stored answer
// commits with it. Installed: idemkit, kysely, pg, @types/pg.
import { idempotency, idempotencyOf, postgresStore } from 'idemkit/fetch'
import { kyselyTransactions } from 'idemkit/kysely'
import { Kysely, PostgresDialect } from 'kysely'
import pg from 'pg'
import { answer, orderOf, SECRETS, serve } from './serve.js'

interface Tables {
  consumer_kysely_orders: { key: string; item: string }
}

async function main(): Promise<void> {
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 8 })
  pool.on('connect', (client) => client.on('error', () => {}))
  const db = new Kysely<Tables>({ dialect: new PostgresDialect({ pool }) })
  const store = postgresStore({ pool, table: 'consumer_records', sweepIntervalMs: 0 })
  await store.migrate()
  await pool.query('CREATE TABLE IF NOT EXISTS consumer_kysely_orders (key text NOT NULL, item text NOT NULL)')
  const ledger = kyselyTransactions(db, { isolationLevel: 'repeatable read' })
  const idem = idempotency({ store, secrets: SECRETS, anonymous: true })
  const handler = idem(
    async (request) => {
      const tx = ledger.tx(idempotencyOf(request))
      const { key, item } = await orderOf(request)
      await tx.insertInto('consumer_kysely_orders').values({ key, item }).execute()
      const { n } = await tx
        .selectFrom('consumer_kysely_orders')
        .select((eb) => eb.fn.countAll<string>().as('n'))
        .where('key', '=', key)
        .executeTakeFirstOrThrow()
      return answer(item, Number(n))
    },
    { transaction: ledger },
  )
  // Type-checked, never called: `tx` is Kysely's Transaction<Tables>, not `any`.
  const typed = (request: Request) =>
    // @ts-expect-error no such table
    ledger.tx(idempotencyOf(request)).insertInto('consumer_orders').values({}).execute()
  void typed
  await serve(handler)
}

void main()
