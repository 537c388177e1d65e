/**
 * Options of every adapter (the same names, defaults and validation for all; a route's own
 * options and their resolver are in route-options.ts). Parsed once into a frozen object;
 * `undefined` means "use the default"; unknown keys and bad values throw
 * `ERR_IDEM_INVALID_OPTION` naming the option.
 */

import { integerOption, invalidOption } from '../core/errors.js'
import { DEFAULT_MAX_WAITERS } from '../core/in-flight.js'
import type { IdempotencyEvent } from '../core/outcomes.js'
import { DEFAULT_POLICY } from '../core/policy.js'
import type { ReplayCache, ReplayCacheOptions } from '../core/replay-cache.js'
import { replayCacheOption } from '../core/replay-cache.js'
import { type Secrets, type SecretsInput, secretsOption } from '../core/scope.js'
import type { IdempotencyStore } from '../core/store.js'
import { checkOptionNames, storeOption } from '../core/store-front.js'
import { classifyResponse } from './classify.js'
import { DEFAULT_STORED_HEADERS } from './response-codec.js'
import {
  checkTransactionStore,
  type ResolvedRoute,
  ROUTE_KEYS,
  type RouteOptions,
  resolveRoute,
} from './route-options.js'

/** Options of the plugin and of the middleware. */
export interface IdempotencyOptions<Request> extends RouteOptions<Request> {
  /** Where records live: `redisStore({ redis })`, `postgresStore({ pool })` or `memoryStore()`. Required. */
  store: IdempotencyStore
  /** Versioned HMAC secrets for the scope digest, each at least 32 bytes. Required. */
  secrets: SecretsInput
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
  /**
   * Fastify only: what a request carrying an Idempotency-Key on a route without
   * `config.idempotency` gets. `'ignore'` lets it through unprotected, silently; `'warn'` also
   * logs one warning per route, at its first such request. The other adapters only see the
   * routes `idem()` is mounted on, and ignore it.
   * @default 'ignore'
   */
  unannotatedKey?: 'ignore' | 'warn'
  /**
   * Completed answers kept in this process, so a replay of the same request (same principal,
   * key, route and body) is answered without a store call: `true` (1000 answers, 8 MiB, 5 s) or
   * `{ maxEntries, maxBytes, maxAgeMs }`. An operator's change to a completed record
   * (`idemkit resolve`, `idemkit delete`) is seen after at most `maxAgeMs`. One cache for all the
   * routes of this plugin, or a `ReplayCache` of your own to share (docs/options.md "Replay cache").
   * @default false
   */
  replayCache?: boolean | ReplayCacheOptions | ReplayCache
}

export interface ResolvedOptions<Request> {
  readonly store: IdempotencyStore
  readonly secrets: Secrets
  readonly anonymous: boolean
  readonly unavailableRetryAfterMs: number
  readonly recordRetryMs: number
  readonly claimTimeoutMs: number
  readonly storeCallTimeoutMs: number
  readonly onEvent: ((event: IdempotencyEvent) => void) | undefined
  readonly unannotatedKey: 'ignore' | 'warn'
  /** The routes' replay cache, when `replayCache` asks for one. */
  readonly replayCache: ReplayCache | undefined
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
  resume: false,
  policyRevision: DEFAULT_POLICY.revision,
  maxResponseBytes: 1024 * 1024,
  unavailableRetryAfterMs: 1000,
  recordRetryMs: 5000,
  claimTimeoutMs: 3000,
  storeCallTimeoutMs: 2000,
  unannotatedKey: 'ignore',
})

const PLUGIN_KEYS = [
  ...ROUTE_KEYS,
  'store',
  'secrets',
  'anonymous',
  'unavailableRetryAfterMs',
  'recordRetryMs',
  'claimTimeoutMs',
  'storeCallTimeoutMs',
  'onEvent',
  'unannotatedKey',
  'replayCache',
] as const

/**
 * Parses plugin or middleware options.
 * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` (or `ERR_IDEM_INVALID_SECRET`).
 */
export function parseOptions<Request>(input: IdempotencyOptions<Request>): ResolvedOptions<Request> {
  if (input === null || typeof input !== 'object') invalidOption('options', 'an object', input)
  checkOptionNames(input, PLUGIN_KEYS, 'options')
  const store = storeOption(input.store)
  const secrets = secretsOption(input.secrets)
  const anonymous = input.anonymous ?? DEFAULTS.anonymous
  if (typeof anonymous !== 'boolean') invalidOption('anonymous', 'a boolean', anonymous)
  if (input.principal !== undefined && typeof input.principal !== 'function') {
    invalidOption('principal', 'a function (request) => string | undefined', input.principal)
  }
  if (input.principal === undefined && !anonymous) {
    invalidOption('principal', 'a function (request) => string | undefined, or set anonymous: true', undefined)
  }
  const ms = (name: keyof typeof DEFAULTS & keyof ResolvedOptions<Request>, min: number, max?: number) =>
    integerOption(name, input[name] ?? DEFAULTS[name], min, max, 'milliseconds')
  const unavailableRetryAfterMs = ms('unavailableRetryAfterMs', 1)
  const recordRetryMs = ms('recordRetryMs', 0, 60_000)
  const claimTimeoutMs = ms('claimTimeoutMs', 1, 60_000)
  const storeCallTimeoutMs = ms('storeCallTimeoutMs', 1, 60_000)
  if (input.onEvent !== undefined && typeof input.onEvent !== 'function') {
    invalidOption('onEvent', 'a function (event) => void', input.onEvent)
  }
  const unannotatedKey = input.unannotatedKey ?? DEFAULTS.unannotatedKey
  if (unannotatedKey !== 'ignore' && unannotatedKey !== 'warn') {
    invalidOption('unannotatedKey', "'ignore' or 'warn'", unannotatedKey)
  }
  const replayCache = replayCacheOption(input.replayCache)
  const base: ResolvedRoute<Request> = {
    required: DEFAULTS.required,
    policy: DEFAULT_POLICY,
    operation: undefined,
    fingerprint: undefined,
    key: undefined,
    principal: input.principal,
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
    anonymous,
    unavailableRetryAfterMs,
    recordRetryMs,
    claimTimeoutMs,
    storeCallTimeoutMs,
    onEvent: input.onEvent,
    unannotatedKey,
    replayCache,
    route,
  })
}

function pickRoute<Request>(input: IdempotencyOptions<Request>): RouteOptions<Request> {
  const route: Record<string, unknown> = {}
  for (const key of ROUTE_KEYS) route[key] = input[key]
  return route as RouteOptions<Request>
}
