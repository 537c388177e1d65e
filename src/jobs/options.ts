/**
 * Options of `idempotent()`, `idempotentBatch()` and the BullMQ processor: the plugin's names,
 * defaults and checks where they mean the same (store, secrets, the policy, `inFlight`, the store
 * call budgets), and what a function call brings in place of a request (`operation`, `key`,
 * `fingerprint`, `principal`, `codec`, `retryable`). Parsed once, when the function is wrapped.
 */
import type { Codec } from '../core/codec.js'
import { jsonCodec } from '../core/codec.js'
import { ErrorCode, IdempotencyError, integerOption, invalidOption } from '../core/errors.js'
import type { IdempotencyEvent } from '../core/outcomes.js'
import { expiredExecutionOption, omitUndefined, POLICY_KEYS, type Policy, resolvePolicy } from '../core/policy.js'
import type { ExpiredExecution } from '../core/record.js'
import { type ReplayCache, type ReplayCacheOptions, replayCacheOption } from '../core/replay-cache.js'
import { type Secrets, type SecretsInput, secretsOption } from '../core/scope.js'
import type { IdempotencyStore } from '../core/store.js'
import { checkOptionNames, storeOption } from '../core/store-front.js'
import { type AppTransactions, isAppTransactions, isTransactional } from '../core/store-transaction.js'
import { DEFAULTS } from '../http/options.js'
import { inFlightWait } from '../http/route-options.js'

/**
 * The principal every call shares unless `principal` says otherwise: one explicit, empty name
 * (the one the HTTP adapters' `anonymous: true` uses). Keys are then scoped by operation only.
 */
export const SHARED_PRINCIPAL = ''

/** Options of `idempotent(fn, options)`; `A` are the wrapped function's arguments, `R` its result. */
export interface IdempotentOptions<A extends readonly unknown[], R> {
  /** Where records live: `redisStore({ redis })`, `postgresStore({ pool })` or `memoryStore()`. Required. */
  readonly store: IdempotencyStore
  /** Versioned HMAC secrets for the scope digest, each at least 32 bytes, as the plugin takes them. Required. */
  readonly secrets: SecretsInput
  /**
   * The operation's name in the scope, e.g. `'charge-order'`: two functions that share it share
   * keys. Required (1 to 200 characters).
   */
  readonly operation: string
  /**
   * The idempotency key of one call: a function of the call's arguments, or a property path of
   * its first argument (`'id'`, `'data.orderId'`; the value a string or a finite number). Calls
   * with the same key run the function once. Required.
   */
  readonly key: ((...args: A) => string) | string
  /**
   * What must be the same for two calls with one key to be the same call: a function of the
   * arguments whose value is canonicalised as JSON (RFC 8785) and hashed. A call whose
   * fingerprint differs from the first call's throws `IdempotencyKeyReusedError`.
   * @default the arguments, canonicalised
   */
  readonly fingerprint?: (...args: A) => unknown
  /**
   * Who owns the key: a name, or a function of the arguments (a tenant, an account). Two
   * principals never share a key.
   * @default SHARED_PRINCIPAL: one principal for every call
   */
  readonly principal?: string | ((...args: A) => string)
  /** @default 30000 */
  readonly leaseMs?: number
  /** @default 86400000 (24 h) */
  readonly replayWindowMs?: number
  /** @default 86400000 (24 h) */
  readonly failureRetentionMs?: number
  /** @default 'recover' */
  readonly expiredExecution?: ExpiredExecution
  /**
   * For a function whose external effects all go through derived keys (`keyFor(name)` of its
   * context, as the downstream call's idempotency key) and whose local writes go through its
   * transaction: a call after a crash (once the lease ran out), a lost lease, or an error that
   * is not retryable (at once) runs it again with the next fencing token instead of throwing
   * `IdempotencyRecoveryRequiredError`; `keyFor` gives the same keys. Same as
   * `expiredExecution: 'resume'`.
   * @default false
   */
  readonly resume?: boolean
  /** @default '1' */
  readonly policyRevision?: string
  /**
   * A call whose key's first call is still running: `'reject'` throws
   * `IdempotencyInProgressError` at once; `{ waitMs }` waits up to `waitMs` for the first call's
   * outcome, then answers as a later call would.
   * @default 'reject'
   */
  readonly inFlight?: 'reject' | { readonly waitMs: number; readonly maxWaiters?: number }
  /** The `retryAfterMs` of `IdempotencyInProgressError`; unset: the operation's recent typical run. */
  readonly inProgressRetryAfterMs?: number
  /**
   * How results are stored and replayed.
   * @default jsonCodec(): JSON, with `undefined` (a function returning nothing) kept as such
   */
  readonly codec?: Codec<R>
  /**
   * Runs the function in a transaction of the store's (PostgreSQL): it writes through
   * `context.db`, and its writes commit with the stored result, or not at all. An ORM's adapter
   * (`idemkit/drizzle`, `idemkit/kysely`, `idemkit/knex`, `idemkit/typeorm`) in place of `true`
   * opens the ORM's own transaction, as on a route: the function writes through the ORM's
   * transaction object, `adapter.tx(context)` (typed), and the rest is the same.
   * @default false
   */
  // biome-ignore lint/suspicious/noExplicitAny: any ORM's transaction object
  readonly transaction?: boolean | AppTransactions<any>
  /**
   * Which errors the function throws mean "no effect": the key is then free for the next call
   * (FAILED_RETRYABLE). Any other error leaves the effect unknown: later calls with the key throw
   * `IdempotencyRecoveryRequiredError`.
   * @default (error) => error.retryable === true
   */
  readonly retryable?: (error: unknown) => boolean
  /** @default 1000 */
  readonly unavailableRetryAfterMs?: number
  /** @default 5000 */
  readonly recordRetryMs?: number
  /** @default 3000 */
  readonly claimTimeoutMs?: number
  /** @default 2000 */
  readonly storeCallTimeoutMs?: number
  /** Receives every event of every call (see docs/observability.md). Must not throw. */
  readonly onEvent?: (event: IdempotencyEvent) => void
  /**
   * Completed results kept in this process, so a later call with the same key and arguments is
   * answered without a store call: `true` (1000 results, 8 MiB, 5 s), `{ maxEntries, maxBytes,
   * maxAgeMs }` or a `ReplayCache` to share. An operator's change to a completed record is seen
   * after at most `maxAgeMs` (docs/options.md "Replay cache").
   * @default false
   */
  readonly replayCache?: boolean | ReplayCacheOptions | ReplayCache
}

/** The options parsed once: what every call of the wrapped function reuses. */
export interface ResolvedIdempotent<A extends readonly unknown[], R> {
  readonly store: IdempotencyStore
  readonly secrets: Secrets
  readonly operation: string
  readonly key: (args: A) => string
  readonly fingerprint: ((...args: A) => unknown) | undefined
  readonly principal: (args: A) => string
  readonly policy: Policy
  readonly codec: Codec<R>
  /** `true`, `false`, or an ORM's adapter (the transaction port, as a route's `transaction`). */
  // biome-ignore lint/suspicious/noExplicitAny: any ORM's transaction object
  readonly transaction: boolean | AppTransactions<any>
  readonly retryable: (error: unknown) => boolean
  readonly inFlightWaitMs: number
  readonly inFlightMaxWaiters: number
  readonly inProgressRetryAfterMs: number | undefined
  readonly unavailableRetryAfterMs: number
  readonly recordRetryMs: number
  readonly claimTimeoutMs: number
  readonly storeCallTimeoutMs: number
  readonly onEvent: ((event: IdempotencyEvent) => void) | undefined
  readonly replayCache: ReplayCache | undefined
}

/**
 * Every option `idempotent()` accepts (the helpers add their own). A policy option the executor
 * gains is added to `POLICY_KEYS` (core/policy.ts, which the plugin's route options share), to
 * `ResolvedIdempotent` and to the executor's settings in call.ts, and to docs/options.md.
 */
export const IDEMPOTENT_OPTIONS = [
  'store',
  'secrets',
  'operation',
  'key',
  'fingerprint',
  'principal',
  ...POLICY_KEYS,
  'inFlight',
  'inProgressRetryAfterMs',
  'codec',
  'transaction',
  'retryable',
  'unavailableRetryAfterMs',
  'recordRetryMs',
  'claimTimeoutMs',
  'storeCallTimeoutMs',
  'onEvent',
  'replayCache',
] as const

/** The longest key a call may have: a key is a name, not a payload (the store keeps only its digest). */
export const MAX_KEY_LENGTH = 1024

/**
 * Parses the options of one wrapped function.
 * @param known the option names accepted (`IDEMPOTENT_OPTIONS` and a helper's own).
 * @param keyFallback the key when the options give none (the BullMQ processor's `job.id`).
 * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` naming the option, or `ERR_IDEM_INVALID_SECRET`.
 */
export function parseIdempotentOptions<A extends readonly unknown[], R>(
  input: IdempotentOptions<A, R>,
  known: readonly string[] = IDEMPOTENT_OPTIONS,
  keyFallback?: (args: A) => string,
): ResolvedIdempotent<A, R> {
  if (input === null || typeof input !== 'object') invalidOption('options', 'an object', input)
  checkOptionNames(input, known, 'options')
  const store = storeOption(input.store)
  const secrets = secretsOption(input.secrets)
  const operation = input.operation
  if (typeof operation !== 'string' || operation.length === 0 || operation.length > 200) {
    invalidOption(
      'operation',
      "a non-empty string of at most 200 characters naming what the function does, e.g. 'charge-order'",
      operation,
    )
  }
  const key = keyOption(input.key, operation, keyFallback)
  if (input.fingerprint !== undefined && typeof input.fingerprint !== 'function') {
    invalidOption(
      'fingerprint',
      'a function (...args) => unknown, whose value is compared as canonical JSON',
      input.fingerprint,
    )
  }
  const principal = principalOption(input.principal, operation)
  const options = omitUndefined(input)
  const policy = resolvePolicy({
    leaseMs: options.leaseMs,
    replayWindowMs: options.replayWindowMs,
    failureRetentionMs: options.failureRetentionMs,
    expiredExecution: expiredExecutionOption(options.resume, options.expiredExecution, undefined),
    revision: options.policyRevision,
  })
  const codec = input.codec ?? jsonCodec<R>()
  if (
    codec === null ||
    typeof codec !== 'object' ||
    typeof codec.id !== 'string' ||
    codec.id.length === 0 ||
    typeof codec.encode !== 'function' ||
    typeof codec.decode !== 'function'
  ) {
    invalidOption('codec', 'a codec { id, encode(value), decode(bytes, codecId) }, such as jsonCodec()', codec)
  }
  const transaction = input.transaction ?? false
  if (typeof transaction !== 'boolean' && !isAppTransactions(transaction)) {
    invalidOption('transaction', 'a boolean or an ORM adapter (idemkit/drizzle, idemkit/kysely, ...)', transaction)
  }
  if (transaction !== false && !isTransactional(store)) {
    invalidOption(
      'transaction',
      `false: the ${store.name} store does not run transactions (the PostgreSQL store does)`,
      true,
    )
  }
  const retryable = input.retryable ?? markedRetryable
  if (typeof retryable !== 'function') invalidOption('retryable', 'a function (error) => boolean', retryable)
  const inFlight = inFlightWait(input.inFlight ?? 'reject', '')
  const inProgressRetryAfterMs =
    input.inProgressRetryAfterMs === undefined
      ? undefined
      : integerOption('inProgressRetryAfterMs', input.inProgressRetryAfterMs, 1, 86_400_000, 'milliseconds')
  const unavailableRetryAfterMs = milliseconds(input, 'unavailableRetryAfterMs', 1)
  const recordRetryMs = milliseconds(input, 'recordRetryMs', 0, 60_000)
  const claimTimeoutMs = milliseconds(input, 'claimTimeoutMs', 1, 60_000)
  const storeCallTimeoutMs = milliseconds(input, 'storeCallTimeoutMs', 1, 60_000)
  if (input.onEvent !== undefined && typeof input.onEvent !== 'function') {
    invalidOption('onEvent', 'a function (event) => void', input.onEvent)
  }
  return Object.freeze({
    store,
    secrets,
    operation,
    key,
    fingerprint: input.fingerprint,
    principal,
    policy,
    codec,
    transaction,
    retryable,
    inFlightWaitMs: inFlight.waitMs,
    inFlightMaxWaiters: inFlight.maxWaiters,
    inProgressRetryAfterMs,
    unavailableRetryAfterMs,
    recordRetryMs,
    claimTimeoutMs,
    storeCallTimeoutMs,
    onEvent: input.onEvent,
    replayCache: replayCacheOption(input.replayCache),
  })
}

/** The default `retryable`: an error that says so itself (`retryable: true`), as over HTTP. */
function markedRetryable(error: unknown): boolean {
  return typeof error === 'object' && error !== null && (error as { retryable?: unknown }).retryable === true
}

type Timing = 'unavailableRetryAfterMs' | 'recordRetryMs' | 'claimTimeoutMs' | 'storeCallTimeoutMs'

function milliseconds(input: Partial<Record<Timing, unknown>>, name: Timing, min: number, max?: number): number {
  return integerOption(name, input[name] ?? DEFAULTS[name], min, max, 'milliseconds')
}

function keyOption<A extends readonly unknown[]>(
  key: unknown,
  operation: string,
  fallback: ((args: A) => string) | undefined,
): (args: A) => string {
  if (key === undefined && fallback !== undefined) return fallback
  if (typeof key === 'function') {
    const of = key as (...args: A) => unknown
    return (args) => checkedKey(of(...args), operation, 'the key function returned')
  }
  if (typeof key === 'string' && /^[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*$/.test(key)) {
    const path = key.split('.')
    return (args) => checkedKey(propertyAt(args[0], path), operation, `the key path "${key}" found`)
  }
  return invalidOption(
    'key',
    "a function (...args) => string, or a property path of the first argument such as 'id' or 'data.orderId'",
    key,
  )
}

/** The value at `path` in `value`, or `undefined` where a step is missing. */
function propertyAt(value: unknown, path: readonly string[]): unknown {
  let at = value
  for (const name of path) {
    if (at === null || (typeof at !== 'object' && typeof at !== 'function')) return undefined
    at = (at as Record<string, unknown>)[name]
  }
  return at
}

/** A call's key: a non-empty string of at most `MAX_KEY_LENGTH` characters (a finite number is made one). */
export function checkedKey(found: unknown, operation: string, what: string): string {
  const key = typeof found === 'number' && Number.isFinite(found) ? String(found) : found
  if (typeof key === 'string' && key.length > 0 && key.length <= MAX_KEY_LENGTH) return key
  return invalidArgument(
    `The idempotency key of a call of "${operation}" must be a non-empty string of at most ${MAX_KEY_LENGTH} characters; ${what} ${describeKey(key)}. Check the "key" option.`,
  )
}

function describeKey(value: unknown): string {
  if (typeof value === 'string')
    return value.length === 0 ? 'an empty string' : `a string of ${value.length} characters`
  if (value === null || value === undefined) return String(value)
  return `a value of type ${typeof value}`
}

function principalOption<A extends readonly unknown[]>(principal: unknown, operation: string): (args: A) => string {
  if (principal === undefined) return () => SHARED_PRINCIPAL
  if (typeof principal === 'string') return () => principal
  if (typeof principal === 'function') {
    const of = principal as (...args: A) => unknown
    return (args) => {
      const found = of(...args)
      if (typeof found === 'string') return found
      return invalidArgument(
        `The principal of a call of "${operation}" must be a string; the principal function returned ${found === null ? 'null' : typeof found}.`,
      )
    }
  }
  return invalidOption('principal', 'a string, or a function (...args) => string', principal)
}

function invalidArgument(message: string): never {
  throw new IdempotencyError(ErrorCode.INVALID_ARGUMENT, message)
}
