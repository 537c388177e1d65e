/**
 * Options of the Fastify plugin and the Express middleware (the same names, defaults and
 * validation for both). Parsed once into a frozen object; `undefined` means "use the default";
 * unknown keys and bad values throw `ERR_IDEM_INVALID_OPTION` naming the option.
 */

import { invalidOption } from '../core/errors.js'
import { DEFAULT_MAX_WAITERS } from '../core/in-flight.js'
import type { Classification, IdempotencyEvent } from '../core/outcomes.js'
import { DEFAULT_POLICY, omitUndefined, type Policy, resolvePolicy } from '../core/policy.js'
import type { ExpiredExecution } from '../core/record.js'
import { parseSecrets, type Secrets, type SecretsInput } from '../core/scope.js'
import { type IdempotencyStore, isTransactional } from '../core/store.js'
import { checkOptionNames } from '../core/store-front.js'
import { classifyResponse } from './classify.js'
import { type CapturedResponse, DEFAULT_STORED_HEADERS, NEVER_STORED_HEADERS } from './response-codec.js'

/** Per-route settings; every one may also be given plugin-wide as a default. */
export interface RouteOptions<Request> {
  /**
   * Whether a request without `Idempotency-Key` is refused (400) or passes through unprotected.
   * @default true
   */
  required?: boolean
  /**
   * How long one execution holds its key, in milliseconds (an integer from 30). The lease is
   * renewed every third of it while the handler runs; if the process dies, the key is held
   * until the lease runs out, and a retry then does what `expiredExecution` says.
   * @default 30000
   */
  leaseMs?: number
  /**
   * How long a completed answer is kept and replayed to retries with the same key, in
   * milliseconds. Past it the key is new again: a retry runs the handler once more.
   * @default 86400000 (24 h)
   */
  replayWindowMs?: number
  /**
   * How long a failed or abandoned execution's record is kept (FAILED_RETRYABLE, ABANDONED),
   * in milliseconds: retries within it see the failure (a run of their own, or 503
   * recovery-required) instead of a fresh key.
   * @default 86400000 (24 h)
   */
  failureRetentionMs?: number
  /**
   * What a retry does once an execution's lease ran out without an outcome: `recover` answers
   * 503 recovery-required (the effect may have happened); `takeover` runs again.
   * @default 'recover'
   */
  expiredExecution?: ExpiredExecution
  /**
   * Stored with every record; bump it to stop replaying records written under the old policy.
   * @default '1'
   */
  policyRevision?: string
  /**
   * The operation's name in the scope. Routes that share a name share scopes.
   * @default 'METHOD /route/pattern', e.g. 'POST /accounts/:id/deposits'
   */
  operation?: string
  /**
   * Replaces the request fingerprint (method, path, query, content type, body): a retry whose
   * fingerprint differs from the first request's is refused with 422.
   */
  fingerprint?: (request: Request) => string | Promise<string>
  /**
   * Extra response headers to store and replay (lowercase), beside the defaults; set-cookie
   * and date never are.
   */
  storedHeaders?: readonly string[]
  /**
   * Largest response body stored, in bytes. A larger response is sent once but not stored:
   * the record is marked ABANDONED and retries answer 503 recovery-required.
   * @default 1048576 (1 MiB)
   */
  maxResponseBytes?: number
  /**
   * Replaces the default response classification: which answers are stored and replayed,
   * which are failures a retry may run again, and which leave the effect unknown
   * (docs/design.md §4).
   */
  classify?: (response: CapturedResponse) => Classification
  /**
   * Runs the handler in a transaction of the store's (the PostgreSQL store only; refused when
   * the route is added otherwise). The handler writes through `idempotency.db`, a connection
   * inside the transaction, and the completion is written in the same transaction: the writes
   * and the stored answer commit together or not at all. A handler that fails in any way (a
   * thrown error, a 5xx, 408/409/425/429) is rolled back and recorded as FAILED_RETRYABLE.
   * @default false
   */
  transaction?: boolean
  /**
   * What a request does when its key's first request is still running: `'reject'` answers 409
   * with Retry-After at once; `{ waitMs }` waits up to `waitMs` for the first one's outcome and
   * then answers as a retry would (the replay, 503 recovery-required, or, when the first one
   * failed retryably, a run of its own), or 409 if it is still running then. A waiting request
   * holds nothing in the store; it wakes on the store's notification (Redis pub/sub, the memory
   * store's own) or its poll. `maxWaiters` caps the requests of the process that wait at once
   * (all routes together, default 10000): a duplicate that finds that many waiting answers 409
   * at once.
   * @default 'reject'
   */
  inFlight?: 'reject' | { readonly waitMs: number; readonly maxWaiters?: number }
  /**
   * The `Retry-After` of the 409 for a request whose key's first request is still running, in
   * milliseconds (sent in whole seconds, at least 1), never more than that request's lease left.
   * Unset: the route's recent typical duration (the median of its last 16 runs in this process;
   * 1 s before the first), bounded by the lease left. A client should wait about that long and
   * retry with the same key: a 409 again means it is still running.
   * @default undefined (the route's recent typical duration)
   */
  inProgressRetryAfterMs?: number
}

/** Options of the plugin and of the middleware. */
export interface IdempotencyOptions<Request> extends RouteOptions<Request> {
  /** Where records live: `redisStore({ redis })`, `postgresStore({ pool })` or `memoryStore()`. Required. */
  store: IdempotencyStore
  /** Versioned HMAC secrets for the scope digest, each at least 32 bytes. Required. */
  secrets: SecretsInput
  /**
   * Who owns the key: two principals never share a scope. Runs after authentication. A request
   * for which it returns `undefined` is refused with 401, unless `anonymous` is true.
   */
  principal?: (request: Request) => string | undefined | Promise<string | undefined>
  /**
   * Must be set to true, explicitly, by a deployment without users: every request then shares
   * one anonymous principal.
   * @default false
   */
  anonymous?: boolean
  /**
   * Retry-After sent with 503 store-unavailable, in milliseconds.
   * @default 1000
   */
  unavailableRetryAfterMs?: number
  /**
   * After the handler ran, how long a completion the store did not confirm keeps being re-sent
   * before the answer is replaced by 503 store-unavailable, in milliseconds.
   * @default 5000
   */
  recordRetryMs?: number
  /**
   * The longest a request waits for the store to decide its claim before the handler would
   * run (the claim, its re-sends and inspections, and the look-ups under older secrets), in
   * milliseconds. Past it the answer is 503 store-unavailable with a Retry-After at least this
   * long, and nothing runs; a claim still under way is settled in the background. Keep it above
   * the Redis client's `commandTimeout`, so one slow reply is still waited for.
   * @default 3000
   */
  claimTimeoutMs?: number
  /**
   * The longest one store call (claim, complete, a renewal, an inspection…) may take, whatever
   * the store's client is set to, in milliseconds. A call past it counts as sent with its reply
   * lost: the layer inspects the record and re-sends within the call's budget (`claimTimeoutMs`
   * before the handler, `recordRetryMs` after it), then answers 503. It is what bounds a
   * request on a client without a command timeout of its own.
   * @default 2000
   */
  storeCallTimeoutMs?: number
  /**
   * Receives every event of every protected request: one `outcome` per request (its kind,
   * attempt, durations), and the store faults, reconciliations and lease events. Events name
   * the operation and the first 12 hex characters of the scope digest, never the key or the
   * principal. Must not throw (what it throws is ignored). The same events are published on
   * the `idemkit:outcome` and `idemkit:event` diagnostics channels.
   */
  onEvent?: (event: IdempotencyEvent) => void
}

/** Route settings resolved once, when the route is added. */
export interface ResolvedRoute<Request> {
  readonly required: boolean
  readonly policy: Policy
  readonly operation: string | undefined
  readonly fingerprint: ((request: Request) => string | Promise<string>) | undefined
  readonly storedHeaders: readonly string[]
  readonly maxResponseBytes: number
  readonly classify: (response: CapturedResponse) => Classification
  readonly transaction: boolean
  /** 0 for `inFlight: 'reject'`. */
  readonly inFlightWaitMs: number
  /** `inFlight.maxWaiters`. */
  readonly inFlightMaxWaiters: number
  readonly inProgressRetryAfterMs: number | undefined
}

export interface ResolvedOptions<Request> {
  readonly store: IdempotencyStore
  readonly secrets: Secrets
  readonly principal: ((request: Request) => string | undefined | Promise<string | undefined>) | undefined
  readonly anonymous: boolean
  readonly unavailableRetryAfterMs: number
  readonly recordRetryMs: number
  readonly claimTimeoutMs: number
  readonly storeCallTimeoutMs: number
  readonly onEvent: ((event: IdempotencyEvent) => void) | undefined
  /** Plugin-wide route defaults. */
  readonly route: ResolvedRoute<Request>
}

/** All defaults in one place; docs/options.md lists the same (a test compares the names). */
export const DEFAULTS = Object.freeze({
  required: true,
  anonymous: false,
  leaseMs: DEFAULT_POLICY.leaseMs,
  replayWindowMs: DEFAULT_POLICY.replayWindowMs,
  failureRetentionMs: DEFAULT_POLICY.failureRetentionMs,
  expiredExecution: DEFAULT_POLICY.expiredExecution,
  policyRevision: DEFAULT_POLICY.revision,
  maxResponseBytes: 1024 * 1024,
  unavailableRetryAfterMs: 1000,
  recordRetryMs: 5000,
  claimTimeoutMs: 3000,
  storeCallTimeoutMs: 2000,
})

const ROUTE_KEYS = [
  'required',
  'leaseMs',
  'replayWindowMs',
  'failureRetentionMs',
  'expiredExecution',
  'policyRevision',
  'operation',
  'fingerprint',
  'storedHeaders',
  'maxResponseBytes',
  'classify',
  'transaction',
  'inFlight',
  'inProgressRetryAfterMs',
] as const
const PLUGIN_KEYS = [
  ...ROUTE_KEYS,
  'store',
  'secrets',
  'principal',
  'anonymous',
  'unavailableRetryAfterMs',
  'recordRetryMs',
  'claimTimeoutMs',
  'storeCallTimeoutMs',
  'onEvent',
] as const

const STORE_METHODS = ['claim', 'start', 'complete', 'markFailed', 'release', 'renew', 'inspect', 'close'] as const

/**
 * Parses plugin or middleware options.
 * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` (or `ERR_IDEM_INVALID_SECRET`).
 */
export function parseOptions<Request>(input: IdempotencyOptions<Request>): ResolvedOptions<Request> {
  if (input === null || typeof input !== 'object') invalidOption('options', 'an object', input)
  checkOptionNames(input, PLUGIN_KEYS, 'options')
  const store = input.store
  if (
    store === null ||
    typeof store !== 'object' ||
    typeof store.keyPrefix !== 'string' ||
    STORE_METHODS.some((method) => typeof store[method] !== 'function')
  ) {
    invalidOption(
      'store',
      'an idempotency store such as redisStore({ redis }), postgresStore({ pool }) or memoryStore()',
      store,
    )
  }
  if (input.secrets === undefined) invalidOption('secrets', '{ current, keys: { [version]: secret } }', undefined)
  const secrets = parseSecrets(input.secrets)
  const anonymous = input.anonymous ?? DEFAULTS.anonymous
  if (typeof anonymous !== 'boolean') invalidOption('anonymous', 'a boolean', anonymous)
  if (input.principal !== undefined && typeof input.principal !== 'function') {
    invalidOption('principal', 'a function (request) => string | undefined', input.principal)
  }
  if (input.principal === undefined && !anonymous) {
    invalidOption('principal', 'a function (request) => string | undefined, or set anonymous: true', undefined)
  }
  const unavailableRetryAfterMs = input.unavailableRetryAfterMs ?? DEFAULTS.unavailableRetryAfterMs
  if (!Number.isSafeInteger(unavailableRetryAfterMs) || unavailableRetryAfterMs < 1) {
    invalidOption('unavailableRetryAfterMs', 'a positive integer number of milliseconds', unavailableRetryAfterMs)
  }
  const recordRetryMs = input.recordRetryMs ?? DEFAULTS.recordRetryMs
  if (!Number.isSafeInteger(recordRetryMs) || recordRetryMs < 0 || recordRetryMs > 60_000) {
    invalidOption('recordRetryMs', 'an integer number of milliseconds from 0 to 60000', recordRetryMs)
  }
  const claimTimeoutMs = input.claimTimeoutMs ?? DEFAULTS.claimTimeoutMs
  if (!Number.isSafeInteger(claimTimeoutMs) || claimTimeoutMs < 1 || claimTimeoutMs > 60_000) {
    invalidOption('claimTimeoutMs', 'an integer number of milliseconds from 1 to 60000', claimTimeoutMs)
  }
  const storeCallTimeoutMs = input.storeCallTimeoutMs ?? DEFAULTS.storeCallTimeoutMs
  if (!Number.isSafeInteger(storeCallTimeoutMs) || storeCallTimeoutMs < 1 || storeCallTimeoutMs > 60_000) {
    invalidOption('storeCallTimeoutMs', 'an integer number of milliseconds from 1 to 60000', storeCallTimeoutMs)
  }
  if (input.onEvent !== undefined && typeof input.onEvent !== 'function') {
    invalidOption('onEvent', 'a function (event) => void', input.onEvent)
  }
  const base: ResolvedRoute<Request> = {
    required: DEFAULTS.required,
    policy: DEFAULT_POLICY,
    operation: undefined,
    fingerprint: undefined,
    storedHeaders: DEFAULT_STORED_HEADERS,
    maxResponseBytes: DEFAULTS.maxResponseBytes,
    classify: classifyResponse,
    transaction: false,
    inFlightWaitMs: 0,
    inFlightMaxWaiters: DEFAULT_MAX_WAITERS,
    inProgressRetryAfterMs: undefined,
  }
  // Operations name routes, so a plugin-wide one would merge every route's scopes.
  if (input.operation !== undefined) invalidOption('operation', 'set per route, not plugin-wide', input.operation)
  const route = resolveRoute(pickRoute(input), base, '')
  checkTransactionStore(route, store, '')
  return Object.freeze({
    store,
    secrets,
    principal: input.principal,
    anonymous,
    unavailableRetryAfterMs,
    recordRetryMs,
    claimTimeoutMs,
    storeCallTimeoutMs,
    onEvent: input.onEvent,
    route,
  })
}

/**
 * Refuses `transaction: true` on a store that cannot run transactions, when the route is added.
 * @param where a prefix naming the route in the message.
 */
export function checkTransactionStore<Request>(
  route: ResolvedRoute<Request>,
  store: IdempotencyStore,
  where: string,
): void {
  if (route.transaction && !isTransactional(store)) {
    invalidOption(
      `${where}transaction`,
      `false: the ${store.name} store does not run transactions (the PostgreSQL store does)`,
      true,
    )
  }
}

/**
 * Resolves one route's options over the plugin-wide defaults.
 * @param where a prefix naming the route in error messages.
 */
export function resolveRoute<Request>(
  input: RouteOptions<Request> | true,
  base: ResolvedRoute<Request>,
  where: string,
): ResolvedRoute<Request> {
  if (input === true) return base
  if (input === null || typeof input !== 'object' || Array.isArray(input)) {
    invalidOption(`${where}idempotency`, 'true or an object of route options', input)
  }
  checkOptionNames(input, ROUTE_KEYS, `${where}idempotency`, where)
  const options = omitUndefined(input)
  const required = options.required ?? base.required
  if (typeof required !== 'boolean') invalidOption(`${where}required`, 'a boolean', required)
  const policy = withName(where, () =>
    resolvePolicy(
      {
        leaseMs: options.leaseMs,
        replayWindowMs: options.replayWindowMs,
        failureRetentionMs: options.failureRetentionMs,
        expiredExecution: options.expiredExecution,
        revision: options.policyRevision,
      },
      base.policy,
    ),
  )
  const operation = options.operation ?? base.operation
  if (operation !== undefined && (typeof operation !== 'string' || operation.length === 0 || operation.length > 200)) {
    invalidOption(`${where}operation`, 'a non-empty string of at most 200 characters', operation)
  }
  const fingerprint = options.fingerprint ?? base.fingerprint
  if (fingerprint !== undefined && typeof fingerprint !== 'function') {
    invalidOption(`${where}fingerprint`, 'a function (request) => string', fingerprint)
  }
  const classify = options.classify ?? base.classify
  if (typeof classify !== 'function')
    invalidOption(`${where}classify`, 'a function (response) => classification', classify)
  const maxResponseBytes = options.maxResponseBytes ?? base.maxResponseBytes
  if (!Number.isSafeInteger(maxResponseBytes) || maxResponseBytes < 0 || maxResponseBytes > 64 * 1024 * 1024) {
    invalidOption(
      `${where}maxResponseBytes`,
      'an integer number of bytes from 0 to 67108864 (64 MiB)',
      maxResponseBytes,
    )
  }
  let storedHeaders = base.storedHeaders
  if (options.storedHeaders !== undefined) {
    const names = options.storedHeaders
    if (
      !Array.isArray(names) ||
      names.some((name) => typeof name !== 'string' || !/^[!#$%&'*+.^_`|~0-9a-z-]+$/i.test(name))
    ) {
      invalidOption(`${where}storedHeaders`, 'an array of header names', names)
    }
    const lower = names.map((name: string) => name.toLowerCase())
    const forbidden = lower.find((name: string) => NEVER_STORED_HEADERS.includes(name))
    if (forbidden !== undefined)
      invalidOption(`${where}storedHeaders`, `header names other than ${forbidden}`, forbidden)
    storedHeaders = [...new Set([...DEFAULT_STORED_HEADERS, ...lower])]
  }
  const transaction = options.transaction ?? base.transaction
  if (typeof transaction !== 'boolean') invalidOption(`${where}transaction`, 'a boolean', transaction)
  const inFlight = options.inFlight === undefined ? undefined : inFlightWait(options.inFlight, where)
  const inFlightWaitMs = inFlight === undefined ? base.inFlightWaitMs : inFlight.waitMs
  const inFlightMaxWaiters = inFlight === undefined ? base.inFlightMaxWaiters : inFlight.maxWaiters
  const inProgressRetryAfterMs = options.inProgressRetryAfterMs ?? base.inProgressRetryAfterMs
  if (
    inProgressRetryAfterMs !== undefined &&
    (!Number.isSafeInteger(inProgressRetryAfterMs) || inProgressRetryAfterMs < 1 || inProgressRetryAfterMs > 86_400_000)
  ) {
    invalidOption(
      `${where}inProgressRetryAfterMs`,
      'an integer number of milliseconds from 1 to 86400000',
      inProgressRetryAfterMs,
    )
  }
  return Object.freeze({
    required,
    policy,
    operation,
    fingerprint,
    storedHeaders,
    maxResponseBytes,
    classify,
    transaction,
    inFlightWaitMs,
    inFlightMaxWaiters,
    inProgressRetryAfterMs,
  })
}

/** Longest `inFlight.waitMs`: ten minutes. */
export const MAX_IN_FLIGHT_WAIT_MS = 600_000

/** Parses `inFlight`: `'reject'` or `{ waitMs, maxWaiters? }` (also the option of `idempotent()`). */
export function inFlightWait(inFlight: unknown, where: string): { waitMs: number; maxWaiters: number } {
  if (inFlight === 'reject') return { waitMs: 0, maxWaiters: DEFAULT_MAX_WAITERS }
  const { waitMs, maxWaiters = DEFAULT_MAX_WAITERS } = (inFlight ?? {}) as { waitMs?: unknown; maxWaiters?: unknown }
  if (
    typeof inFlight !== 'object' ||
    inFlight === null ||
    Object.keys(inFlight).some((name) => name !== 'waitMs' && name !== 'maxWaiters') ||
    typeof waitMs !== 'number' ||
    !Number.isSafeInteger(waitMs) ||
    waitMs < 1 ||
    waitMs > MAX_IN_FLIGHT_WAIT_MS ||
    typeof maxWaiters !== 'number' ||
    !Number.isSafeInteger(maxWaiters) ||
    maxWaiters < 1
  ) {
    invalidOption(
      `${where}inFlight`,
      `'reject' or { waitMs, maxWaiters? } with waitMs an integer number of milliseconds from 1 to ${MAX_IN_FLIGHT_WAIT_MS} ` +
        'and maxWaiters a positive integer',
      inFlight,
    )
  }
  return { waitMs, maxWaiters }
}

function pickRoute<Request>(input: IdempotencyOptions<Request>): RouteOptions<Request> {
  const route: Record<string, unknown> = {}
  for (const key of ROUTE_KEYS) route[key] = input[key]
  return route as RouteOptions<Request>
}

/** Re-throws a policy error with the route named in front of the option. */
function withName<T>(where: string, resolve: () => T): T {
  if (where === '') return resolve()
  try {
    return resolve()
  } catch (error) {
    if (error instanceof Error) error.message = `${where}${error.message}`
    throw error
  }
}
