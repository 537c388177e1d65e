// A BullMQ worker as an ES module in plain JavaScript, the BullMQ block of docs/jobs.md without
// its types: nothing installed but idemkit, bullmq and ioredis. The same order is added twice
// as two jobs; it prints both results and `charged <n> time(s)`, and exits 0 only when the
// handler ran once and both jobs completed with its result.
import { randomUUID } from 'node:crypto'
import { Queue, QueueEvents, Worker } from 'bullmq'
import { idempotentProcessor } from 'idemkit/bullmq'
import { redisStore } from 'idemkit/core'
import { Redis } from 'ioredis'

const url = new URL(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379')
// BullMQ's connections: it needs maxRetriesPerRequest: null and makes its own clients from this.
const connection = { host: url.hostname, port: Number(url.port || 6379), maxRetriesPerRequest: null }
// The store's client: every call bounded, one retry, no re-send behind the store's back.
const redis = new Redis(url.href, {
  commandTimeout: 2000,
  maxRetriesPerRequest: 1,
  autoResendUnfulfilledCommands: false,
})
const store = redisStore({ redis })
await store.verify()

let charges = 0
const worker = new Worker(
  'payments',
  idempotentProcessor(
    async (job, { fencingToken, signal }) => {
      signal.throwIfAborted()
      charges += 1
      return { chargeId: `ch-${job.data.orderId}-${fencingToken}` }
    },
    {
      store,
      secrets: { current: 1, keys: { 1: process.env.IDEMPOTENCY_SECRET } },
      operation: 'charge-order',
      key: 'data.orderId',
    },
  ),
  { connection },
)

const queue = new Queue('payments', { connection })
const events = new QueueEvents('payments', { connection })
await events.waitUntilReady()
const orderId = randomUUID()
const first = await queue.add('charge', { orderId, amount: 100 })
const again = await queue.add('charge', { orderId, amount: 100 })
const results = [await first.waitUntilFinished(events), await again.waitUntilFinished(events)]
console.log(results, `charged ${charges} time(s)`)

await Promise.all([worker.close(), queue.close(), events.close()])
await store.close()
redis.disconnect()
if (charges !== 1 || results[0].chargeId !== results[1].chargeId) process.exit(1)
