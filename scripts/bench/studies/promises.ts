/**
 * `npx tsx scripts/bench/studies/promises.ts [first|replay]`: how many promises and other async
 * resources one request makes through the Fastify plugin on the Redis store (a redis-server of
 * its own, requests through `inject`, one at a time), counted with `async_hooks`. A count, not a
 * timing: each promise is an allocation and, awaited, a turn of the microtask queue; it does
 * not move with the machine's load. Light-my-request's and Fastify's own are counted too.
 */
import { createHook } from 'node:async_hooks'
import Fastify from 'fastify'
import { Redis } from 'ioredis'
import { startRedisServer } from '../../redis-server.js'
import { ensureBuilt } from '../common.js'

ensureBuilt()
const scenario = process.argv[2] === 'replay' ? 'replay' : 'first'
const { default: idempotency } = (await import(
  new URL('../../../dist/plugins/fastify/index.js', import.meta.url).href
)) as typeof import('../../../plugins/fastify/index.js')
const core = (await import(
  new URL('../../../dist/src/index.js', import.meta.url).href
)) as typeof import('../../../src/index.js')

const server = await startRedisServer()
const redis = new Redis(server.url)
const app = Fastify()
try {
  await app.register(idempotency, {
    store: core.redisStore({ redis }),
    secrets: { current: 1, keys: { 1: 'c'.repeat(32) } },
    anonymous: true,
  })
  app.post('/op', { config: { idempotency: true } }, async () => ({ ok: true }))
  await app.ready()
  let n = 0
  const post = () =>
    app.inject({
      method: 'POST',
      url: '/op',
      headers: { 'idempotency-key': scenario === 'first' ? `k${n++}` : 'same' },
      payload: { item: 'book', qty: 1 },
    })
  for (let i = 0; i < 2_000; i++) await post()
  const counts = new Map<string, number>()
  const hook = createHook({
    init(_id, type) {
      counts.set(type, (counts.get(type) ?? 0) + 1)
    },
  })
  const requests = 2_000
  hook.enable()
  for (let i = 0; i < requests; i++) await post()
  hook.disable()
  console.log(`fastify/redis/${scenario}, per request through inject:`)
  for (const [type, count] of [...counts].sort((a, b) => b[1] - a[1])) {
    console.log(`  ${type.padEnd(24)} ${(count / requests).toFixed(2)}`)
  }
} finally {
  await app.close()
  redis.disconnect()
  await server.stop()
}
