/**
 * The framework-neutral request flow shared by the Fastify plugin and the Express middleware:
 * key header → principal → scope digest and fingerprint → the executor's `begin`, and after the
 * handler, `finish` with its response. The adapters only translate their request and reply and
 * call the two phases around their handler.
 */
import type { KeyForOptions } from '../core/derived-key.js'
import { ErrorCode, IdempotencyError } from '../core/errors.js'
import { type Decided, Executor, type Run } from '../core/executor.js'
import type { ExecuteOutcome, Settled } from '../core/outcomes.js'
import type { Step } from '../core/run/steps.js'
import { operationCode, scopeKeys, shortDigest } from '../core/store-key.js'
import type { TransactionClient } from '../core/store-transaction.js'
import { executorConfig } from './executor-config.js'
import { checkKey, type KeyHeader, parseKeyHeader } from './key-header.js'
import type { ResolvedOptions } from './options.js'
import {
  decidedResponse,
  finishedResponse,
  type HttpResponse,
  ProblemCode,
  problemResponse,
  REPLAYED_HEADER,
  STATUS_HEADER,
  STATUS_REPLAYED,
} from './problem.js'
import type { CapturedResponse } from './response-codec.js'
import { checkTransactionStore, type ResolvedRoute } from './route-options.js'

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
   * On a `transaction: <adapter>` route (`idemkit/drizzle`, `idemkit/kysely`, ...): the ORM's own
   * transaction object; the adapter's `tx(request.idempotency)` hands it over typed. Its writes
   * commit with the stored answer, or not at all. `undefined` elsewhere.
   */
  readonly tx: unknown
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
  /**
   * On a `transaction: true` route with the PostgreSQL store: runs `run(db)` as the step named
   * `name`, committed in a transaction of its own together with its recovery point; a re-run of
   * this request (after a crash, a lost lease or a thrown error: `resume: true`) skips a step
   * that committed and gets its result back, through JSON. Write only inside steps until the
   * last one; what the handler writes after it commits with the answer (docs/postgresql.md
   * "Steps"). Elsewhere, and on a replay, it rejects.
   */
  readonly step: Step
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

/** A replay runs nothing, so it has no steps. */
function replayStep(): Promise<never> {
  return Promise.reject(
    new IdempotencyError(
      ErrorCode.INVALID_ARGUMENT,
      'step is for a running handler: this request is a replay of a stored answer, and nothing runs.',
    ),
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
    this.#executor = new Executor(executorConfig(options, route, this.operation, defaultOperation))
  }

  /** Decides the request: pass it through, answer it (replay or problem), or run its handler. */
  async begin(request: Request, input: GuardInput, log: GuardLogger): Promise<Begin> {
    const options = this.#options
    const route = this.#route
    // A route's `key` function replaces the header; what it throws is the app's error, as the
    // principal's is, and nothing is claimed.
    let header: KeyHeader
    if (route.key === undefined) {
      header = parseKeyHeader(input.keyHeader, input.keyHeaderLines)
    } else {
      const found = route.key(request)
      header = checkKey(isPromiseLike(found) ? await found : found)
    }
    if (header.kind === 'missing') {
      if (!route.required) return PASS
      return problem(
        ProblemCode.KEY_MISSING,
        route.key === undefined
          ? 'This operation requires an Idempotency-Key header.'
          : 'This operation requires an idempotency key, and none was found in the request.',
      )
    }
    if (header.kind === 'invalid') return problem(ProblemCode.KEY_INVALID, header.reason)

    const found = route.principal === undefined ? undefined : route.principal(request)
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
        // The decoded headers are this replay's own object: the replay marks are added to it.
        const headers = stored.headers as Record<string, string | string[]>
        headers[REPLAYED_HEADER] = 'true'
        headers[STATUS_HEADER] = STATUS_REPLAYED
        return {
          kind: 'respond',
          info: {
            fencingToken: 0,
            signal: REPLAY_SIGNAL,
            replayed: true,
            digest,
            db: undefined,
            tx: undefined,
            keyFor: replayKeyFor,
            step: replayStep,
          },
          response: { status: stored.status, headers: stored.headers, body: stored.body },
        }
      }
      default:
        return { kind: 'respond', response: decidedResponse(result) }
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

  get tx(): unknown {
    return this.#run.tx
  }

  /** Bound to this run: `const { keyFor } = request.idempotency` works too. */
  get keyFor(): (name: string, options?: KeyForOptions) => string {
    return this.#run.context.keyFor
  }

  /** Bound to this run, as `keyFor` is. */
  get step(): Step {
    return this.#run.context.step
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

  /** Records the handler's outcome; the answer to send instead of its response, if any. */
  async finish(settled: Settled<CapturedResponse>): Promise<HttpResponse | undefined> {
    const result = await this.#run.finish(settled)
    logOutcome(this.#log, this.info.digest, result)
    return finishedResponse(result, this.#run.db !== undefined, this.#options.unavailableRetryAfterMs)
  }
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

function problem(code: ProblemCode, detail: string): Begin {
  return { kind: 'respond', response: problemResponse(code, detail) }
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

function isPromiseLike<T>(value: T | PromiseLike<T>): value is PromiseLike<T> {
  return typeof value === 'object' && value !== null && typeof (value as { then?: unknown }).then === 'function'
}
