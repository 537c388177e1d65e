/** The Redis store's public surface. */
import type { RedisStoreOptions } from './options.js'
import { RedisStore } from './redis-store.js'

export { redisFault } from './faults.js'
export type { RedisStoreOptions } from './options.js'
export { RedisStore } from './redis-store.js'
export { type RedisServerReport, type RedisStoreEvent, UnsafeEviction } from './server-check.js'

/**
 * Creates the Redis store (docs/design.md §6) on an ioredis `Redis` or `Cluster` client.
 * @param options the client and the store's settings; see `RedisStoreOptions`.
 * @returns an `IdempotencyStore` backed by Lua scripts, one key per scope.
 * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` for a missing client, an unknown option or
 *   an invalid `keyPrefix`; `ERR_IDEM_SCRIPT_LOAD` when the scripts cannot be loaded.
 * @example
 * const store = redisStore({ redis: new Redis(process.env.REDIS_URL) })
 */
export function redisStore(options: RedisStoreOptions): RedisStore {
  return new RedisStore(options)
}
