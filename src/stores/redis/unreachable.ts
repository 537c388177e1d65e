/**
 * `verify()` on a Redis it cannot reach: the error says so, with where the client points and
 * the last connection error, instead of calling the failed check "indeterminate" (a check
 * writes nothing, so there is no record to inspect).
 */
import type { Cluster, Redis } from 'ioredis'
import { type IdempotencyError, StoreUnavailableError } from '../../core/errors.js'
import { redisEndpoint } from './endpoint.js'

/** Keeps the client's connection errors while a check runs; `stop()` removes the listener. */
export function connectionErrors(client: Redis | Cluster): { last(): unknown; stop(): void } {
  let last: unknown
  const listener = (error: unknown) => {
    last = error
  }
  client.on('error', listener)
  return {
    last: () => last,
    stop: () => void client.off('error', listener),
  }
}

/**
 * Waits for a client still connecting to be up (true) or to fail (false: its `error` event, which
 * `connectionErrors` keeps, or its end), at most `connectTimeout` (10 s by default). A client
 * with `enableOfflineQueue: false` refuses a command at once while it connects ("Stream isn't
 * writeable"), before the connection's own error says why. False at once for a client that is
 * up or ended: a failure then is not the connection's.
 */
export function connects(client: Redis | Cluster): Promise<boolean> {
  if (client.status === 'ready' || client.status === 'end') return Promise.resolve(false)
  const options = (client as Redis).options as { connectTimeout?: number } | undefined
  const waitMs = Math.min(options?.connectTimeout ?? 10_000, 10_000)
  return new Promise((resolve) => {
    const done = (up: boolean) => () => {
      clearTimeout(timer)
      client.off('ready', ready)
      client.off('error', failed)
      client.off('end', failed)
      resolve(up)
    }
    const ready = done(true)
    const failed = done(false)
    const timer = setTimeout(failed, waitMs)
    client.once('ready', ready)
    client.once('error', failed)
    client.once('end', failed)
  })
}

/** `host:port/db` of the client, as the CLI names it (`sentinel:<name>/db`, `cluster`). */
export function redisWhere(client: Redis | Cluster): string {
  if ((client as Cluster).isCluster === true) return 'redis cluster'
  const options = (client as Redis).options
  const db = String(options.db ?? 0)
  if (options.sentinels !== undefined && options.sentinels !== null && options.sentinels.length > 0) {
    return `redis sentinel:${options.name ?? 'mymaster'}/${db}`
  }
  const endpoint = redisEndpoint(client)
  const at = endpoint?.port === undefined ? String(endpoint?.address) : `${endpoint.address}:${endpoint.port}`
  return `redis ${at}/${db}`
}

/**
 * The error `verify()` throws when its check failed while the client was not connected:
 * `ERR_IDEM_STORE_UNAVAILABLE`, "cannot connect to redis 127.0.0.1:6390/0: connect
 * ECONNREFUSED 127.0.0.1:6390", and the fix. `undefined` when the client is connected (the
 * failure is then the check's own).
 */
export function unreachable(
  client: Redis | Cluster,
  error: unknown,
  lastConnectionError: unknown,
): IdempotencyError | undefined {
  if (client.status === 'ready') return undefined
  const cause = lastConnectionError ?? error
  const reason = cause instanceof Error ? cause.message : String(cause)
  return new StoreUnavailableError(
    `cannot connect to ${redisWhere(client)}: ${reason} (client ${client.status}). ` +
      'Check that Redis runs there and that the client has the right host, port, TLS and password.',
    { cause },
  )
}
