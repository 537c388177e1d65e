/**
 * The framework-neutral request flow shared by the Fastify plugin and the Express middleware:
 * key header → principal → scope digest and fingerprint → `execute()`, and the executor's
 * outcome → the response to send. The adapters only translate their request and reply.
 */
import type { Codec } from '../core/codec.js'
import { type ActionContext, execute } from '../core/executor.js'
import type { ExecuteOutcome, ExecutorEvent, Settled } from '../core/outcomes.js'
import { scopeDigest } from '../core/scope.js'
import { operationCode, storeKey } from '../core/store-key.js'
import { settledClassifier } from './classify.js'
import { parseKeyHeader } from './key-header.js'
import type { ResolvedOptions, ResolvedRoute } from './options.js'
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
}

/** The request as the guard needs it, translated by an adapter. */
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
}

export type Begin =
  /** No key on a route where it is optional: run the handler unprotected. */
  | { readonly kind: 'pass' }
  /**
   * Answer without running the handler: a replay or one of the layer's own problems. `info`
   * is set on replays.
   */
  | { readonly kind: 'respond'; readonly response: HttpResponse; readonly info?: IdempotencyInfo }
  /** Run the handler once, then hand its response to `finish` before sending it. */
  | {
      readonly kind: 'run'
      readonly info: IdempotencyInfo
      /**
       * Records the handler's response. Resolves to the response to send instead, or
       * `undefined` to send the handler's own (it is stored, or it is a failure not stored).
       */
      finish(settled: Settled<CapturedResponse>): Promise<HttpResponse | undefined>
    }

/** The guard of one route. */
export interface RouteGuard<Request> {
  readonly operation: string
  begin(request: Request, input: GuardInput, log: GuardLogger): Promise<Begin>
}

/** The header that marks a replayed response. */
export const REPLAYED_HEADER = 'idempotent-replayed'

/**
 * Prepares the guard of one route: operation name, operation code, codec and classifier are
 * computed once here, not per request.
 * @param defaultOperation `METHOD /route/pattern`, used unless the route names its operation.
 */
export function createRouteGuard<Request>(
  options: ResolvedOptions<Request>,
  route: ResolvedRoute<Request>,
  defaultOperation: string,
): RouteGuard<Request> {
  const operation = route.operation ?? defaultOperation
  const opcode = operationCode(operation)
  const codec: Codec<CapturedResponse> = responseCodec(route.storedHeaders, route.maxResponseBytes)
  const classify = settledClassifier(route.classify)
  const { store, secrets } = options
  const keyFor = (version: number, digest: string) => storeKey(store.keyPrefix, version, opcode, digest)

  async function begin(request: Request, input: GuardInput, log: GuardLogger): Promise<Begin> {
    const header = parseKeyHeader(input.keyHeader, input.keyHeaderLines)
    if (header.kind === 'missing') {
      if (!route.required) return { kind: 'pass' }
      return problem(ProblemCode.KEY_MISSING, 'This operation requires an Idempotency-Key header.')
    }
    if (header.kind === 'invalid') return problem(ProblemCode.KEY_INVALID, header.reason)

    const found = options.principal === undefined ? undefined : options.principal(request)
    const principal = principalOf(isPromiseLike(found) ? await found : found)
    if (principal === undefined) {
      return problem(ProblemCode.PRINCIPAL_REQUIRED, 'An idempotency key is scoped to its caller; authenticate first.')
    }
    const scope = { principal, key: header.key, operation }
    const digest = scopeDigest(secrets, secrets.current, scope)
    const legacyKeys =
      secrets.versions.length === 1
        ? undefined
        : secrets.versions.slice(1).map((version) => keyFor(version, scopeDigest(secrets, version, scope)))
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
    return run(keyFor(secrets.current, digest), legacyKeys, fingerprint, digest.slice(0, 12), log)
  }

  /**
   * Runs the executor and answers as soon as it decides: `respond` when it answers without
   * running (replay, 409, 422, 503...), `run` when it starts the action, which then waits for
   * `finish` to hand it the handler's response.
   */
  function run(
    key: string,
    legacyKeys: readonly string[] | undefined,
    fingerprint: string,
    short: string,
    log: GuardLogger,
  ): Promise<Begin> {
    return new Promise<Begin>((resolve, reject) => {
      let started = false
      const outcome = execute<CapturedResponse>({
        store,
        key,
        legacyKeys,
        operation,
        fingerprint,
        codec,
        policy: route.policy,
        classify,
        onEvent: (event) => logEvent(log, short, event),
        recordRetryMs: options.recordRetryMs,
        claimTimeoutMs: options.claimTimeoutMs,
        unavailableRetryAfterMs: options.unavailableRetryAfterMs,
        action: (context) => {
          started = true
          return new Promise<CapturedResponse>((handled, failed) => {
            resolve({
              kind: 'run',
              info: runInfo(context, short),
              async finish(settled) {
                if (settled.ok) handled(settled.value)
                else failed(settled.error)
                const result = await outcome
                logOutcome(log, short, result)
                if (result.kind !== 'UNRECORDED') return undefined
                return problemResponse(
                  ProblemCode.STORE_UNAVAILABLE,
                  'The request was processed but its response could not be recorded; retry with the same key.',
                  options.unavailableRetryAfterMs,
                )
              },
            })
          })
        },
      })
      outcome.then((result) => {
        if (started) return
        logOutcome(log, short, result)
        resolve(respondTo(result, short))
      }, reject)
    })
  }

  function principalOf(found: unknown): string | undefined {
    if (found === undefined || found === null || found === '') return options.anonymous ? '' : undefined
    if (typeof found === 'number') return String(found)
    if (typeof found !== 'string') throw new TypeError('The principal option must return a string or undefined.')
    return found
  }

  function respondTo(result: ExecuteOutcome<CapturedResponse>, digest: string): Begin {
    switch (result.kind) {
      case 'REPLAYED': {
        const stored = result.value
        return {
          kind: 'respond',
          info: { fencingToken: 0, signal: REPLAY_SIGNAL, replayed: true, digest },
          response: {
            status: stored.status,
            headers: { ...stored.headers, [REPLAYED_HEADER]: 'true' },
            body: stored.body,
          },
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
      default:
        // STORE_UNAVAILABLE, and outcomes that only follow a run (unreachable before one).
        return problem(
          ProblemCode.STORE_UNAVAILABLE,
          'The idempotency store could not be reached; nothing was processed. Retry with the same key.',
          result.kind === 'STORE_UNAVAILABLE' ? result.retryAfterMs : options.unavailableRetryAfterMs,
        )
    }
  }

  return { operation, begin }
}

function problem(code: ProblemCode, detail: string, retryAfterMs?: number): Begin {
  return { kind: 'respond', response: problemResponse(code, detail, retryAfterMs) }
}

/** A replay runs nothing, so there is nothing to abort: its signal never fires. */
const REPLAY_SIGNAL = new AbortController().signal

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
  const idempotency: Record<string, unknown> = { digest, outcome: result.kind }
  if ('attempt' in result) idempotency.attempt = result.attempt
  if ('reason' in result) idempotency.reason = result.reason
  if (result.kind === 'FAILED') {
    idempotency.classification = result.classification
    idempotency.recorded = result.recorded
    if (result.settled.ok && result.classification === 'unknown' && result.settled.value.status < 500) {
      // A stored-looking result that could not be stored (too large, or not encodable).
      log.warn({ idempotency }, 'idempotent response not stored; retries answer recovery-required')
      return
    }
  }
  if (result.kind === 'UNRECORDED' || result.kind === 'STORE_UNAVAILABLE') {
    log.error({ idempotency, err: 'cause' in result ? result.cause : undefined }, 'idempotency store failed')
    return
  }
  log.info({ idempotency }, 'idempotency outcome')
}

function logEvent(log: GuardLogger, digest: string, event: ExecutorEvent): void {
  if (event.type === 'renew-refused') {
    log.warn(
      { idempotency: { digest, attempt: event.attempt, renew: event.result } },
      'idempotency lease lost to a takeover',
    )
  } else if (event.type === 'renew-failed') {
    log.warn({ idempotency: { digest }, err: event.error }, 'idempotency lease renewal failed')
  }
}

/** What the handler of a run sees: the signal is read through, so it is only made when asked for. */
function runInfo(context: ActionContext, digest: string): IdempotencyInfo {
  return {
    fencingToken: context.fencingToken,
    get signal() {
      return context.signal
    },
    replayed: false,
    digest,
  }
}

function isPromiseLike<T>(value: T | PromiseLike<T>): value is PromiseLike<T> {
  return typeof value === 'object' && value !== null && typeof (value as { then?: unknown }).then === 'function'
}
