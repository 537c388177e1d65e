/**
 * The argument checks every store makes before it reads or writes anything, written once: a
 * malformed call throws `ERR_IDEM_INVALID_ARGUMENT` (a programmer error, certainly not applied),
 * so every store accepts exactly the same calls. The Redis scripts then need to check only what
 * would corrupt a record if it slipped through.
 */
import { ErrorCode, IdempotencyError } from './errors.js'
import type { FailureCause } from './failure-cause.js'
import { ExpiredExecution, FailureKind } from './record.js'
import type { ClaimRequest, OwnerRef, RecordTimes } from './store.js'

/**
 * The largest duration, attempt or rev a call may carry: 15 digits, so `now + value` stays an
 * exact integer in a double (Lua numbers and JavaScript numbers alike).
 */
export const MAX_INTEGER = 999_999_999_999_999

/** Owner tokens are 32 random bytes as 64 lowercase hex characters (docs/design.md §2 "Attempt"). */
const OWNER_TOKEN = /^[0-9a-f]{64}$/
/** The values of `ClaimRequest.expiredExecution`. */
const EXPIRED_EXECUTIONS: ReadonlySet<unknown> = new Set(Object.values(ExpiredExecution))

function invalid(message: string): never {
  throw new IdempotencyError(ErrorCode.INVALID_ARGUMENT, message)
}

function isPositiveInteger(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= MAX_INTEGER
}

function checkDuration(times: RecordTimes, name: keyof RecordTimes): void {
  if (typeof times !== 'object' || times === null || !isPositiveInteger(times[name])) {
    invalid(`${name} must be a positive integer number of milliseconds, at most ${MAX_INTEGER}.`)
  }
}

/** A store key: a non-empty string. */
export function checkKey(key: unknown): void {
  if (typeof key !== 'string' || key.length === 0) invalid('The store key must be a non-empty string.')
}

/** An owner token: 64 lowercase hex characters. */
export function checkOwner(owner: unknown): void {
  if (typeof owner !== 'string' || !OWNER_TOKEN.test(owner)) {
    invalid('The owner token must be 64 lowercase hex characters (newOwnerToken()).')
  }
}

/** What renew reads of an owner reference: key, owner and attempt. */
export function checkHolder(ref: OwnerRef): void {
  if (typeof ref !== 'object' || ref === null) invalid('The owner reference must be an object.')
  checkKey(ref.key)
  checkOwner(ref.owner)
  if (!isPositiveInteger(ref.attempt)) invalid('The attempt must be a positive integer.')
}

/** A whole owner reference, rev included, as the compare-and-set transitions read it. */
export function checkRef(ref: OwnerRef): void {
  checkHolder(ref)
  if (!isPositiveInteger(ref.rev)) invalid('The rev must be a positive integer.')
}

/** The times a call uses. */
export function checkTimes(times: RecordTimes, ...names: readonly (keyof RecordTimes)[]): void {
  for (const name of names) checkDuration(times, name)
}

/** A codec-encoded response: bytes (it may be empty). */
export function checkResponse(response: unknown): void {
  if (!(response instanceof Uint8Array))
    invalid('The response to complete with must be bytes (a Buffer or Uint8Array).')
}

/** A failure kind: `retryable` or `unknown`. */
export function checkFailureKind(kind: unknown): void {
  if (kind !== FailureKind.RETRYABLE && kind !== FailureKind.UNKNOWN) {
    invalid(`The failure kind must be "${FailureKind.RETRYABLE}" or "${FailureKind.UNKNOWN}".`)
  }
}

/** A whole claim request. */
export function checkClaim(request: ClaimRequest): void {
  if (typeof request !== 'object' || request === null) invalid('The claim request must be an object.')
  checkKey(request.key)
  checkOwner(request.owner)
  for (const name of ['fingerprint', 'operation', 'codec', 'policy'] as const) {
    const value: unknown = request[name]
    if (typeof value !== 'string' || value.length === 0) invalid(`The claim's ${name} must be a non-empty string.`)
  }
  const legacy: unknown = request.legacyFingerprints
  if (
    legacy !== undefined &&
    (!Array.isArray(legacy) || !legacy.every((fp) => typeof fp === 'string' && fp.length > 0))
  ) {
    invalid('legacyFingerprints must be an array of non-empty strings.')
  }
  if (typeof request.start !== 'boolean') invalid("The claim's start must be a boolean.")
  if (request.wait !== undefined && typeof request.wait !== 'boolean') invalid("The claim's wait must be a boolean.")
  if (!EXPIRED_EXECUTIONS.has(request.expiredExecution)) {
    invalid(
      `expiredExecution must be "${ExpiredExecution.RECOVER}", "${ExpiredExecution.TAKEOVER}" or "${ExpiredExecution.RESUME}".`,
    )
  }
  checkDuration(request, 'leaseMs')
  checkDuration(request, 'failureRetentionMs')
}

// Each call's checks, in the order the store reads its arguments (src/core/store-front.ts runs them).

/** `inspect(key, owner)`. */
export function checkInspect(key: string, owner: string): void {
  checkKey(key)
  checkOwner(owner)
}

/** `start(ref, times)`: the whole reference, the lease and the retention. */
export function checkStart(ref: OwnerRef, times: RecordTimes): void {
  checkRef(ref)
  checkTimes(times, 'leaseMs', 'failureRetentionMs')
}

/** `complete(ref, response, times)` and a transaction's `commit()`: the reference, the bytes, the replay window. */
export function checkComplete(ref: OwnerRef, response: Uint8Array, times: RecordTimes): void {
  checkRef(ref)
  checkResponse(response)
  checkTimes(times, 'replayWindowMs')
}

/** `markFailed(ref, kind, times, cause)`: the reference, the kind, the retention, the cause if any. */
export function checkMarkFailed(ref: OwnerRef, kind: FailureKind, times: RecordTimes, cause?: FailureCause): void {
  checkRef(ref)
  checkFailureKind(kind)
  checkTimes(times, 'failureRetentionMs')
  if (cause === undefined) return
  const { class: name, message } = (cause ?? {}) as Partial<FailureCause>
  if (typeof name !== 'string' || (message !== undefined && typeof message !== 'string')) {
    invalid('The failure cause must be { class: string, message?: string }.')
  }
}

/** `renew(ref, times)`: key, owner and attempt (not rev), the lease and the retention. */
export function checkRenew(ref: OwnerRef, times: RecordTimes): void {
  checkHolder(ref)
  checkTimes(times, 'leaseMs', 'failureRetentionMs')
}
