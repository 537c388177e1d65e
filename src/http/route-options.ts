/**
 * One route's options: what a route may set, what it resolves to, and the resolver in three
 * parts (the request, the record, the duplicates), each checking its own options.
 */

import { integerOption, invalidOption, isIntegerIn } from '../core/errors.js'
import { DEFAULT_MAX_WAITERS } from '../core/in-flight.js'
import type { Classification } from '../core/outcomes.js'
import { expiredExecutionOption, omitUndefined, POLICY_KEYS, type Policy, resolvePolicy } from '../core/policy.js'
import type { ExpiredExecution } from '../core/record.js'
import type { IdempotencyStore } from '../core/store.js'
import { checkOptionNames } from '../core/store-front.js'
import { type AppTransactions, isAppTransactions, isTransactional } from '../core/store-transaction.js'
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
   * 503 recovery-required (the effect may have happened); `takeover` runs again; `resume` is
   * `resume: true`.
   * @default 'recover'
   */
  expiredExecution?: ExpiredExecution
  /**
   * For a handler whose external effects all go through derived keys
   * (`request.idempotency.keyFor(name)` as the downstream `Idempotency-Key`) and whose local
   * writes go through the route's transaction: a retry after a crash (once the lease ran out),
   * a lost lease, or a thrown error that is not marked retryable (at once: the run ended)
   * re-runs the handler with the next fencing token instead of answering 503
   * recovery-required. The re-run's `keyFor` gives the same keys, so every downstream call
   * answers its first answer. Same as `expiredExecution: 'resume'`.
   * @default false
   */
  resume?: boolean
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
   * Who owns the key: two principals never share a scope. Runs after authentication. A request
   * for which it returns `undefined` is refused with 401, unless `anonymous` is true. Set on a
   * route, it replaces the plugin-wide one there (a webhook's sender: `() => 'stripe'`).
   */
  principal?: (request: Request) => string | undefined | Promise<string | undefined>
  /**
   * Where the route's idempotency key comes from, instead of the `Idempotency-Key` header: a
   * webhook's event id (Stripe's `event.id`, GitHub's `X-GitHub-Delivery`), a command's id.
   * Runs after authentication, before the claim; its result is checked like the header (1 to
   * 255 visible ASCII characters, else 400), and scoped and digested like it: per principal and
   * operation, the store never sees it. `undefined` is a missing key (400, or no protection when
   * `required: false`). What it throws is the app's error, handled by the framework as the
   * `principal` function's is; nothing is claimed.
   * @default undefined (the `Idempotency-Key` header)
   */
  key?: (request: Request) => string | undefined | Promise<string | undefined>
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
   * thrown error, a 5xx, 408/409/425/429) is rolled back and recorded as FAILED_RETRYABLE. An
   * ORM's adapter (`idemkit/drizzle`, `idemkit/kysely`, `idemkit/knex`, `idemkit/typeorm`,
   * `idemkit/prisma`) in place of `true` opens the ORM's own transaction: the handler writes through
   * `idempotency.tx` (typed by the adapter's `tx(request.idempotency)`), the rest is the same.
   * @default false
   */
  // biome-ignore lint/suspicious/noExplicitAny: any ORM's transaction object
  transaction?: boolean | AppTransactions<any>
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

/** Route settings resolved once, when the route is added. */
export interface ResolvedRoute<Request> {
  readonly required: boolean
  readonly policy: Policy
  readonly operation: string | undefined
  readonly fingerprint: ((request: Request) => string | Promise<string>) | undefined
  readonly principal: ((request: Request) => string | undefined | Promise<string | undefined>) | undefined
  /** The route's `key` function; `undefined`: the `Idempotency-Key` header. */
  readonly key: ((request: Request) => string | undefined | Promise<string | undefined>) | undefined
  readonly storedHeaders: readonly string[]
  readonly maxResponseBytes: number
  readonly classify: (response: CapturedResponse) => Classification
  // biome-ignore lint/suspicious/noExplicitAny: any ORM's transaction object
  readonly transaction: boolean | AppTransactions<any>
  /** 0 for `inFlight: 'reject'`. */
  readonly inFlightWaitMs: number
  /** `inFlight.maxWaiters`. */
  readonly inFlightMaxWaiters: number
  readonly inProgressRetryAfterMs: number | undefined
}

/** The options a route may set; the plugin-wide options take the same ones as defaults. */
export const ROUTE_KEYS = [
  'required',
  ...POLICY_KEYS,
  'operation',
  'principal',
  'key',
  'fingerprint',
  'storedHeaders',
  'maxResponseBytes',
  'classify',
  'transaction',
  'inFlight',
  'inProgressRetryAfterMs',
] as const

/** Longest `inFlight.waitMs`: ten minutes. */
export const MAX_IN_FLIGHT_WAIT_MS = 600_000

/** Largest `maxResponseBytes`: 64 MiB. */
const MAX_RESPONSE_BYTES = 64 * 1024 * 1024

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
  return Object.freeze({
    ...requestPart(options, base, where),
    ...recordPart(options, base, where),
    ...duplicatesPart(options, base, where),
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
  if (route.transaction !== false && !isTransactional(store)) {
    invalidOption(
      `${where}transaction`,
      `false: the ${store.name} store does not run transactions (the PostgreSQL store does)`,
      true,
    )
  }
}

type RoutePart<Request, K extends keyof ResolvedRoute<Request>> = Pick<ResolvedRoute<Request>, K>

/** What the route asks of a request: whether a key is required, where it and its owner come from, the operation, the fingerprint. */
function requestPart<Request>(
  options: Partial<RouteOptions<Request>>,
  base: ResolvedRoute<Request>,
  where: string,
): RoutePart<Request, 'required' | 'operation' | 'principal' | 'key' | 'fingerprint'> {
  const required = options.required ?? base.required
  if (typeof required !== 'boolean') invalidOption(`${where}required`, 'a boolean', required)
  const operation = options.operation ?? base.operation
  if (operation !== undefined && (typeof operation !== 'string' || operation.length === 0 || operation.length > 200)) {
    invalidOption(`${where}operation`, 'a non-empty string of at most 200 characters', operation)
  }
  const fingerprint = options.fingerprint ?? base.fingerprint
  if (fingerprint !== undefined && typeof fingerprint !== 'function') {
    invalidOption(`${where}fingerprint`, 'a function (request) => string', fingerprint)
  }
  const key = options.key ?? base.key
  if (key !== undefined && typeof key !== 'function') {
    invalidOption(`${where}key`, 'a function (request) => string | undefined', key)
  }
  const principal = options.principal ?? base.principal
  if (principal !== undefined && typeof principal !== 'function') {
    invalidOption(`${where}principal`, 'a function (request) => string | undefined', principal)
  }
  return { required, operation, principal, key, fingerprint }
}

/** What the route's record keeps, and for how long: the policy, the stored response, the transaction. */
function recordPart<Request>(
  options: Partial<RouteOptions<Request>>,
  base: ResolvedRoute<Request>,
  where: string,
): RoutePart<Request, 'policy' | 'storedHeaders' | 'maxResponseBytes' | 'classify' | 'transaction'> {
  const policy = withName(where, () =>
    resolvePolicy(
      {
        leaseMs: options.leaseMs,
        replayWindowMs: options.replayWindowMs,
        failureRetentionMs: options.failureRetentionMs,
        expiredExecution: expiredExecutionOption(
          options.resume,
          options.expiredExecution,
          base.policy.expiredExecution,
          where,
        ),
        revision: options.policyRevision,
      },
      base.policy,
    ),
  )
  const classify = options.classify ?? base.classify
  if (typeof classify !== 'function')
    invalidOption(`${where}classify`, 'a function (response) => classification', classify)
  const maxResponseBytes =
    options.maxResponseBytes === undefined
      ? base.maxResponseBytes
      : integerOption(`${where}maxResponseBytes`, options.maxResponseBytes, 0, MAX_RESPONSE_BYTES, 'bytes')
  const storedHeaders =
    options.storedHeaders === undefined ? base.storedHeaders : storedHeaderNames(options.storedHeaders, where)
  const transaction = options.transaction ?? base.transaction
  if (typeof transaction !== 'boolean' && !isAppTransactions(transaction)) {
    invalidOption(
      `${where}transaction`,
      'a boolean or an ORM adapter (idemkit/drizzle, idemkit/kysely, ...)',
      transaction,
    )
  }
  return { policy, storedHeaders, maxResponseBytes, classify, transaction }
}

/** What a duplicate gets while its key's first request runs: a wait, and the 409's Retry-After. */
function duplicatesPart<Request>(
  options: Partial<RouteOptions<Request>>,
  base: ResolvedRoute<Request>,
  where: string,
): RoutePart<Request, 'inFlightWaitMs' | 'inFlightMaxWaiters' | 'inProgressRetryAfterMs'> {
  const inFlight = options.inFlight === undefined ? undefined : inFlightWait(options.inFlight, where)
  const inProgressRetryAfterMs =
    options.inProgressRetryAfterMs === undefined
      ? base.inProgressRetryAfterMs
      : integerOption(`${where}inProgressRetryAfterMs`, options.inProgressRetryAfterMs, 1, 86_400_000, 'milliseconds')
  return {
    inFlightWaitMs: inFlight === undefined ? base.inFlightWaitMs : inFlight.waitMs,
    inFlightMaxWaiters: inFlight === undefined ? base.inFlightMaxWaiters : inFlight.maxWaiters,
    inProgressRetryAfterMs,
  }
}

function storedHeaderNames(names: unknown, where: string): readonly string[] {
  if (
    !Array.isArray(names) ||
    names.some((name) => typeof name !== 'string' || !/^[!#$%&'*+.^_`|~0-9a-z-]+$/i.test(name))
  ) {
    invalidOption(`${where}storedHeaders`, 'an array of header names', names)
  }
  const lower = names.map((name: string) => name.toLowerCase())
  const forbidden = lower.find((name: string) => NEVER_STORED_HEADERS.includes(name))
  if (forbidden !== undefined) invalidOption(`${where}storedHeaders`, `header names other than ${forbidden}`, forbidden)
  return [...new Set([...DEFAULT_STORED_HEADERS, ...lower])]
}

/** Parses `inFlight`: `'reject'` or `{ waitMs, maxWaiters? }` (also the option of `idempotent()`). */
export function inFlightWait(inFlight: unknown, where: string): { waitMs: number; maxWaiters: number } {
  if (inFlight === 'reject') return { waitMs: 0, maxWaiters: DEFAULT_MAX_WAITERS }
  const { waitMs, maxWaiters = DEFAULT_MAX_WAITERS } = (inFlight ?? {}) as { waitMs?: unknown; maxWaiters?: unknown }
  if (
    typeof inFlight !== 'object' ||
    inFlight === null ||
    Object.keys(inFlight).some((name) => name !== 'waitMs' && name !== 'maxWaiters') ||
    !isIntegerIn(waitMs, 1, MAX_IN_FLIGHT_WAIT_MS) ||
    !isIntegerIn(maxWaiters, 1, Number.MAX_SAFE_INTEGER)
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
