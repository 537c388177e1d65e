// An Express 4 app in plain CommonJS, as a user writes it from the docs: nothing installed but
// express and idemkit (no ioredis, no pg, no TypeScript). Prints `listening <port>`.
const express = require('express')
const idempotency = require('idemkit/express')
const { memoryStore } = require('idemkit/express')

const idem = idempotency({
  store: memoryStore(),
  secrets: { current: 1, keys: { 1: 'consumer-secret-'.repeat(2) } },
  anonymous: true,
})
if (typeof require('idemkit/client').idempotentFetch.with !== 'function') {
  throw new Error('idemkit/client: no idempotentFetch through require()')
}
if (require('idemkit/express').idempotency !== require('idemkit/express').default) {
  throw new Error('idemkit/express: .idempotency and .default are different functions')
}
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
