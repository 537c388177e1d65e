/**
 * The fault suite's app children (test/faults/apps/fault-app.ts), each in its own process on a
 * free port and stopped by PID, plus the requests the faults send them and the store key of a
 * scope, so a test can look at the record in Redis directly.
 */

import type { Redis } from 'ioredis'
import { parseSecrets, scopeDigest } from '../../src/core/scope.js'
import { operationCode, storeKey } from '../../src/core/store-key.js'
import { decodeRecord, type StoredRecord } from '../../src/stores/record-layout.js'
import { type AppProcess, startAppProcess } from './app-process.js'
import { sleep } from './sleep.js'

export const FAULT_APP = 'test/faults/apps/fault-app.ts'
/** The same app on Hono (Redis only), for the faults that run on every adapter. */
export const HONO_FAULT_APP = 'test/faults/apps/hono-fault-app.ts'
/** The same app on NestJS (platform-express; Redis only). */
export const NEST_FAULT_APP = 'test/faults/apps/nest-fault-app.ts'
/** The fault apps by adapter, for `describe.each`. */
export const FAULT_APPS: readonly (readonly [adapter: string, script: string])[] = [
  ['fastify', FAULT_APP],
  ['hono', HONO_FAULT_APP],
  ['nest', NEST_FAULT_APP],
]
export const FAULT_SECRET = 'f'.repeat(32)
const SECRETS = parseSecrets({ current: 1, keys: { 1: FAULT_SECRET } })

export interface FaultAppEnv {
  readonly EXECUTION_LOG: string
  readonly REDIS_URL?: string
  readonly REDIS_CLUSTER?: string
  readonly [name: string]: string | undefined
}

/** Starts the fault app (`script`) with `env` (IDEMPOTENCY_SECRET defaults to FAULT_SECRET). */
export function startFaultApp(env: FaultAppEnv, script = FAULT_APP): Promise<AppProcess> {
  const defined = Object.fromEntries(Object.entries(env).filter(([, value]) => value !== undefined)) as Record<
    string,
    string
  >
  return startAppProcess(script, { IDEMPOTENCY_SECRET: FAULT_SECRET, ...defined })
}

export interface OrderBody {
  readonly item: string
  readonly qty: number
  readonly delayMs?: number
  readonly fail?: 'retryable' | 'unknown'
  readonly sink?: boolean
  readonly pad?: string
}

export interface Answer {
  readonly status: number
  readonly replayed: boolean
  readonly retryAfter: string | null
  readonly body: string
  /** The problem `code`, for the layer's own answers. */
  readonly code: string | undefined
  /** Set when no answer came before the deadline. */
  readonly timedOut?: boolean
}

export interface PostOptions {
  readonly user: string
  readonly key: string
  readonly body: OrderBody
  readonly path?: string
  /** Abort after this many ms: a request that hangs past its deadline shows as `timedOut`. */
  readonly deadlineMs?: number
}

/** POSTs an order and reads the answer. Never throws for an HTTP status. */
export async function post(baseUrl: string, options: PostOptions): Promise<Answer> {
  const { user, key, body, path = '/orders', deadlineMs = 30_000 } = options
  let response: Response
  try {
    response = await fetch(`${baseUrl}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${user}`, 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(deadlineMs),
    })
  } catch (error) {
    if ((error as Error).name === 'TimeoutError') {
      return { status: 0, replayed: false, retryAfter: null, body: '', code: undefined, timedOut: true }
    }
    throw error
  }
  const text = await response.text()
  let code: string | undefined
  if ((response.headers.get('content-type') ?? '').startsWith('application/problem+json')) {
    code = (JSON.parse(text) as { code?: string }).code
  }
  return {
    status: response.status,
    replayed: response.headers.get('idempotent-replayed') === 'true',
    retryAfter: response.headers.get('retry-after'),
    body: text,
    code,
  }
}

/** The Redis key of the fault app's record for (user, key) on `route`. */
export function recordKey(user: string, key: string, route = '/orders'): string {
  const operation = `POST ${route}`
  const digest = scopeDigest(SECRETS, 1, { principal: user, key, operation })
  return storeKey('idemkit', 1, operationCode(operation), digest)
}

/** The record under a store key, decoded (layout 2, or 3 with the key's expiry), or `undefined` when there is none. */
export async function readRecord(admin: Redis, key: string): Promise<StoredRecord | undefined> {
  const [raw, expireTime] = await Promise.all([admin.getBuffer(key), admin.pexpiretime(key)])
  return raw === null ? undefined : decodeRecord(raw, expireTime)
}

/** The store keys of this app's records look like this, and nothing else may be in Redis. */
export const RECORD_KEY_SHAPE = /^idemkit:idem:1:d1:[0-9a-f]{8}:[0-9a-f]{64}$/

/** Polls `check` every `everyMs` until it returns a value other than undefined, or throws after `timeoutMs`. */
export async function until<T>(
  what: string,
  check: () => T | undefined | Promise<T | undefined>,
  timeoutMs = 10_000,
  everyMs = 20,
): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await check()
    if (value !== undefined) return value
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await sleep(everyMs)
  }
}

/** Waits until the app's Redis client reports `ready` (after a restart of Redis). */
export function redisReady(app: AppProcess, timeoutMs = 15_000): Promise<true> {
  return until(
    'the app to reconnect to Redis',
    async () => {
      const response = await fetch(`${app.url}/_status`)
      const { redis } = (await response.json()) as { redis: string }
      return redis === 'ready' ? true : undefined
    },
    timeoutMs,
    50,
  )
}

/** For the fault tests that import it from here. */
export { sleep }
