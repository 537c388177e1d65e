/**
 * One error base with stable codes. Outcomes are values (see `outcomes.ts`); these errors are
 * faults and programmer errors only. Every code has an entry in docs/errors.md (a test checks it).
 */

/** Stable error codes. */
export const ErrorCode = {
  /** An option is missing, unknown or out of range. */
  INVALID_OPTION: 'ERR_IDEM_INVALID_OPTION',
  /** A secret is missing, too short, or its version is not a positive integer. */
  INVALID_SECRET: 'ERR_IDEM_INVALID_SECRET',
  /** An argument to a core function has the wrong shape (key, principal, operation, body). */
  INVALID_ARGUMENT: 'ERR_IDEM_INVALID_ARGUMENT',
  /** The store certainly did not apply the call: nothing was sent. */
  STORE_UNAVAILABLE: 'ERR_IDEM_STORE_UNAVAILABLE',
  /** The store may have applied the call: it was sent and no reply came back. */
  STORE_INDETERMINATE: 'ERR_IDEM_STORE_INDETERMINATE',
  /** The store answered with a reply of an unexpected shape. */
  STORE_PROTOCOL: 'ERR_IDEM_STORE_PROTOCOL',
  /** A Lua script include could not be resolved (missing file or a cycle). */
  SCRIPT_LOAD: 'ERR_IDEM_SCRIPT_LOAD',
  /** An action's lease was lost: a renewal was refused or none was confirmed for a whole lease. */
  LEASE_LOST: 'ERR_IDEM_LEASE_LOST',
  /** A response could not be encoded for storage (too large, or not serialisable). */
  RESPONSE_NOT_STORABLE: 'ERR_IDEM_RESPONSE_NOT_STORABLE',
  /** The store's server is set up so that records could be lost early (e.g. Redis may evict keys). */
  STORE_MISCONFIGURED: 'ERR_IDEM_STORE_MISCONFIGURED',
  /** An action ended the transaction it was given (COMMIT or ROLLBACK of its own): its writes are not covered. */
  TRANSACTION_ENDED: 'ERR_IDEM_TRANSACTION_ENDED',
  /** An operator's resolve was refused: the record is running or completed (without force), or changed since it was read. */
  RESOLVE_REFUSED: 'ERR_IDEM_RESOLVE_REFUSED',
  /** `idempotent()`: another call with the same key is running; nothing ran. Retry after `retryAfterMs`. */
  IN_PROGRESS: 'ERR_IDEM_IN_PROGRESS',
  /** `idempotent()`: the key was used before with other arguments (another fingerprint); nothing ran. */
  KEY_REUSED: 'ERR_IDEM_KEY_REUSED',
  /** `idempotent()`: an earlier call with the key may have had its effect, and nothing says whether; nothing ran. */
  RECOVERY_REQUIRED: 'ERR_IDEM_RECOVERY_REQUIRED',
  /**
   * `step(name, run)` used in a way a re-run could not repeat safely: a name used twice in one
   * run, two steps at once, writes made outside a step before it, or a result that is not JSON.
   */
  STEP_MISUSED: 'ERR_IDEM_STEP_MISUSED',
} as const
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode]

/** Base class of every error this library throws. */
export class IdempotencyError extends Error {
  /** A stable `ERR_IDEM_*` code. */
  readonly code: ErrorCode

  /**
   * @param code the stable error code.
   * @param message a full sentence saying what went wrong and what to do.
   * @param options `cause`, when another error is behind this one.
   */
  constructor(code: ErrorCode, message: string, options?: ErrorOptions) {
    super(message, options)
    this.code = code
    this.name = new.target.name
  }
}

/** The store call was certainly not applied: nothing reached the store. */
export class StoreUnavailableError extends IdempotencyError {
  /** When `idempotent()` throws it: how long to wait before calling again, in milliseconds. */
  readonly retryAfterMs: number | undefined

  /** @param options `cause`, and `retryAfterMs` when the caller is told when to try again. */
  constructor(message: string, options?: ErrorOptions & { readonly retryAfterMs?: number }) {
    super(ErrorCode.STORE_UNAVAILABLE, message, options)
    this.retryAfterMs = options?.retryAfterMs
  }
}

/** The store call may or may not have been applied (sent, reply lost or timed out). */
export class StoreIndeterminateError extends IdempotencyError {
  constructor(message: string, options?: ErrorOptions) {
    super(ErrorCode.STORE_INDETERMINATE, message, options)
  }
}

/** The store replied with something this library does not understand. */
export class StoreProtocolError extends IdempotencyError {
  constructor(message: string, options?: ErrorOptions) {
    super(ErrorCode.STORE_PROTOCOL, message, options)
  }
}

/**
 * `idempotent()`: another call with the same key holds it (its lease is live); the function did
 * not run. A queue retries the message after `retryAfterMs` (docs/jobs.md).
 */
export class IdempotencyInProgressError extends IdempotencyError {
  /** How long to wait before calling again with the same key, in milliseconds. */
  readonly retryAfterMs: number

  constructor(message: string, retryAfterMs: number) {
    super(ErrorCode.IN_PROGRESS, message)
    this.retryAfterMs = retryAfterMs
  }
}

/**
 * `idempotent()`: the key was used before with other arguments (docs/design.md §3 step 2); the
 * function did not run, and retrying the same call cannot succeed.
 */
export class IdempotencyKeyReusedError extends IdempotencyError {
  constructor(message: string) {
    super(ErrorCode.KEY_REUSED, message)
  }
}

/**
 * `idempotent()`: the key's record says an earlier call may have had its effect (ABANDONED, or
 * EXECUTING past its lease), or holds an answer this deployment cannot read; the function did not
 * run. Only a person (`idemkit resolve`) or the record's expiry settles it (docs/operations.md).
 */
export class IdempotencyRecoveryRequiredError extends IdempotencyError {
  /** `ABANDONED`, `EXPIRED_EXECUTION`, `CODEC_MISMATCH` or `POLICY_MISMATCH` (`RecoveryReason`). */
  readonly reason: string

  constructor(message: string, reason: string) {
    super(ErrorCode.RECOVERY_REQUIRED, message)
    this.reason = reason
  }
}

/** Throws an `ERR_IDEM_INVALID_OPTION` error naming the option and what it accepts. */
export function invalidOption(name: string, accepts: string, got: unknown): never {
  throw new IdempotencyError(ErrorCode.INVALID_OPTION, `Option "${name}" must be ${accepts}; got ${describe(got)}.`)
}

/** Whether `value` is a safe integer from `min` to `max`: the range check of every integer option. */
export function isIntegerIn(value: unknown, min: number, max: number): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= min && value <= max
}

/**
 * The check of every integer option: returns `value` when it is a safe integer from
 * `min` to `max` (no upper bound when `max` is undefined), and otherwise throws
 * `ERR_IDEM_INVALID_OPTION` naming the option, its unit and the accepted range.
 * @param unit what the integer counts ('milliseconds', 'bytes'); omitted for a plain count.
 */
export function integerOption(name: string, value: unknown, min: number, max?: number, unit?: string): number {
  if (isIntegerIn(value, min, max ?? Number.MAX_SAFE_INTEGER)) return value
  const of = unit === undefined ? '' : ` number of ${unit}`
  let accepts = `an integer${of} from ${min} to ${max}`
  if (max === undefined) {
    if (min === 1) accepts = `a positive integer${of}`
    else if (min === 0) accepts = `a non-negative integer${of}`
    else accepts = `an integer${of} of at least ${min}`
  }
  invalidOption(name, accepts, value)
}

function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)
  if (typeof value === 'function') return 'a function'
  if (value === null || value === undefined || typeof value !== 'object') return String(value)
  return Array.isArray(value) ? 'an array' : 'an object'
}
