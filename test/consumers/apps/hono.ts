// A Hono app on @hono/node-server as a user writes it, against the installed tarball.
// Prints `listening <port>` once it accepts requests.
import { serve } from '@hono/node-server'
import { Hono } from 'hono'
import idempotency, { type HonoIdempotencyEnv, memoryStore } from 'idemkit/hono'

const idem = idempotency({
  store: memoryStore(),
  secrets: { current: 1, keys: { 1: 'consumer-secret-'.repeat(2) } },
  anonymous: true,
})
const app = new Hono<HonoIdempotencyEnv>()
let orders = 0
app.post('/orders', idem({ leaseMs: 5_000 }), (c) => {
  orders += 1
  return c.json({ order: orders }, 201)
})
// Type-checked, never called: a route option of the wrong type is a compile error here too.
// @ts-expect-error leaseMs is a number
export const typo = () => idem({ leaseMs: '5s' })
serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) => {
  console.log(`listening ${info.port}`)
})
