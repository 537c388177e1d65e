/**
 * A bound on every store call the executor makes, whatever the store's client is set to (docs/
 * design.md §4): a client without a command timeout, or one that drops the calls in flight at
 * a disconnect without rejecting them, would otherwise leave a request waiting forever. A call
 * past its bound counts as sent with its reply lost (`StoreIndeterminateError`): the executor
 * reconciles it as it does any lost reply (inspect with its token, re-send within the call's
 * budget), so the bound never decides more than a timeout of the client's would.
 */
import { StoreIndeterminateError } from './errors.js'

/** The default bound on one store call, in milliseconds (`storeCallTimeoutMs`). */
export const DEFAULT_STORE_CALL_TIMEOUT_MS = 2_000

/**
 * `sent`, or a `StoreIndeterminateError` once `timeoutMs` have passed without its answer.
 * @param call the call's name, for the error.
 */
export function bounded<R>(call: string, timeoutMs: number, sent: Promise<R>): Promise<R> {
  return new Promise<R>((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(
        new StoreIndeterminateError(
          `The store did not answer ${call} within ${timeoutMs} ms (storeCallTimeoutMs); it may still be applied.`,
        ),
      )
    }, timeoutMs)
    sent.then(
      (value) => {
        clearTimeout(timer)
        resolve(value)
      },
      (error: unknown) => {
        clearTimeout(timer)
        reject(error)
      },
    )
  })
}
