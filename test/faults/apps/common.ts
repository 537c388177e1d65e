/**
 * What the fault apps on every framework share (fault-app.ts on Fastify, hono-fault-app.ts,
 * nest-fault-app.ts): the environment, the execution log, the order body and the handler's
 * work, the Redis store made from REDIS_URL, REDIS_CLUSTER or REDIS_SENTINELS, and the
 * idempotency options read from IDEMPOTENCY_*.
 */
import { randomUUID } from 'node:crypto'
import { appendFileSync } from 'node:fs'
import { Cluster, Redis } from 'ioredis'
import { type RedisStore, type RedisStoreEvent, redisStore } from '../../../src/stores/redis/index.js'
import { sleep } from '../../helpers/sleep.js'

export const env = process.env
const executionLog = env.EXECUTION_LOG
if (!executionLog) throw new Error('EXECUTION_LOG is required')

export const optionalNumber = (value: string | undefined) => (value ? Number(value) : undefined)

/** Appends one JSON line to EXECUTION_LOG: the count kept outside the system under test. */
export function record(line: object): void {
  appendFileSync(executionLog as string, `${JSON.stringify(line)}\n`)
}

export interface OrderBody {
  item: string
  qty: number
  delayMs?: number
  fail?: 'retryable' | 'unknown'
  sink?: boolean
  pad?: string
}

export class RetryableError extends Error {
  readonly statusCode = 503
  readonly retryable = true
}

/** `{ item, qty, delayMs?, fail?, pad? }`, as the Fastify app's schema checks it. */
export function isOrder(body: unknown): body is OrderBody {
  if (typeof body !== 'object' || body === null) return false
  const { item, qty, delayMs, fail, ...rest } = body as Record<string, unknown>
  return (
    Object.keys(rest).every((name) => name === 'pad') &&
    typeof item === 'string' &&
    Number.isSafeInteger(qty) &&
    (delayMs === undefined || (Number.isSafeInteger(delayMs) && (delayMs as number) <= 30_000)) &&
    (fail === undefined || fail === 'retryable' || fail === 'unknown')
  )
}

/** Who ran an order: the execution line's fields. */
export interface Execution {
  readonly route: string
  readonly key: string | string[] | undefined
  readonly case?: string | string[] | undefined
  readonly user: string | null | undefined
  readonly token: number
}

/** The execution line, written before the handler does anything else. */
export function recordExecution(execution: Execution): void {
  record({ type: 'execution', ...execution, pid: process.pid })
}

/** The handler's wait: `delayMs` plus this process's EXTRA_DELAY_MS. */
export async function orderDelay(body: OrderBody): Promise<void> {
  const delay = (body.delayMs ?? 0) + Number(env.EXTRA_DELAY_MS ?? 0)
  if (delay > 0) await sleep(delay)
}

/** The handler's outcome: the failure asked for, or the created order (`pad` comes back in it). */
export function orderOutcome(body: OrderBody, token: number): Record<string, unknown> {
  if (body.fail === 'retryable') throw new RetryableError('busy; nothing was done')
  if (body.fail === 'unknown') throw new Error('failed; the effect is unknown')
  // `pad` comes back in the answer, so the stored record is as large as the test needs.
  const { item, qty, pad } = body
  return { id: randomUUID(), item, qty, token, pid: process.pid, ...(pad ? { pad } : {}) }
}

/** A whole order: the execution line, the wait, then the outcome. */
export async function placeOrder(body: OrderBody, execution: Execution): Promise<Record<string, unknown>> {
  recordExecution(execution)
  await orderDelay(body)
  return orderOutcome(body, execution.token)
}

function addresses(list: string): { host: string; port: number }[] {
  return list.split(',').map((address) => {
    const [host, port] = address.split(':')
    return { host: host as string, port: Number(port) }
  })
}

/**
 * The Redis store with the README's client settings, on REDIS_CLUSTER (host:port,...), on
 * REDIS_SENTINELS (host:port,..., master REDIS_SENTINEL_NAME) or on REDIS_URL; the client ready
 * and, unless VERIFY_AT_STARTUP is '0', the server checked. UNSAFE_EVICTION, and
 * IDEMPOTENCY_DURABILITY_REPLICAS / _TIMEOUT_MS for `durability`; IDEMPOTENCY_ONE_COMMAND_COMPLETION=1 for
 * `oneCommandCompletion`.
 */
export async function redisFromEnv(
  onEvent: (event: RedisStoreEvent) => void,
): Promise<{ readonly redis: Redis | Cluster; readonly store: RedisStore }> {
  const clientOptions = {
    commandTimeout: Number(env.REDIS_COMMAND_TIMEOUT_MS ?? 2_000),
    maxRetriesPerRequest: 1,
    autoResendUnfulfilledCommands: false,
  }
  const redis = env.REDIS_CLUSTER
    ? new Cluster(addresses(env.REDIS_CLUSTER), { redisOptions: clientOptions, enableOfflineQueue: true })
    : env.REDIS_SENTINELS
      ? new Redis({
          ...clientOptions,
          name: env.REDIS_SENTINEL_NAME ?? 'idemkit',
          sentinels: addresses(env.REDIS_SENTINELS),
        })
      : new Redis(env.REDIS_URL as string, clientOptions)
  redis.on('error', () => {})
  await new Promise<void>((resolve, reject) => {
    redis.once('ready', resolve)
    setTimeout(() => reject(new Error('Redis did not become ready within 20 s')), 20_000).unref()
  })
  const store = redisStore({
    redis,
    unsafeEviction: env.UNSAFE_EVICTION === 'warn' ? 'warn' : 'refuse',
    onEvent,
    durability: env.IDEMPOTENCY_DURABILITY_REPLICAS
      ? {
          replicas: Number(env.IDEMPOTENCY_DURABILITY_REPLICAS),
          timeoutMs: optionalNumber(env.IDEMPOTENCY_DURABILITY_TIMEOUT_MS),
        }
      : undefined,
    oneCommandCompletion: env.IDEMPOTENCY_ONE_COMMAND_COMPLETION === '1',
  })
  if (env.VERIFY_AT_STARTUP !== '0') await store.verify()
  return { redis, store }
}

/**
 * The idempotency options every fault app takes from its environment: the secret and
 * IDEMPOTENCY_LEASE_MS, _FAILURE_RETENTION_MS, _CLAIM_TIMEOUT_MS and _WAIT_MS.
 */
export function idempotencyOptionsFromEnv() {
  return {
    secrets: { current: 1, keys: { 1: env.IDEMPOTENCY_SECRET as string } },
    leaseMs: optionalNumber(env.IDEMPOTENCY_LEASE_MS),
    failureRetentionMs: optionalNumber(env.IDEMPOTENCY_FAILURE_RETENTION_MS),
    claimTimeoutMs: optionalNumber(env.IDEMPOTENCY_CLAIM_TIMEOUT_MS),
    inFlight: env.IDEMPOTENCY_WAIT_MS ? { waitMs: Number(env.IDEMPOTENCY_WAIT_MS) } : undefined,
  }
}
