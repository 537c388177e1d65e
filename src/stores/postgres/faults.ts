/**
 * What a failed call of the PostgreSQL store means (docs/design.md §4, "Lost replies"): certainly
 * not applied (`StoreUnavailableError`: 503, nothing ran) or maybe applied
 * (`StoreIndeterminateError`: the executor inspects the record before deciding), each with its reason.
 *
 * | failure | reading | why |
 * | --- | --- | --- |
 * | no connection from the pool (refused, authentication, the server starting or stopping, `acquireTimeoutMs`) | not applied | nothing was sent |
 * | pg refused the query before writing it (`NOT_SENT_MESSAGES`) | not applied | nothing was sent |
 * | an ERROR reply, any SQLSTATE (`lock_timeout` 55P03, a cancelled statement 57014) | not applied | every call is one statement outside any transaction of the caller's: an ERROR rolled it back |
 * | an ERROR that says the table or a function is missing (`NOT_MIGRATED`) | not applied | as above; the message says to run `migrate()` |
 * | an ERROR for a privilege the role lacks (42501) | not applied | as above; the message points to `verify()`, which names the GRANTs |
 * | a serialization failure or a deadlock (40001, 40P01) | not applied, sent again (`SERIALIZATION_TRIES` in all) | the statement's own transaction rolled back: trying again is safe |
 * | the connection lost after sending, a FATAL (57P01 from `pg_terminate_backend`), no reply within `statementTimeoutMs` | may have been applied | the commit may have happened before the reply was lost |
 */
import { IdempotencyError, StoreIndeterminateError, StoreUnavailableError } from '../../core/errors.js'

/** pg's messages for a query refused before anything was written to the socket. */
const NOT_SENT_MESSAGES: readonly string[] = [
  'Client has encountered a connection error and is not queryable',
  'Client was closed and is not queryable',
]
/** SQLSTATEs that mean the table or its functions are not there (or not this version). */
const NOT_MIGRATED: ReadonlySet<string> = new Set(['42883', '42P01', '3F000', '42703', '42P13'])
/** SQLSTATEs of a transaction rolled back to be tried again: serialization failure, deadlock. */
const SERIALIZATION_FAILURES: ReadonlySet<unknown> = new Set(['40001', '40P01'])

/** Sends of one store call at most when each one fails with a serialization failure. */
export const SERIALIZATION_TRIES = 5

/**
 * Turns an error from a store call into this library's fault errors (the table above). The
 * original error is kept as `cause`; messages never carry the call's values.
 * @param error what the pool or the query rejected with.
 * @param sent false while the connection was being acquired (nothing sent yet).
 */
export function postgresFault(error: unknown, sent: boolean): IdempotencyError {
  if (error instanceof IdempotencyError) return error
  const message = error instanceof Error ? error.message : String(error)
  const options = { cause: error }
  if (!sent || NOT_SENT_MESSAGES.includes(message)) {
    return new StoreUnavailableError(
      `The PostgreSQL store could not send the call (${message}); it was not applied.`,
      options,
    )
  }
  const fields = error as { severity?: unknown; code?: unknown }
  if (fields.severity === 'ERROR' && typeof fields.code === 'string') {
    if (NOT_MIGRATED.has(fields.code)) {
      return new StoreUnavailableError(
        `The PostgreSQL store's table or functions are missing or out of date (SQLSTATE ${fields.code}: ${message}); ` +
          'run store.migrate(). The call was not applied.',
        options,
      )
    }
    if (fields.code === '42501') {
      return new StoreUnavailableError(
        `PostgreSQL refused the call for want of a privilege (SQLSTATE 42501: ${message}); it was not applied. ` +
          "The pool's role lacks grants on the store's schema, table or functions: store.verify() names them and the GRANTs to run.",
        options,
      )
    }
    return new StoreUnavailableError(
      `PostgreSQL refused the call (SQLSTATE ${fields.code}: ${message}); it was rolled back, not applied.`,
      options,
    )
  }
  return new StoreIndeterminateError(
    `The PostgreSQL store call may or may not have been applied (${message}); inspect the record to find out.`,
    options,
  )
}

/**
 * Whether a call's fault (`postgresFault`) is a serialization failure or a deadlock: its
 * statement's transaction rolled back, nothing was applied, and it may be sent again.
 */
export function isSerializationFailure(fault: unknown): boolean {
  return fault instanceof StoreUnavailableError && SERIALIZATION_FAILURES.has(sqlState(fault))
}

/**
 * Whether a call's fault (`postgresFault`) is `lock_timeout` (55P03): its statement waited for a
 * lock, ended without writing, and rolled back.
 */
export function isLockTimeout(fault: unknown): boolean {
  return fault instanceof StoreUnavailableError && sqlState(fault) === '55P03'
}

/** The SQLSTATE of the PostgreSQL error a fault was made from, if any. */
function sqlState(fault: StoreUnavailableError): unknown {
  return (fault.cause as { code?: unknown } | undefined)?.code
}

/**
 * What to hand `release()` after a call failed: nothing when the server answered with an ERROR
 * (the connection is usable), else the error, so the pool destroys a connection that may be
 * mid-reply.
 */
export function brokenBy(error: unknown): Error | undefined {
  if ((error as { severity?: unknown }).severity === 'ERROR') return undefined
  return error instanceof Error ? error : new Error(String(error))
}

/** An error's message, for a message of the store's own. */
export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error)
}
