/**
 * `npx tsx --expose-gc scripts/bench/studies/store-deadlines.ts`: whether a store call needs two
 * deadlines, the layer's (`storeCallTimeoutMs`, src/core/deadline.ts) and ioredis's
 * `commandTimeout`, and whether the layer's would be cheaper on one timer wheel.
 *
 * 1. **What ioredis holds for a stalled Redis.** A redis-server started here is paused
 *    (SIGSTOP, the TCP connection stays up) while a client sends 20,000 `SET`s of a 220-byte
 *    value (a claim record's size); after 4 s (past any store deadline): how many are still
 *    held, unsettled, and how much heap they keep; then SIGCONT. Once with the client the docs
 *    tell users to make (`commandTimeout: 2000`), once without it.
 * 2. **The layer's deadline, three ways**, in turns, 5 rounds of 300,000 calls in batches of 32:
 *    a settled promise alone, wrapped as `bounded()` wraps it (a promise, a `setTimeout`,
 *    cleared on the answer), and wrapped with the deadline in a bucket of a 50-ms timer wheel
 *    (one shared interval) instead of its own `setTimeout`: CPU µs per call.
 *
 * Nothing here asserts a timing: it prints figures.
 */
import { Redis } from 'ioredis'
import { bounded } from '../../../src/core/deadline.js'
import { startRedisServer } from '../../redis-server.js'
import { median } from '../common.js'

const HELD = 20_000
const PAUSE_MS = 4_000

const server = await startRedisServer()
try {
  for (const commandTimeout of [2000, undefined]) {
    const redis = new Redis(server.url, {
      commandTimeout,
      maxRetriesPerRequest: 1,
      // Without a timeout the store requires ioredis's default here.
      autoResendUnfulfilledCommands: commandTimeout === undefined,
    })
    redis.on('error', () => undefined)
    await redis.ping()
    globalThis.gc?.()
    const heap0 = process.memoryUsage().heapUsed
    process.kill(server.pid, 'SIGSTOP')
    let settled = 0
    let failed = ''
    const value = 'x'.repeat(220)
    for (let i = 0; i < HELD; i++)
      redis.set(`held:${i}`, value).then(
        () => settled++,
        (error: Error) => {
          settled++
          failed = error.message
        },
      )
    await new Promise((resolve) => setTimeout(resolve, PAUSE_MS))
    globalThis.gc?.()
    const heap = (process.memoryUsage().heapUsed - heap0) / 2 ** 20
    const held = HELD - settled
    process.kill(server.pid, 'SIGCONT')
    await redis.ping()
    console.log(
      `commandTimeout ${commandTimeout ?? 'unset'}: ${held} of ${HELD} SETs still held after ${PAUSE_MS} ms of a paused Redis, heap +${heap.toFixed(1)} MiB${failed === '' ? '' : ` (rejected: ${failed})`}` +
        (globalThis.gc === undefined ? ' (run with --expose-gc for a settled heap)' : ''),
    )
    redis.disconnect()
  }
} finally {
  await server.stop()
}

/** A 50-ms timer wheel: deadlines in buckets, one interval while any is armed. */
const TICK_MS = 50
const buckets = new Map<number, Set<() => void>>()
let ticker: NodeJS.Timeout | undefined
function tick(): void {
  const now = performance.now()
  for (const [bucket, fires] of buckets) {
    if (bucket * TICK_MS > now) continue
    buckets.delete(bucket)
    for (const fire of fires) fire()
  }
  if (buckets.size === 0 && ticker !== undefined) {
    clearInterval(ticker)
    ticker = undefined
  }
}
function wheeled<R>(timeoutMs: number, sent: Promise<R>): Promise<R> {
  return new Promise<R>((resolve, reject) => {
    const bucket = Math.ceil((performance.now() + timeoutMs) / TICK_MS)
    let fires = buckets.get(bucket)
    if (fires === undefined) {
      fires = new Set()
      buckets.set(bucket, fires)
    }
    const fire = () => reject(new Error('deadline'))
    fires.add(fire)
    ticker ??= setInterval(tick, TICK_MS).unref()
    const armed = fires
    sent.then(
      (value) => {
        armed.delete(fire)
        resolve(value)
      },
      (error: unknown) => {
        armed.delete(fire)
        reject(error)
      },
    )
  })
}

const ways: [string, (sent: Promise<number>) => Promise<number>][] = [
  ['the promise alone', (sent) => sent],
  ['bounded(): a setTimeout per call', (sent) => bounded('claim', 2_000, sent)],
  ['a 50-ms timer wheel', (sent) => wheeled(2_000, sent)],
]
const CALLS = 300_000
const perCall = new Map<string, number[]>()
for (let round = 0; round < 5; round++) {
  for (const [name, way] of ways) {
    const cpu0 = process.cpuUsage()
    let batch: Promise<number>[] = []
    for (let i = 0; i < CALLS; i++) {
      batch.push(way(Promise.resolve(i)))
      if (batch.length === 32) {
        await Promise.all(batch)
        batch = []
      }
    }
    await Promise.all(batch)
    const cpu = process.cpuUsage(cpu0)
    perCall.set(name, [...(perCall.get(name) ?? []), (cpu.user + cpu.system) / CALLS])
  }
}
console.log('\n| deadline | CPU µs per call, median (lowest-highest) of 5 rounds |')
console.log('| --- | ---: |')
for (const [name, runs] of perCall) {
  console.log(
    `| ${name} | ${median(runs).toFixed(2)} (${Math.min(...runs).toFixed(2)}-${Math.max(...runs).toFixed(2)}) |`,
  )
}
