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
  constructor(message: string, options?: ErrorOptions) {
    super(ErrorCode.STORE_UNAVAILABLE, message, options)
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

/** Throws an `ERR_IDEM_INVALID_OPTION` error naming the option and what it accepts. */
export function invalidOption(name: string, accepts: string, got: unknown): never {
  throw new IdempotencyError(ErrorCode.INVALID_OPTION, `Option "${name}" must be ${accepts}; got ${describe(got)}.`)
}

function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)
  if (typeof value === 'function') return 'a function'
  if (value === null || value === undefined || typeof value !== 'object') return String(value)
  return Array.isArray(value) ? 'an array' : 'an object'
}
