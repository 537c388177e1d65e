// docs/postgresql.md "Drizzle" as a user writes it against the installed tarball: the handler
// writes through Drizzle's own transaction object (`ledger.tx(...)`, typed), and the stored
// answer commits with it. Installed: idemkit, drizzle-orm, pg, @types/pg.
import { count, eq } from 'drizzle-orm'
import { drizzle } from 'drizzle-orm/node-postgres'
import { pgTable, serial, text } from 'drizzle-orm/pg-core'
import { drizzleTransactions } from 'idemkit/drizzle'
import { idempotency, idempotencyOf, postgresStore } from 'idemkit/fetch'
import pg from 'pg'
import { answer, orderOf, SECRETS, serve } from './serve.js'

const orders = pgTable('consumer_drizzle_orders', {
  id: serial('id').primaryKey(),
  key: text('key').notNull(),
  item: text('item').notNull(),
})

async function main(): Promise<void> {
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 8 })
  pool.on('connect', (client) => client.on('error', () => {}))
  const db = drizzle({ client: pool })
  const store = postgresStore({ pool, table: 'consumer_records', sweepIntervalMs: 0 })
  await store.migrate()
  await pool.query(
    'CREATE TABLE IF NOT EXISTS consumer_drizzle_orders (id serial PRIMARY KEY, key text NOT NULL, item text NOT NULL)',
  )
  const ledger = drizzleTransactions(db, { isolationLevel: 'read committed' })
  const idem = idempotency({ store, secrets: SECRETS, anonymous: true })
  const handler = idem(
    async (request) => {
      const tx = ledger.tx(idempotencyOf(request))
      const { key, item } = await orderOf(request)
      await tx.insert(orders).values({ key, item })
      const [row] = await tx.select({ n: count() }).from(orders).where(eq(orders.key, key))
      return answer(item, row?.n ?? 0)
    },
    { transaction: ledger },
  )
  // Type-checked, never called: `tx` is Drizzle's transaction, not `any`.
  const typed = (request: Request) =>
    // @ts-expect-error item is text
    ledger.tx(idempotencyOf(request)).insert(orders).values({ key: 'k', item: 1 })
  void typed
  await serve(handler)
}

void main()
