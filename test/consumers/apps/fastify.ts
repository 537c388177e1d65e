// A Fastify app as a user writes it, against the installed tarball: the root entry and
// idemkit/fastify are the same plugin. Prints `listening <port>` once it accepts requests.
import type { AddressInfo } from 'node:net'
import Fastify from 'fastify'
import rootEntry from 'idemkit'
import idempotency, { memoryStore } from 'idemkit/fastify'

async function main(): Promise<void> {
  if (rootEntry !== idempotency) throw new Error('idemkit and idemkit/fastify export different plugins')
  const app = Fastify()
  await app.register(idempotency, {
    store: memoryStore(),
    secrets: { current: 1, keys: { 1: 'consumer-secret-'.repeat(2) } },
    anonymous: true,
  })
  let orders = 0
  app.post('/orders', { config: { idempotency: { leaseMs: 5_000 } } }, async (_request, reply) => {
    orders += 1
    return reply.code(201).send({ order: orders })
  })
  // Type-checked, never called: a route option of the wrong type is a compile error here too.
  const typo = () =>
    // @ts-expect-error leaseMs is a number
    app.post('/typo', { config: { idempotency: { leaseMs: '5s' } } }, async () => 'never')
  void typo
  await app.listen({ port: 0, host: '127.0.0.1' })
  console.log(`listening ${(app.server.address() as AddressInfo).port}`)
}

void main()
