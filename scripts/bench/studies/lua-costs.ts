/**
 * `npx tsx scripts/bench/studies/lua-costs.ts`: what Redis spends on a completion, as `INFO
 * commandstats` counts it (usec_per_call, 32 calls in flight, on a redis-server of its own): a
 * plain `SET ... PX`, an empty function, a function that sends the completion's four commands
 * (`GET`, `TIME`, `PEXPIRETIME`, `SET ... PXAT`) and nothing else, and the store's own
 * completion function on records its fast claims wrote. The gap between the last two is the
 * completion's Lua; the gap to a plain `SET` is what a compare-and-set in a function costs
 * (docs/benchmarks.md, "What bounds the figures"). Nothing here asserts a timing.
 */
import { randomBytes } from 'node:crypto'
import { Redis } from 'ioredis'
import { startRedisServer } from '../../redis-server.js'
import { ensureBuilt } from '../common.js'

ensureBuilt()
const core = (await import(
  new URL('../../../dist/src/index.js', import.meta.url).href
)) as typeof import('../../../src/index.js')
const { loadLibrary } = (await import(
  new URL('../../../dist/src/stores/redis/script-loader.js', import.meta.url).href
)) as typeof import('../../../src/stores/redis/script-loader.js')

const server = await startRedisServer()
const redis = new Redis(server.url)
try {
  await redis.call(
    'function',
    'load',
    `#!lua name=costs
redis.register_function('costs_empty', function(keys, args) return 1 end)
redis.register_function('costs_four_calls', function(keys, args)
  local raw = redis.call('GET', keys[1])
  local t = redis.call('TIME')
  local expiry = redis.call('PEXPIRETIME', keys[1])
  redis.call('SET', keys[1], args[1], 'PXAT', t[1] * 1000 + 60000)
  return { 'OK', 2 }
end)`,
  )
  const store = core.redisStore({ redis })
  await store.describe()
  const times = { leaseMs: 30_000, failureRetentionMs: 60_000, replayWindowMs: 86_400_000 }
  const response = Buffer.from(JSON.stringify({ status: 201, body: { id: 'ord_123', item: 'book', qty: 1 } }))
  const rounds = 300
  const batch = 32

  async function usecPerCall(
    command: string,
    send: (i: number) => Promise<unknown>,
    prepare?: (i: number) => Promise<void>,
  ) {
    let total = 0
    let calls = 0
    for (let round = 0; round < rounds; round++) {
      const ids = Array.from({ length: batch }, (_, j) => round * batch + j)
      if (prepare) await Promise.all(ids.map(prepare))
      await redis.config('RESETSTAT')
      await Promise.all(ids.map(send))
      const line = new RegExp(`cmdstat_${command}:calls=(\\d+),usec=(\\d+)`).exec(await redis.info('commandstats'))
      calls += Number(line?.[1] ?? 0)
      total += Number(line?.[2] ?? 0)
    }
    return total / calls
  }

  const value = Buffer.alloc(300, 65)
  const plain = await usecPerCall('set', (i) => redis.set(`plain:${i}`, value, 'PX', 60_000))
  const empty = await usecPerCall('fcall', (i) => redis.fcall('costs_empty', 1, `empty:${i}`))
  const four = await usecPerCall(
    'fcall',
    (i) => redis.fcall('costs_four_calls', 1, `four:${i}`, value),
    async (i) => {
      await redis.set(`four:${i}`, value, 'PX', 60_000)
    },
  )
  const owners = new Map<number, string>()
  const complete = loadLibrary().functions.complete
  const keyOf = (i: number) => `idemkit:idem:1:d1:POST /orders:${i}`
  const real = await usecPerCall(
    'fcall',
    (i) =>
      redis.fcall(complete, 1, keyOf(i), owners.get(i) as string, '1', '1', String(times.replayWindowMs), response),
    async (i) => {
      const owner = randomBytes(32).toString('hex')
      owners.set(i, owner)
      const claimed = await store.claim({
        key: keyOf(i),
        owner,
        fingerprint: `f1:${'a'.repeat(64)}`,
        operation: 'POST /orders',
        codec: 'json@1',
        policy: 'p1',
        start: true,
        expiredExecution: 'recover',
        ...times,
      })
      if (claimed.kind !== 'ACQUIRED') throw new Error(`claim answered ${claimed.kind}`)
    },
  )
  console.log(`Redis CPU per call (µs, INFO commandstats usec_per_call, ${rounds} × ${batch} calls):`)
  console.log(`  plain SET ... PX                          ${plain.toFixed(2)}`)
  console.log(`  empty function                            ${empty.toFixed(2)}`)
  console.log(`  function: GET, TIME, PEXPIRETIME, SET     ${four.toFixed(2)}`)
  console.log(`  the store's completion function           ${real.toFixed(2)}`)
} finally {
  redis.disconnect()
  await server.stop()
}
