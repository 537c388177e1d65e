// An Express 4 app on the PostgreSQL store in plain CommonJS, as `npm install idemkit express pg`
// leaves it (no ioredis). DATABASE_URL names a database the test started. Prints `listening <port>`.
const express = require('express')
const pg = require('pg')
const { idempotency, postgresStore } = require('idemkit/express')

async function main() {
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 4 })
  pool.on('error', () => undefined)
  const store = postgresStore({ pool, table: 'consumer_records', sweepIntervalMs: 0 })
  await store.migrate()
  const idem = idempotency({
    store,
    secrets: { current: 1, keys: { 1: 'consumer-secret-'.repeat(2) } },
    anonymous: true,
  })
  const app = express()
  app.use(express.json(), idem.captureBody)
  let orders = 0
  app.post('/orders', idem(), (_req, res) => {
    orders += 1
    res.status(201).json({ order: orders })
  })
  app.use(idem.errors)
  const server = app.listen(0, '127.0.0.1', () => {
    console.log(`listening ${server.address().port}`)
  })
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
