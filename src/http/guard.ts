/**
 * The framework-neutral request flow shared by the Fastify plugin and the Express middleware:
 * key header → principal → scope digest and fingerprint → the executor's `begin`, and after the
 * handler, `finish` with its response. The adapters only translate their request and reply and
 * call the two phases around their handler.
 */
import type { Codec } from '../core/codec.js'
import type { KeyForOptions } from '../core/derived-key.js'
import { ErrorCode, IdempotencyError } from '../core/errors.js'
import { type Decided, Executor, type Run } from '../core/executor.js'
import { type ExecuteOutcome, type ExecutorEvent, type Settled, UnrecordedReason } from '../core/outcomes.js'
import type { TransactionClient } from '../core/store.js'
import { operationCode, scopeKeys, shortDigest } from '../core/store-key.js'
import { settledClassifier } from './classify.js'
import { parseKeyHeader } from './key-header.js'
import { checkTransactionStore, type ResolvedOptions, type ResolvedRoute } from './options.js'
import { type HttpResponse, ProblemCode, problemResponse } from './problem.js'
import { type CapturedResponse, responseCodec } from './response-codec.js'

/** What a handler sees of idempotency: `request.idempotency` (Fastify) / `req.idempotency` (Express). */
export interface IdempotencyInfo {
  /** The record's attempt number, monotonic per scope: hand it to side-effect sinks to fence stale owners. */
  readonly fencingToken: number
  /** Fires when another invocation takes the scope over (a lease renewal was refused). */
  readonly signal: AbortSignal
  /** True when this response is a stored one being replayed. */
  readonly replayed: boolean
  /** The first 12 hex characters of the scope digest, for logs. Never the key or principal. */
  readonly digest: string
  /**
   * On a `transaction: true` route: the connection inside the handler's transaction (a
   * node-postgres `PoolClient`). Write through it; the writes commit with the stored answer, or
   * not at all. Never COMMIT or ROLLBACK on it (savepoints are fine). `undefined` elsewhere.
   */
  readonly db: TransactionClient | undefined
  /**
   * The `Idempotency-Key` for the downstream call named `name` (`'charge'`,
   * `` `charge:${lineItem.id}` `` in a loop): the same on every execution of this request's
   * scope, a takeover or a resumed re-run included, so the downstream service answers its first
   * answer instead of acting twice; another for every other caller, key, route or name, and
   * unguessable without the secret. 43 characters of base64url, or a UUID with
   * `{ format: 'uuid' }`. Send the same downstream body on every execution (docs/across-services.md).
   * On a replay nothing runs, and it throws.
   */
  keyFor(name: string, options?: KeyForOptions): string
}

/** The request as the guard needs it, translated by an adapter (`guardInput()`). */
export interface GuardInput {
  readonly method: string
  /** The concrete path, without the query. */
  readonly path: string
  /** The raw query string without `?`. */
  readonly query: string
  readonly contentType: string | undefined
  readonly keyHeader: string | readonly string[] | undefined
  /** How many header lines carried Idempotency-Key. */
  readonly keyHeaderLines: number
  /**
   * The default fingerprint of the request as the client sent it (made by `guardInput()` before
   * validation could rewrite the body); `null` when the JSON body cannot be canonicalised or the
   * request carries no key. A route's own `fingerprint` function replaces it.
   */
  readonly fingerprint: string | null
}

/** A pino-compatible logger (Fastify's `request.log`). */
export interface GuardLogger {
  info(object: object, message: string): void
  warn(object: object, message: string): void
  error(object: object, message: string): void
  /** pino's level check; when present, no log object is built for a level that is off. */
  isLevelEnabled?(level: string): boolean
}

/** A request's run: the handler runs once, then its response goes to `finish` before it is sent. */
export interface GuardRun {
  readonly kind: 'run'
  readonly info: IdempotencyInfo
  /**
   * Records the handler's response. Resolves to the response to send instead (503: processed
   * but not recorded), or `undefined` to send the handler's own (stored, or a failure that is
   * not stored). Never rejects.
   */
  finish(settled: Settled<CapturedResponse>): Promise<HttpResponse | undefined>
}

export type Begin =
  /** No key on a route where it is optional: run the handler unprotected. */
  | { readonly kind: 'pass' }
  /** Answer without running the handler: a replay or one of the layer's own problems; `info` on replays. */
  | { readonly kind: 'respond'; readonly response: HttpResponse; readonly info?: IdempotencyInfo }
  | GuardRun

/** The executor events the guard logs (lease trouble); the rest are not built. */
const LOGGED_EVENTS: ReadonlySet<ExecutorEvent['type']> = new Set(['renew-refused', 'renew-failed'])

/** The header that marks a replayed response. */
export const REPLAYED_HEADER = 'idempotent-replayed'

const PASS: Begin = Object.freeze({ kind: 'pass' })

/** A replay runs nothing, so there is nothing to abort: its signal never fires. */
const REPLAY_SIGNAL = new AbortController().signal

/** A replay runs nothing, so it calls nothing downstream. */
function replayKeyFor(): never {
  throw new IdempotencyError(
    ErrorCode.INVALID_ARGUMENT,
    'keyFor is for a running handler: this request is a replay of a stored answer, and nothing runs.',
  )
}

/**
 * The guard of one route, prepared once: operation name and code, codec, classifier and the
 * route's executor; per request only what the request brings.
 */
export class RouteGuard<Request> {
  readonly operation: string
  readonly #options: ResolvedOptions<Request>
  readonly #route: ResolvedRoute<Request>
  readonly #opcode: string
  readonly #executor: Executor<CapturedResponse, GuardLogger>

  /**
   * @param defaultOperation `METHOD /route/pattern`, used unless the route names its operation.
   */
  constructor(options: ResolvedOptions<Request>, route: ResolvedRoute<Request>, defaultOperation: string) {
    this.operation = route.operation ?? defaultOperation
    this.#options = options
    this.#route = route
    this.#opcode = operationCode(this.operation)
    checkTransactionStore(route, options.store, `route ${this.operation}: `)
    const space = defaultOperation.indexOf(' ')
    const labels = { method: defaultOperation.slice(0, space), route: defaultOperation.slice(space + 1) }
    const listener = options.onEvent
    const operation = this.operation
    const codec: Codec<CapturedResponse> = responseCodec(route.storedHeaders, route.maxResponseBytes)
    this.#executor = new Executor<CapturedResponse, GuardLogger>({
      store: options.store,
      operation: this.operation,
      codec,
      policy: route.policy,
      classify: settledClassifier(route.classify),
      onEvent:
        listener === undefined
          ? logEvent
          : (event, log, key) => {
              logEvent(event, log, key)
              try {
                listener({ ...event, operation, digest: shortDigest(key), ...labels })
              } catch {
                // An observer never changes the answer.
              }
            },
      events: listener === undefined ? LOGGED_EVENTS : undefined,
      labels,
      recordRetryMs: options.recordRetryMs,
      claimTimeoutMs: options.claimTimeoutMs,
      storeCallTimeoutMs: options.storeCallTimeoutMs,
      unavailableRetryAfterMs: options.unavailableRetryAfterMs,
      transaction: route.transaction,
      secrets: options.secrets,
      inFlightWaitMs: route.inFlightWaitMs,
      inFlightMaxWaiters: route.inFlightMaxWaiters,
      inProgressRetryAfterMs: route.inProgressRetryAfterMs,
    })
  }

  /** Decides the request: pass it through, answer it (replay or problem), or run its handler. */
  async begin(request: Request, input: GuardInput, log: GuardLogger): Promise<Begin> {
    const options = this.#options
    const route = this.#route
    const header = parseKeyHeader(input.keyHeader, input.keyHeaderLines)
    if (header.kind === 'missing') {
      if (!route.required) return PASS
      return problem(ProblemCode.KEY_MISSING, 'This operation requires an Idempotency-Key header.')
    }
    if (header.kind === 'invalid') return problem(ProblemCode.KEY_INVALID, header.reason)

    const found = options.principal === undefined ? undefined : options.principal(request)
    const principal = this.#principalOf(isPromiseLike(found) ? await found : found)
    if (principal === undefined) {
      return problem(ProblemCode.PRINCIPAL_REQUIRED, 'An idempotency key is scoped to its caller; authenticate first.')
    }
    let fingerprint: string | null | undefined
    if (route.fingerprint === undefined) {
      fingerprint = input.fingerprint
    } else {
      const custom = route.fingerprint(request)
      fingerprint = isPromiseLike(custom) ? await custom : custom
    }
    if (fingerprint === null || fingerprint === undefined) {
      return problem(
        ProblemCode.BODY_INVALID,
        'The JSON body cannot be canonicalised (RFC 8785), e.g. it holds a lone surrogate; it cannot be fingerprinted.',
      )
    }
    const { secrets, store } = options
    const scope = { principal, key: header.key, operation: this.operation }
    // The current version's key first, then the older versions' (docs/design.md §1).
    const keys = scopeKeys(store.keyPrefix, secrets, this.#opcode, scope)
    const { key, digest } = keys[0] as (typeof keys)[0]
    const legacyKeys = keys.length === 1 ? undefined : keys.slice(1).map((legacy) => legacy.key)
    const begun = await this.#executor.begin({ key, fingerprint, legacyKeys }, log)
    const short = shortDigest(digest)
    if (begun.kind === 'RUN') return new HttpRun(this.#options, begun, log, short)
    logOutcome(log, short, begun)
    return this.#respond(begun, short)
  }

  #principalOf(found: unknown): string | undefined {
    if (found === undefined || found === null || found === '') return this.#options.anonymous ? '' : undefined
    if (typeof found === 'number') return String(found)
    if (typeof found !== 'string') throw new TypeError('The principal option must return a string or undefined.')
    return found
  }

  #respond(result: Decided<CapturedResponse>, digest: string): Begin {
    switch (result.kind) {
      case 'REPLAYED': {
        const stored = result.value
        // The decoded headers are this replay's own object: the replay mark is added to it.
        ;(stored.headers as Record<string, string | string[]>)[REPLAYED_HEADER] = 'true'
        return {
          kind: 'respond',
          info: {
            fencingToken: 0,
            signal: REPLAY_SIGNAL,
            replayed: true,
            digest,
            db: undefined,
            keyFor: replayKeyFor,
          },
          response: { status: stored.status, headers: stored.headers, body: stored.body },
        }
      }
      case 'IN_PROGRESS':
        return problem(
          ProblemCode.IN_FLIGHT,
          'A request with this idempotency key is still being processed; retry later.',
          result.retryAfterMs,
        )
      case 'FINGERPRINT_MISMATCH':
        return problem(
          ProblemCode.KEY_REUSED,
          'This idempotency key was already used with a different request (method, path, query or body).',
        )
      case 'RECOVERY_REQUIRED':
        return problem(ProblemCode.RECOVERY_REQUIRED, recoveryDetail(result.reason))
      case 'STORE_UNAVAILABLE':
        return problem(
          ProblemCode.STORE_UNAVAILABLE,
          'The idempotency store could not be reached; nothing was processed. Retry with the same key.',
          result.retryAfterMs,
        )
    }
  }
}

/** What the handler of a run sees: its signal is the run's, made only when read. */
class RunInfo implements IdempotencyInfo {
  readonly replayed = false
  readonly #run: Run<CapturedResponse, GuardLogger>
  readonly digest: string

  constructor(run: Run<CapturedResponse, GuardLogger>, digest: string) {
    this.#run = run
    this.digest = digest
  }

  get fencingToken(): number {
    return this.#run.attempt
  }

  get signal(): AbortSignal {
    return this.#run.signal
  }

  get db(): TransactionClient | undefined {
    return this.#run.db
  }

  /** Bound to this run: `const { keyFor } = request.idempotency` works too. */
  get keyFor(): (name: string, options?: KeyForOptions) => string {
    return this.#run.context.keyFor
  }

  /** What a log line or a JSON body shows of it (the getters live on the prototype). */
  toJSON(): { fencingToken: number; replayed: boolean; digest: string } {
    return { fencingToken: this.fencingToken, replayed: this.replayed, digest: this.digest }
  }
}

class HttpRun implements GuardRun {
  readonly kind = 'run'
  readonly info: IdempotencyInfo
  readonly #options: ResolvedOptions<unknown>
  readonly #run: Run<CapturedResponse, GuardLogger>
  readonly #log: GuardLogger

  constructor(
    options: ResolvedOptions<never>,
    run: Run<CapturedResponse, GuardLogger>,
    log: GuardLogger,
    digest: string,
  ) {
    this.#options = options as ResolvedOptions<unknown>
    this.#run = run
    this.#log = log
    this.info = new RunInfo(run, digest)
  }

  /** The one place that turns "processed but not recorded" into its 503. */
  async finish(settled: Settled<CapturedResponse>): Promise<HttpResponse | undefined> {
    const result = await this.#run.finish(settled)
    logOutcome(this.#log, this.info.digest, result)
    if (result.kind !== 'UNRECORDED') return undefined
    // In a transaction a completion refused as not ours rolled back as well: nothing was kept.
    if (
      result.reason === UnrecordedReason.ROLLED_BACK ||
      (result.reason === UnrecordedReason.LOST_OWNERSHIP && this.#run.db !== undefined)
    ) {
      return rolledBackResponse(this.#options.unavailableRetryAfterMs)
    }
    return unrecordedResponse(this.#options.unavailableRetryAfterMs)
  }
}

/** The 503 sent instead of a handler's response that could not be recorded (docs/design.md §5). */
export function unrecordedResponse(retryAfterMs: number): HttpResponse {
  return problemResponse(
    ProblemCode.STORE_UNAVAILABLE,
    'The request was processed but its response could not be recorded; retry with the same key.',
    retryAfterMs,
  )
}

/** The 503 sent instead of a handler's response whose transaction rolled back: nothing happened. */
export function rolledBackResponse(retryAfterMs: number): HttpResponse {
  return problemResponse(
    ProblemCode.STORE_UNAVAILABLE,
    'The request was not processed: its transaction was rolled back (it could not be committed, or another ' +
      'request took this key over). Retry with the same key.',
    retryAfterMs,
  )
}

/** Builds the guard of one route (see `RouteGuard`). */
export function createRouteGuard<Request>(
  options: ResolvedOptions<Request>,
  route: ResolvedRoute<Request>,
  defaultOperation: string,
): RouteGuard<Request> {
  return new RouteGuard(options, route, defaultOperation)
}

/** Guards one `routeGuards()` keeps: past that it starts over. */
export const MAX_ROUTE_GUARDS = 1000

/**
 * The guards of one route's options, one per operation (`METHOD /route/pattern`), each built on
 * its first request: for adapters that learn the operation from the request (one middleware
 * mounted on several routes). At most `MAX_ROUTE_GUARDS` are kept, so operations named from the
 * request (Express's `req.baseUrl`) cannot grow it without bound.
 */
export function routeGuards<Request>(
  options: ResolvedOptions<Request>,
  route: ResolvedRoute<Request>,
): (operation: string) => RouteGuard<Request> {
  const guards = new Map<string, RouteGuard<Request>>()
  return function guardFor(operation) {
    let guard = guards.get(operation)
    if (guard === undefined) {
      if (guards.size >= MAX_ROUTE_GUARDS) guards.clear()
      guard = createRouteGuard(options, route, operation)
      guards.set(operation, guard)
    }
    return guard
  }
}

function problem(code: ProblemCode, detail: string, retryAfterMs?: number): Begin {
  return { kind: 'respond', response: problemResponse(code, detail, retryAfterMs) }
}

function recoveryDetail(reason: string): string {
  switch (reason) {
    case 'ABANDONED':
      return 'An earlier request with this key failed with an unknown effect; it will not be run again automatically.'
    case 'EXPIRED_EXECUTION':
      return 'An earlier request with this key stopped without an outcome; its effect may have happened.'
    default:
      return 'The stored response for this key was written by an incompatible version and cannot be replayed.'
  }
}

function logOutcome(log: GuardLogger, digest: string, result: ExecuteOutcome<CapturedResponse>): void {
  if (result.kind === 'UNRECORDED' || result.kind === 'STORE_UNAVAILABLE') {
    const idempotency: Record<string, unknown> = { digest, outcome: result.kind }
    if ('attempt' in result) idempotency.attempt = result.attempt
    if ('reason' in result) idempotency.reason = result.reason
    log.error({ idempotency, err: result.cause }, 'idempotency store failed')
    return
  }
  if (
    result.kind === 'FAILED' &&
    result.settled.ok &&
    result.classification === 'unknown' &&
    result.settled.value.status < 500
  ) {
    // A stored-looking result that could not be stored (too large, or not encodable).
    const idempotency = {
      digest,
      outcome: result.kind,
      attempt: result.attempt,
      classification: result.classification,
      recorded: result.recorded,
    }
    log.warn({ idempotency }, 'idempotent response not stored; retries answer recovery-required')
    return
  }
  // The line every outcome gets, built only when the level is on.
  if (log.isLevelEnabled !== undefined && !log.isLevelEnabled('info')) return
  const idempotency: Record<string, unknown> = { digest, outcome: result.kind }
  if ('attempt' in result) idempotency.attempt = result.attempt
  if ('reason' in result) idempotency.reason = result.reason
  if (result.kind === 'FAILED') {
    idempotency.classification = result.classification
    idempotency.recorded = result.recorded
  }
  log.info({ idempotency }, 'idempotency outcome')
}

function logEvent(event: ExecutorEvent, log: GuardLogger, key: string): void {
  const digest = shortDigest(key)
  if (event.type === 'renew-refused') {
    log.warn(
      { idempotency: { digest, attempt: event.attempt, renew: event.result } },
      'idempotency lease lost to a takeover',
    )
  } else if (event.type === 'renew-failed') {
    log.warn({ idempotency: { digest }, err: event.error }, 'idempotency lease renewal failed')
  }
}

function isPromiseLike<T>(value: T | PromiseLike<T>): value is PromiseLike<T> {
  return typeof value === 'object' && value !== null && typeof (value as { then?: unknown }).then === 'function'
}
