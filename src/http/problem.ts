/**
 * The layer's own answers as RFC 9457 problem details, one stable `type` and `code` per row of
 * docs/design.md §5, and the single mapping from an executor outcome to a response that every adapter
 * sends. These answers are never stored as an operation's result.
 */
import { ErrorCode, IdempotencyError } from '../core/errors.js'
import type { Decided, Finished } from '../core/executor.js'
import { type Settled, UnrecordedReason } from '../core/outcomes.js'

/** A framework-neutral HTTP response. */
export interface HttpResponse {
  readonly status: number
  readonly headers: Readonly<Record<string, string | string[]>>
  readonly body: string | Buffer
}

/** Problem codes, one per situation (docs/errors.md, which a test holds to this table). */
export const ProblemCode = {
  KEY_MISSING: 'IDEMPOTENCY_KEY_MISSING',
  KEY_INVALID: 'IDEMPOTENCY_KEY_INVALID',
  PRINCIPAL_REQUIRED: 'IDEMPOTENCY_PRINCIPAL_REQUIRED',
  IN_FLIGHT: 'IDEMPOTENCY_IN_FLIGHT',
  KEY_REUSED: 'IDEMPOTENCY_KEY_REUSED',
  RECOVERY_REQUIRED: 'IDEMPOTENCY_RECOVERY_REQUIRED',
  STORE_UNAVAILABLE: 'IDEMPOTENCY_STORE_UNAVAILABLE',
  ROUTE_UNPROTECTED: 'IDEMPOTENCY_ROUTE_UNPROTECTED',
  BODY_UNREAD: 'IDEMPOTENCY_BODY_UNREAD',
  BODY_INVALID: 'IDEMPOTENCY_BODY_INVALID',
} as const
export type ProblemCode = (typeof ProblemCode)[keyof typeof ProblemCode]

interface ProblemRow {
  readonly status: number
  readonly slug: string
  readonly title: string
  /**
   * Whether the same request, retried with the same key, can get another answer: sent as the
   * body's `retryable` and the `x-should-retry` header (docs/errors.md).
   */
  readonly retryable: boolean
}

const ROWS: Readonly<Record<ProblemCode, ProblemRow>> = {
  IDEMPOTENCY_KEY_MISSING: {
    status: 400,
    slug: 'key-missing',
    title: 'Idempotency-Key header required',
    retryable: false,
  },
  IDEMPOTENCY_KEY_INVALID: {
    status: 400,
    slug: 'key-invalid',
    title: 'Idempotency-Key header malformed',
    retryable: false,
  },
  IDEMPOTENCY_PRINCIPAL_REQUIRED: {
    status: 401,
    slug: 'principal-required',
    title: 'Authentication required',
    retryable: false,
  },
  IDEMPOTENCY_IN_FLIGHT: {
    status: 409,
    slug: 'in-flight',
    title: 'A request with this key is in progress',
    retryable: true,
  },
  IDEMPOTENCY_KEY_REUSED: {
    status: 422,
    slug: 'key-reused',
    title: 'Idempotency key reused with a different request',
    retryable: false,
  },
  IDEMPOTENCY_RECOVERY_REQUIRED: {
    status: 503,
    slug: 'recovery-required',
    title: 'The outcome of an earlier request with this key is unknown',
    retryable: false,
  },
  IDEMPOTENCY_STORE_UNAVAILABLE: {
    status: 503,
    slug: 'store-unavailable',
    title: 'Idempotency store unavailable',
    retryable: true,
  },
  IDEMPOTENCY_ROUTE_UNPROTECTED: {
    status: 500,
    slug: 'route-unprotected',
    title: 'Idempotent route registered where the idempotency plugin cannot see it',
    retryable: false,
  },
  IDEMPOTENCY_BODY_UNREAD: {
    status: 415,
    slug: 'body-unread',
    title: 'The request body was not read by any body parser',
    retryable: false,
  },
  IDEMPOTENCY_BODY_INVALID: {
    status: 400,
    slug: 'body-invalid',
    title: 'The request body cannot be fingerprinted',
    retryable: false,
  },
}

/**
 * The header on every answer of a protected request (docs/errors.md#the-idempotency-status-header):
 * `executed` on the handler's own answer, `replayed` on a stored one, and the problem's slug
 * (`in-flight`, `key-reused`, ...) on each of the layer's refusals.
 */
export const STATUS_HEADER = 'idempotency-status'

/** The status of an answer the handler gave on this request. */
export const STATUS_EXECUTED = 'executed'

/** The status of a replayed answer. */
export const STATUS_REPLAYED = 'replayed'

/** The header that also marks a replayed response (`true`), as several APIs send it. */
export const REPLAYED_HEADER = 'idempotent-replayed'

/**
 * What a client's SDK reads before its own retry rules (the Stainless-generated ones: openai,
 * anthropic): `true` or `false`, as the problem's `retryable` says.
 */
export const SHOULD_RETRY_HEADER = 'x-should-retry'

/** The stable problem `type` URI of a code. */
export function problemType(code: ProblemCode): string {
  return `urn:idemkit:problem:${ROWS[code].slug}`
}

/** The HTTP status of a code. */
export function problemStatus(code: ProblemCode): number {
  return ROWS[code].status
}

/** Whether a retry of the same request with the same key can get another answer. */
export function problemRetryable(code: ProblemCode): boolean {
  return ROWS[code].retryable
}

/**
 * Builds a problem+json response.
 * @param retryAfterMs when given, a `Retry-After` header in whole seconds (at least 1).
 */
export function problemResponse(code: ProblemCode, detail: string, retryAfterMs?: number): HttpResponse {
  const row = ROWS[code]
  const headers: Record<string, string> = {
    'content-type': 'application/problem+json; charset=utf-8',
    'cache-control': 'no-store',
    [STATUS_HEADER]: row.slug,
    [SHOULD_RETRY_HEADER]: row.retryable ? 'true' : 'false',
  }
  if (retryAfterMs !== undefined) headers['retry-after'] = String(retryAfterSeconds(retryAfterMs))
  const body = JSON.stringify({
    type: problemType(code),
    title: row.title,
    status: row.status,
    detail,
    code,
    retryable: row.retryable,
  })
  return { status: row.status, headers, body }
}

/** Retry-After in whole seconds, rounded up, at least 1 (RFC 9110 §10.2.3). */
export function retryAfterSeconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000))
}

/** The answer to an outcome decided without running the handler, a replay aside (the guard builds it). */
export function decidedResponse(result: Exclude<Decided<unknown>, { kind: 'REPLAYED' }>): HttpResponse {
  switch (result.kind) {
    case 'IN_PROGRESS':
      return problemResponse(
        ProblemCode.IN_FLIGHT,
        'A request with this idempotency key is still being processed; retry later.',
        result.retryAfterMs,
      )
    case 'FINGERPRINT_MISMATCH':
      return problemResponse(
        ProblemCode.KEY_REUSED,
        'This idempotency key was already used with a different request (method, path, query or body).',
      )
    case 'RECOVERY_REQUIRED':
      return problemResponse(ProblemCode.RECOVERY_REQUIRED, recoveryDetail(result.reason))
    case 'STORE_UNAVAILABLE':
      return problemResponse(
        ProblemCode.STORE_UNAVAILABLE,
        'The idempotency store could not be reached; nothing was processed. Retry with the same key.',
        result.retryAfterMs,
      )
  }
}

/**
 * The answer sent instead of the handler's own once its outcome is recorded (docs/design.md §5):
 * `undefined` when the handler's response goes out (stored, or a failure that is not stored), a
 * 503 when it was processed but not recorded, or rolled back, or when the handler stopped because
 * another request took the key over (a step refused, the lease's signal).
 * @param inTransaction whether the handler ran in a transaction of the store's.
 */
export function finishedResponse(
  result: Finished<unknown>,
  inTransaction: boolean,
  retryAfterMs: number,
): HttpResponse | undefined {
  if (result.kind === 'FAILED') {
    const stop = layerStop(result.settled)
    if (stop === 'lease-lost') return takenOverResponse(retryAfterMs)
    return stop === 'store' ? storeFailedInHandlerResponse(retryAfterMs) : undefined
  }
  if (result.kind !== 'UNRECORDED') return undefined
  // In a transaction a completion refused as not ours rolled back as well: nothing was kept.
  if (
    result.reason === UnrecordedReason.ROLLED_BACK ||
    (result.reason === UnrecordedReason.LOST_OWNERSHIP && inTransaction)
  ) {
    return rolledBackResponse(retryAfterMs)
  }
  return unrecordedResponse(retryAfterMs)
}

/** The 503 sent instead of a handler's response that could not be recorded (docs/design.md §5). */
export function unrecordedResponse(retryAfterMs: number): HttpResponse {
  return problemResponse(
    ProblemCode.STORE_UNAVAILABLE,
    'The request was processed but its response could not be recorded; retry with the same key.',
    retryAfterMs,
  )
}

/**
 * Whether the handler failed with an error of the layer's own, which it answers with a 503
 * instead of the handler's error response (a 500): `lease-lost` (`ERR_IDEM_LEASE_LOST`: a step
 * whose commit was refused, or the lease's signal read; the key's answer is the request's that
 * took it over), `store` (`ERR_IDEM_STORE_UNAVAILABLE` or `ERR_IDEM_STORE_INDETERMINATE`: the
 * store failed a call the handler made through the layer, a step's commit), else `undefined`.
 */
export function layerStop(settled: Settled<unknown>): 'lease-lost' | 'store' | undefined {
  const error = settled.ok ? (settled.value as { readonly error?: unknown } | undefined)?.error : settled.error
  if (!(error instanceof IdempotencyError)) return undefined
  if (error.code === ErrorCode.LEASE_LOST) return 'lease-lost'
  return error.code === ErrorCode.STORE_UNAVAILABLE || error.code === ErrorCode.STORE_INDETERMINATE
    ? 'store'
    : undefined
}

/** The 503 sent instead of the error response of a handler stopped by a store call it made (a step). */
function storeFailedInHandlerResponse(retryAfterMs: number): HttpResponse {
  return problemResponse(
    ProblemCode.STORE_UNAVAILABLE,
    "The idempotency store failed a call this request made while it ran (a recovery point's commit), and it " +
      'stopped: what it had not committed was not kept. Retry with the same key.',
    retryAfterMs,
  )
}

/** The 503 sent instead of the error response of a handler that lost the key to another request. */
function takenOverResponse(retryAfterMs: number): HttpResponse {
  return problemResponse(
    ProblemCode.STORE_UNAVAILABLE,
    'Another request took this key over while this one ran (its lease ran out), and this one stopped: nothing it ' +
      'had not committed was kept. Retry with the same key to get the answer.',
    retryAfterMs,
  )
}

/** The 503 sent instead of a handler's response whose transaction rolled back: nothing happened. */
function rolledBackResponse(retryAfterMs: number): HttpResponse {
  return problemResponse(
    ProblemCode.STORE_UNAVAILABLE,
    'The request was not processed: its transaction was rolled back (it could not be committed, or another ' +
      'request took this key over). Retry with the same key.',
    retryAfterMs,
  )
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
