// A Fastify 4 app as an ES module in plain JavaScript: nothing installed but fastify and idemkit
// (no ioredis, no pg, no TypeScript). Before it prints `listening <port>`, idemkit/client's
// idempotentFetch, which needs nothing installed, calls it once with a key.
import Fastify from 'fastify'
import idempotency, { memoryStore } from 'idemkit'
import { idempotentFetch } from 'idemkit/client'

const app = Fastify()
await app.register(idempotency, {
  store: memoryStore(),
  secrets: { current: 1, keys: { 1: 'consumer-secret-'.repeat(2) } },
  anonymous: true,
})
let orders = 0
app.post('/orders', { config: { idempotency: true } }, async (_request, reply) => {
  orders += 1
  return reply.code(201).send({ order: orders })
})
app.post('/ping', async (request) => ({ key: request.headers['idempotency-key'] }))
await app.listen({ port: 0, host: '127.0.0.1' })
const port = app.server.address().port
const pong = await (await idempotentFetch(`http://127.0.0.1:${port}/ping`, { method: 'POST' })).json()
if (!/^[0-9a-f-]{36}$/.test(pong.key)) throw new Error(`idemkit/client sent no key: ${JSON.stringify(pong)}`)
console.log(`listening ${port}`)
