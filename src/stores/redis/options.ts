/**
 * The Redis store's options, their defaults and their checks: `redisSettings()` turns what
 * `redisStore()` is given into the settings the other rooms of this folder read, or refuses it
 * (`ERR_IDEM_INVALID_OPTION`, naming the option and what it accepts).
 */
import type { Cluster, Redis } from 'ioredis'
import { ErrorCode, IdempotencyError, integerOption, invalidOption } from '../../core/errors.js'
import { checkKeyPrefix, checkOptionNames } from '../../core/store-front.js'
import { emitProcessWarning, type RedisStoreEvent, UnsafeEviction } from './server-check.js'

/** Options of `redisStore()`. */
export interface RedisStoreOptions {
  /**
   * The ioredis client: a `Redis` (standalone or Sentinel) or a `Cluster`. The store defines
   * its scripts on it and never quits it unless `closeClient` is true. Settings that matter:
   * `commandTimeout` (bounds a call; a timed-out call is indeterminate), `maxRetriesPerRequest`,
   * `autoResendUnfulfilledCommands` and the client's own `keyPrefix`, which ioredis puts in
   * front of this store's `keyPrefix`. `autoResendUnfulfilledCommands: false` only with a
   * `commandTimeout`: without one, ioredis drops the calls in flight at a disconnect without
   * ever rejecting them, and the store refuses such a client. (The layer bounds every call it
   * makes with its own `storeCallTimeoutMs` in any case.)
   */
  readonly redis: Redis | Cluster
  /**
   * First segment of every key (`<keyPrefix>:idem:...`): non-empty, no whitespace.
   * @default 'idemkit'
   */
  readonly keyPrefix?: string
  /**
   * Quit the client on `close()`. Leave false for a client shared with the rest of the app.
   * @default false
   */
  readonly closeClient?: boolean
  /**
   * When the client's `status` is not `'ready'`, throw `StoreUnavailableError` without sending,
   * so no call waits in ioredis's offline queue to land later, after the caller gave up on it.
   * A `lazyConnect` client must be connected (`await redis.connect()`) before use.
   * @default true
   */
  readonly failFast?: boolean
  /**
   * What to do when Redis may evict records before their TTL: any `maxmemory-policy` other than
   * `noeviction` (every record has a TTL, so `volatile-*` policies evict them too), or a server
   * that refuses INFO. `'refuse'`: every claim answers `StoreUnavailableError` (HTTP 503, nothing
   * runs; calls on records that exist go on) and `verify()` throws
   * `ERR_IDEM_STORE_MISCONFIGURED`, until the policy is fixed and the client reconnects or
   * `verify()` runs again. `'warn'`: run, and report it once through `onEvent`. The policy is
   * read with INFO on every (re)connection; the first claim waits for it.
   * @default 'refuse'
   */
  readonly unsafeEviction?: UnsafeEviction
  /**
   * Receives what the store finds out about its servers: `redis-restarted` (a new `run_id`:
   * Redis restarted or failed over, and records it had not persisted are lost) and
   * `unsafe-eviction-policy`. Pass your logger here, e.g.
   * `(event) => app.log.warn({ idempotency: event }, event.message)`. Must not throw.
   * @default a Node.js process warning (printed to stderr)
   */
  readonly onEvent?: (event: RedisStoreEvent) => void
  /**
   * Hold the client's socket writes back until the end of the current turn of the event loop
   * (`socket.cork()`, uncorked by `setImmediate`), so the calls of every request handled in one
   * turn leave in one write and Redis reads, runs and answers them together: fewer system calls
   * in both processes (docs/benchmarks.md). Anything else sent on the same client during that
   * turn waits with them, until the turn ends. No effect on a Cluster client.
   * @default true
   */
  readonly coalesceWrites?: boolean
  /**
   * Send the operations as FCALL of the store's Redis Functions library (loaded by the store,
   * FUNCTION LOAD), or, with false, as EVALSHA scripts. Where Redis refuses FUNCTION or FCALL
   * (an ACL user without them, a proxy that disables them) the store turns to scripts by
   * itself, once, and says so through `onEvent` and `describe()` (docs/design.md §6,
   * "Redis Functions").
   * @default true
   */
  readonly functions?: boolean
  /**
   * Complete an execution this store claimed with one command on the key instead of the
   * completion function: `SET key <the COMPLETED record> IFEQ <the claim's bytes> PX
   * <replayWindowMs - 1>` where the server has `SET ... IFEQ` (Valkey 8.1, Redis 8.4), else a
   * three-line compare-and-set script; anything the claimed bytes no longer match (a waiting
   * duplicate marked the record, a heartbeat renewed it, another holder took it over, the key
   * expired) goes to the completion function, which answers as without this option. The record
   * is written in layout 4, whose times count from the key's expiry: a build that reads no
   * layout 4 refuses it as corrupt (503, never a second run). Turn it on only once every instance
   * that shares the Redis runs a build that reads layout 4 (docs/upgrading.md, "Record layout
   * 4"; docs/design.md §6, "A one-command completion").
   * @default false
   */
  readonly oneCommandCompletion?: boolean
  /**
   * Makes a claim that starts an execution, and a completion, wait until `replicas` replicas
   * acknowledged them (Redis `WAIT replicas timeoutMs`, sent on the same connection right
   * behind the script, in the same write): a completion answered to a client then survives a
   * failover to one of those replicas, and so does the evidence that a handler ran. When fewer
   * acknowledge within `timeoutMs`: `onShortfall: 'fail'` (default) gives the claim back
   * (FAILED_RETRYABLE: nothing ran) and answers unavailable (HTTP 503); a completion counts as
   * not stored and is re-sent within the executor's `recordRetryMs`, then answers 503 (the
   * record on the master is COMPLETED: the retry replays it); `'warn'` goes on and reports a
   * `durability-shortfall` event. WAIT is not strong consistency: a replica that acknowledged
   * can still lose the write if it fails too, and Sentinel may promote a replica that did not
   * acknowledge (docs/durability.md). Not on a Cluster client (WAIT has no
   * key, so ioredis cannot send it on the script's connection): refused.
   * @default undefined (no WAIT)
   */
  readonly durability?: Durability
}

/** `RedisStoreOptions.durability`. */
export interface Durability {
  /** Replicas that must acknowledge, at least 1. */
  readonly replicas: number
  /**
   * How long WAIT waits for them, in milliseconds. Keep it well below the layer's
   * `storeCallTimeoutMs` (default 2000), which bounds the claim together with its WAIT.
   * @default 100
   */
  readonly timeoutMs?: number
  /** @default 'fail' */
  readonly onShortfall?: 'fail' | 'warn'
}

/** Durability, checked. */
export interface DurabilitySettings {
  readonly replicas: number
  readonly timeoutMs: number
  readonly fail: boolean
}

/** The options, checked and with their defaults. */
export interface RedisSettings {
  readonly redis: Redis | Cluster
  readonly keyPrefix: string
  readonly closeClient: boolean
  readonly failFast: boolean
  readonly unsafeEviction: UnsafeEviction
  readonly onEvent: (event: RedisStoreEvent) => void
  readonly coalesceWrites: boolean
  readonly durability: DurabilitySettings | undefined
  readonly functions: boolean
  readonly oneCommandCompletion: boolean
}

const DEFAULT_KEY_PREFIX = 'idemkit'
const KNOWN_OPTIONS: readonly string[] = [
  'redis',
  'keyPrefix',
  'closeClient',
  'failFast',
  'unsafeEviction',
  'onEvent',
  'coalesceWrites',
  'durability',
  'functions',
  'oneCommandCompletion',
]

/**
 * Checks `redisStore()`'s options and fills in their defaults.
 * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` for a missing client, an unknown option or
 *   a value out of range.
 */
export function redisSettings(options: RedisStoreOptions): RedisSettings {
  checkOptionNames(options, KNOWN_OPTIONS, 'redisStore options')
  const {
    redis,
    keyPrefix = DEFAULT_KEY_PREFIX,
    closeClient = false,
    failFast = true,
    unsafeEviction = UnsafeEviction.REFUSE,
    onEvent = emitProcessWarning,
    coalesceWrites = true,
    durability,
    functions = true,
    oneCommandCompletion = false,
  } = options
  if (typeof redis !== 'object' || redis === null || typeof redis.defineCommand !== 'function') {
    invalidOption('redis', 'an ioredis Redis or Cluster instance', redis)
  }
  checkKeyPrefix(keyPrefix)
  if (typeof closeClient !== 'boolean') invalidOption('closeClient', 'a boolean', closeClient)
  if (typeof failFast !== 'boolean') invalidOption('failFast', 'a boolean', failFast)
  if (unsafeEviction !== UnsafeEviction.REFUSE && unsafeEviction !== UnsafeEviction.WARN) {
    invalidOption('unsafeEviction', '"refuse" or "warn"', unsafeEviction)
  }
  if (typeof onEvent !== 'function') invalidOption('onEvent', 'a function (event) => void', onEvent)
  if (typeof coalesceWrites !== 'boolean') invalidOption('coalesceWrites', 'a boolean', coalesceWrites)
  if (typeof functions !== 'boolean') invalidOption('functions', 'a boolean', functions)
  if (typeof oneCommandCompletion !== 'boolean') {
    invalidOption('oneCommandCompletion', 'a boolean', oneCommandCompletion)
  }
  checkClientSettings(redis)
  return {
    redis,
    keyPrefix,
    closeClient,
    failFast,
    unsafeEviction,
    onEvent,
    coalesceWrites,
    durability: durability === undefined ? undefined : checkDurability(durability, redis),
    functions,
    oneCommandCompletion,
  }
}

/**
 * Refuses client settings under which a call can wait forever: with
 * `autoResendUnfulfilledCommands: false` ioredis drops the calls in flight at a disconnect
 * without rejecting them, so only a `commandTimeout` ends them.
 */
function checkClientSettings(redis: Redis | Cluster): void {
  const settings: { autoResendUnfulfilledCommands?: boolean; commandTimeout?: number } =
    (redis as Cluster).isCluster === true ? ((redis as Cluster).options.redisOptions ?? {}) : (redis as Redis).options
  if (settings.autoResendUnfulfilledCommands === false && !(Number(settings.commandTimeout) > 0)) {
    throw new IdempotencyError(
      ErrorCode.INVALID_OPTION,
      'The ioredis client has autoResendUnfulfilledCommands: false and no commandTimeout: a call in flight ' +
        'when the connection drops is never answered nor rejected, and the request would wait forever. ' +
        'Set commandTimeout (e.g. 2000), or leave autoResendUnfulfilledCommands at its default (true).',
    )
  }
}

function checkDurability(durability: Durability, redis: Redis | Cluster): DurabilitySettings {
  if (typeof durability !== 'object' || durability === null) {
    invalidOption('durability', '{ replicas, timeoutMs?, onShortfall? }', durability)
  }
  checkOptionNames(durability, ['replicas', 'timeoutMs', 'onShortfall'], 'durability', 'durability.')
  const { replicas, timeoutMs = 100, onShortfall = 'fail' } = durability
  integerOption('durability.replicas', replicas, 1, 100)
  integerOption('durability.timeoutMs', timeoutMs, 1, 60_000, 'milliseconds')
  if (onShortfall !== 'fail' && onShortfall !== 'warn') {
    invalidOption('durability.onShortfall', '"fail" or "warn"', onShortfall)
  }
  if (redis.isCluster) {
    invalidOption(
      'durability',
      'a standalone or Sentinel client: on a Cluster, WAIT has no key and cannot follow the script on its connection',
      'a Cluster client',
    )
  }
  return { replicas, timeoutMs, fail: onShortfall === 'fail' }
}
