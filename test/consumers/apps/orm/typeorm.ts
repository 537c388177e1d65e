// docs/postgresql.md "TypeORM" as a user writes it against the installed tarball: the handler
// writes through the transaction's `EntityManager` (`ledger.tx(...)`, typed), and the stored
// answer commits with it. An EntitySchema (no decorators). Installed: idemkit, typeorm, pg, @types/pg.
import { idempotency, idempotencyOf, postgresStore } from 'idemkit/fetch'
import { typeormTransactions } from 'idemkit/typeorm'
import pg from 'pg'
import { DataSource, EntitySchema } from 'typeorm'
import { answer, orderOf, SECRETS, serve } from './serve.js'

interface Order {
  id: number
  key: string
  item: string
}

const Orders = new EntitySchema<Order>({
  name: 'Order',
  tableName: 'consumer_typeorm_orders',
  columns: {
    id: { type: Number, primary: true, generated: true },
    key: { type: String },
    item: { type: String },
  },
})

async function main(): Promise<void> {
  const dataSource = await new DataSource({
    type: 'postgres',
    url: process.env.DATABASE_URL,
    entities: [Orders],
    synchronize: true,
  }).initialize()
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 4 })
  const store = postgresStore({ pool, table: 'consumer_records', sweepIntervalMs: 0 })
  await store.migrate()
  const ledger = typeormTransactions(dataSource, 'READ COMMITTED')
  const idem = idempotency({ store, secrets: SECRETS, anonymous: true })
  const handler = idem(
    async (request) => {
      const tx = ledger.tx(idempotencyOf(request))
      const { key, item } = await orderOf(request)
      await tx.insert(Orders, { key, item })
      return answer(item, await tx.count(Orders, { where: { key } }))
    },
    { transaction: ledger },
  )
  // Type-checked, never called: `tx` is TypeORM's EntityManager, not `any`.
  const typed = (request: Request) =>
    // @ts-expect-error no such method
    ledger.tx(idempotencyOf(request)).noSuchMethod()
  void typed
  await serve(handler)
}

void main()
