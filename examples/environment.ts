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
  /** The Redis client behind the store, when REDIS_URL is set. */
  readonly redis: Redis | undefined
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
    // The README's client settings: every call bounded (a timed-out call is indeterminate and
    // reconciled), at most one retry, and no re-send after a reconnect behind the store's back.
    const connecting = new Redis(env.REDIS_URL, {
      commandTimeout: 2_000,
      maxRetriesPerRequest: 1,
      autoResendUnfulfilledCommands: false,
    })
    client = connecting
    await new Promise<void>((resolve, reject) => {
      connecting.once('ready', resolve)
      connecting.once('error', reject)
    })
    // Restarts, failovers and an evicting policy are logged as JSON lines, like the apps' own.
    const redis = redisStore({
      redis: connecting,
      onEvent: (event) =>
        process.stderr.write(
          `${JSON.stringify({ level: 40, time: Date.now(), idempotency: event, msg: event.message })}\n`,
        ),
    })
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
    redis: client,
    secret,
    warnings,
    async close() {
      await store.close()
      client?.disconnect()
    },
  }
}
