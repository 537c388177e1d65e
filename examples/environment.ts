/**
 * What both example apps read from the environment: PORT (3000), HOST (127.0.0.1), the store
 * (REDIS_URL: Redis; else DATABASE_URL: PostgreSQL, its table migrated at startup; neither: the
 * in-memory store, with a warning), IDEMPOTENCY_SECRET (unset: a development secret, with a
 * warning), IDEMPOTENCY_LEASE_MS (the plugin's default, 30000), IDEMPOTENCY_WAIT_MS (unset: a
 * duplicate of a request still running answers 409 at once; set: it waits up to that long) and,
 * with Redis, IDEMPOTENCY_DURABILITY_REPLICAS (unset: no WAIT; set: claims and completions wait
 * for that many replicas).
 */
import { Redis } from 'ioredis'
import pg from 'pg'
import { type IdempotencyStore, memoryStore, postgresStore, redisStore } from '../src/index.js'

export interface ExampleEnvironment {
  readonly port: number
  readonly host: string
  readonly leaseMs: number | undefined
  /** IDEMPOTENCY_WAIT_MS: duplicates wait this long for the first request (unset: 409 at once). */
  readonly waitMs: number | undefined
  readonly store: IdempotencyStore
  /** The Redis client behind the store, when REDIS_URL is set. */
  readonly redis: Redis | undefined
  /** The PostgreSQL pool behind the store, when DATABASE_URL is set (and REDIS_URL is not). */
  readonly pool: pg.Pool | undefined
  readonly secret: string
  /** Lines to log as warnings once the app's logger is up. */
  readonly warnings: readonly string[]
  /** How to point the `idemkit` command at this app's store, to log once the app listens. */
  readonly cliHint: string
  /** Closes the store and the Redis client or PostgreSQL pool this module created. */
  close(): Promise<void>
}

/** The secret of an example started without IDEMPOTENCY_SECRET: for development only. */
export const DEVELOPMENT_SECRET = 'development-secret-do-not-use-in-production-0000'

/**
 * The startup line that tells how to run `idemkit inspect` against this app's store: the store
 * URL (its password, if any, left out) and the secret the app runs with. The in-memory store
 * lives in the app's process, where no command can read it.
 */
export function cliHint(env: NodeJS.ProcessEnv): string {
  const url = env.REDIS_URL || env.DATABASE_URL
  if (!url) {
    return 'idemkit command: the in-memory store lives in this process and cannot be inspected from outside; start with REDIS_URL or DATABASE_URL to use it'
  }
  // In a clone, npx does not run the package's own bin: the built file is run with node.
  const [note, secret] = env.IDEMPOTENCY_SECRET
    ? ['', 'IDEMPOTENCY_SECRET=<the secret this app runs with>']
    : ['; this app runs with the development secret', `IDEMPOTENCY_SECRET=${DEVELOPMENT_SECRET}`]
  return `idemkit command (after npm run build${note}): ${secret} node dist/src/admin/cli.js inspect --store ${withoutPassword(url)} --principal <name> --key <key> --operation 'POST /orders'`
}

function withoutPassword(url: string): string {
  try {
    const parsed = new URL(url)
    if (parsed.password === '') return url
    parsed.password = '<password>'
    return parsed.toString().replace('%3Cpassword%3E', '<password>')
  } catch {
    return '<the store URL>'
  }
}

/** A warning as a JSON line on stderr, like the apps' own log lines. */
function logWarning(message: string, fields: Record<string, unknown>): void {
  process.stderr.write(`${JSON.stringify({ level: 40, time: Date.now(), ...fields, msg: message })}\n`)
}

export async function exampleEnvironment(env: NodeJS.ProcessEnv = process.env): Promise<ExampleEnvironment> {
  const warnings: string[] = []
  let client: Redis | undefined
  let pool: pg.Pool | undefined
  let store: IdempotencyStore
  if (env.REDIS_URL) {
    // The client settings of docs/stores.md: every call bounded (a timed-out call is indeterminate and
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
    // IDEMPOTENCY_DURABILITY_REPLICAS: claims and completions wait for that many replicas (WAIT).
    const replicas = env.IDEMPOTENCY_DURABILITY_REPLICAS ? Number(env.IDEMPOTENCY_DURABILITY_REPLICAS) : undefined
    const redis = redisStore({
      redis: connecting,
      onEvent: (event) => logWarning(event.message, { idempotency: event }),
      durability: replicas ? { replicas } : undefined,
    })
    // Fail at startup, not at the first request, when Redis may evict records (maxmemory-policy).
    await redis.verify()
    store = redis
    if (env.DATABASE_URL) warnings.push('REDIS_URL and DATABASE_URL are both set: using Redis')
  } else if (env.DATABASE_URL) {
    // The pool settings of docs/postgresql.md: an 'error' listener (an idle connection that dies, e.g. when
    // PostgreSQL restarts, must not end the process), and a server-side statement_timeout a
    // little above the store's statementTimeoutMs (5000), so PostgreSQL also stops a statement
    // the store stopped waiting for.
    pool = new pg.Pool({ connectionString: env.DATABASE_URL, max: 10, statement_timeout: 6_000 })
    pool.on('error', (error) => logWarning(`PostgreSQL connection lost: ${error.message}`, {}))
    const postgres = postgresStore({
      pool,
      onEvent: (event) => logWarning(event.message, { idempotency: { type: event.type } }),
    })
    // Every instance may run it at startup: idempotent, one instance at a time.
    await postgres.migrate()
    store = postgres
  } else {
    store = memoryStore()
    warnings.push(
      'Neither REDIS_URL nor DATABASE_URL is set: using the in-memory store (one process only, lost on restart)',
    )
  }
  let secret = env.IDEMPOTENCY_SECRET
  if (!secret) {
    secret = DEVELOPMENT_SECRET
    warnings.push('IDEMPOTENCY_SECRET is not set: using a development secret')
  }
  return {
    port: Number(env.PORT ?? 3000),
    host: env.HOST ?? '127.0.0.1',
    leaseMs: env.IDEMPOTENCY_LEASE_MS ? Number(env.IDEMPOTENCY_LEASE_MS) : undefined,
    waitMs: env.IDEMPOTENCY_WAIT_MS ? Number(env.IDEMPOTENCY_WAIT_MS) : undefined,
    store,
    redis: client,
    pool,
    secret,
    warnings,
    cliHint: cliHint(env),
    async close() {
      await store.close()
      client?.disconnect()
      await pool?.end()
    },
  }
}
