/**
 * What a failed call of the Redis store means (docs/design.md §4, "Lost replies"): certainly not
 * applied (`StoreUnavailableError`: 503, nothing ran), a refused argument or record, or maybe
 * applied (`StoreIndeterminateError`: the executor inspects the record before deciding).
 */
import {
  ErrorCode,
  IdempotencyError,
  StoreIndeterminateError,
  StoreProtocolError,
  StoreUnavailableError,
} from '../../core/errors.js'
import { isFunctionNotFound } from './script-calls.js'

/**
 * Error replies that Redis gives before a script runs, or at a script's first write before
 * anything was written: the call was certainly not applied. Every script writes first with
 * one SET (refused under OOM, READONLY and MISCONF as a whole) or DEL, its only write. NOPERM assumes the ACL user
 * may run all the scripts' commands (TIME, GET, SET, DEL, and TYPE, HMGET, HGET for records of
 * version 1) or none.
 */
const NOT_APPLIED_REPLIES: ReadonlySet<string> = new Set([
  'OOM',
  'LOADING',
  'BUSY',
  'READONLY',
  'MASTERDOWN',
  'CLUSTERDOWN',
  'TRYAGAIN',
  'NOREPLICAS',
  'MISCONF',
  'NOPERM',
])

/** ioredis (standalone and Cluster) rejecting a command it never wrote to a socket. */
const NOT_SENT_MESSAGES: readonly string[] = [
  "Stream isn't writeable and enableOfflineQueue options is false",
  "Cluster isn't ready and enableOfflineQueue options is false",
]

/**
 * Turns an error from an ioredis script call into this library's fault errors (docs/design.md §4 "Lost
 * replies": any error after send is indeterminate). The original error is kept as
 * `cause`.
 *
 * - `StoreUnavailableError` (certainly not applied): ioredis refused to send ("Stream isn't
 *   writeable and enableOfflineQueue options is false", and the Cluster equivalent); or a Redis
 *   error reply whose code is OOM, LOADING, BUSY, READONLY, MASTERDOWN, CLUSTERDOWN, TRYAGAIN,
 *   NOREPLICAS, MISCONF or NOPERM (Redis refused before the script wrote anything).
 * - `IdempotencyError` `ERR_IDEM_INVALID_ARGUMENT`: the script rejected its arguments
 *   (IDEMKIT_ARGS) before reading or writing anything: a programmer error, not a fault.
 * - `StoreProtocolError`: the key holds something that is not a record (IDEMKIT_CORRUPT,
 *   WRONGTYPE), found before anything was written.
 * - `StoreIndeterminateError` (may have been applied): everything else, e.g. "Command timed
 *   out", "Connection is closed.", `MaxRetriesPerRequestError`, ECONNRESET, a script runtime
 *   error, anything unknown.
 * An `IdempotencyError` is returned unchanged. (The failFast check, status not ready, happens
 * before sending and never reaches this function.)
 * @param error what the ioredis call rejected with.
 * @returns the error to throw.
 */
export function redisFault(error: unknown): IdempotencyError {
  if (error instanceof IdempotencyError) return error
  const message = error instanceof Error ? error.message : String(error)
  const options = { cause: error }
  if (NOT_SENT_MESSAGES.includes(message)) {
    return new StoreUnavailableError(
      `The Redis store could not send the call (${message}); it was not applied.`,
      options,
    )
  }
  if (error instanceof Error && error.name === 'ReplyError') {
    const code = message.slice(0, message.search(/\s|$/))
    if (NOT_APPLIED_REPLIES.has(code)) {
      return new StoreUnavailableError(`Redis refused the call with ${code}; it was not applied: ${message}`, options)
    }
    if (isFunctionNotFound(error)) {
      return new StoreUnavailableError(
        `Redis had not the store's function even once the library was loaded again (${message}); the call was not applied.`,
        options,
      )
    }
    if (code === 'IDEMKIT_ARGS') {
      return new IdempotencyError(
        ErrorCode.INVALID_ARGUMENT,
        `The Redis store rejected the call's arguments: ${message.slice(code.length + 1)}.`,
        options,
      )
    }
    if (code === 'IDEMKIT_CORRUPT' || code === 'WRONGTYPE') {
      return new StoreProtocolError(
        `The Redis key does not hold a record idemkit can read (${message}); nothing was written.`,
        options,
      )
    }
  }
  return new StoreIndeterminateError(
    `The Redis store call may or may not have been applied (${message}); inspect the record to find out.`,
    options,
  )
}

/** `redisFault` as a rejection handler. */
export function rethrowClassified(error: unknown): never {
  throw redisFault(error)
}
