// A Fastify 4 app as an ES module in plain JavaScript: nothing installed but fastify and idemkit
// (no ioredis, no pg, no TypeScript). Prints `listening <port>`.
import Fastify from 'fastify'
import idempotency, { memoryStore } from 'idemkit'

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
await app.listen({ port: 0, host: '127.0.0.1' })
console.log(`listening ${app.server.address().port}`)
