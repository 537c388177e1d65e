/**
 * What both example apps read from the environment: PORT (3000), HOST (127.0.0.1), REDIS_URL
 * (unset: the in-memory store, with a warning), IDEMPOTENCY_SECRET (unset: a development secret,
 * with a warning) and IDEMPOTENCY_LEASE_MS (the plugin's default, 30000).
 */
import { Redis } from 'ioredis'
import { type IdempotencyStore, memoryStore, redisStore } from '../src/index.js'

export interface ExampleEnvironment {
  readonly port: number
  readonly host: string
  readonly leaseMs: number | undefined
  readonly store: IdempotencyStore
  readonly secret: string
  /** Lines to log as warnings once the app's logger is up. */
  readonly warnings: readonly string[]
  /** Closes the store and the Redis client this module created. */
  close(): Promise<void>
}

export async function exampleEnvironment(env: NodeJS.ProcessEnv = process.env): Promise<ExampleEnvironment> {
  const warnings: string[] = []
  let client: Redis | undefined
  let store: IdempotencyStore
  if (env.REDIS_URL) {
    const connecting = new Redis(env.REDIS_URL, { commandTimeout: 2_000, maxRetriesPerRequest: 1 })
    client = connecting
    await new Promise<void>((resolve, reject) => {
      connecting.once('ready', resolve)
      connecting.once('error', reject)
    })
    const redis = redisStore({ redis: connecting })
    // Fail at startup, not at the first request, when Redis may evict records (maxmemory-policy).
    await redis.verify()
    store = redis
  } else {
    store = memoryStore()
    warnings.push('REDIS_URL is not set: using the in-memory store (one process only, lost on restart)')
  }
  let secret = env.IDEMPOTENCY_SECRET
  if (!secret) {
    secret = 'development-secret-do-not-use-in-production-0000'
    warnings.push('IDEMPOTENCY_SECRET is not set: using a development secret')
  }
  return {
    port: Number(env.PORT ?? 3000),
    host: env.HOST ?? '127.0.0.1',
    leaseMs: env.IDEMPOTENCY_LEASE_MS ? Number(env.IDEMPOTENCY_LEASE_MS) : undefined,
    store,
    secret,
    warnings,
    async close() {
      await store.close()
      client?.disconnect()
    },
  }
}
