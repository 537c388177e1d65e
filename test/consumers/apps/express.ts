// An Express app as a user writes it, against the installed tarball (Express 4 or 5).
// Prints `listening <port>` once it accepts requests.
import type { AddressInfo } from 'node:net'
import express from 'express'
import idempotency, { memoryStore } from 'idemkit/express'

const idem = idempotency({
  store: memoryStore(),
  secrets: { current: 1, keys: { 1: 'consumer-secret-'.repeat(2) } },
  anonymous: true,
})
const app = express()
app.use(express.json())
let orders = 0
app.post('/orders', idem({ leaseMs: 5_000 }), (_req, res) => {
  orders += 1
  res.status(201).json({ order: orders })
})
// Type-checked, never called: a route option of the wrong type is a compile error here too.
// @ts-expect-error leaseMs is a number
export const typo = () => idem({ leaseMs: '5s' })
app.use(idem.errors)
const server = app.listen(0, '127.0.0.1', () => {
  console.log(`listening ${(server.address() as AddressInfo).port}`)
})
