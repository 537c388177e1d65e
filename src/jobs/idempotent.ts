/**
 * `idempotent(fn, options)` (also `makeIdempotent`): a function with `fn`'s parameters that runs
 * `fn` at most once per key and hands every later call with that key the stored result
 * (docs/jobs.md). `fn` is called with the caller's arguments and then one more, the run's
 * context (`{ fencingToken, signal, db, tx }`); what the caller must act on is thrown as a typed
 * error with a stable code, so a queue's own retry does the right thing.
 */
import type { ActionContext } from '../core/run/types.js'
import { answer, IdempotentCall } from './call.js'
import { type IdempotentOptions, parseIdempotentOptions } from './options.js'

type IsAny<T> = 0 extends 1 & T ? true : false

/** Whether a parameter's type is the run's context: an object type with only `ActionContext`'s properties. */
type IsContext<L> =
  IsAny<L> extends true
    ? false
    : unknown extends L
      ? false
      : [L] extends [object]
        ? [keyof L] extends [never]
          ? false
          : [Exclude<keyof L, keyof ActionContext>] extends [never]
            ? true
            : false
        : false

/**
 * The wrapped function's parameters: `fn`'s, without its last one when that is the context
 * (`ActionContext`, or an object type with some of its properties, e.g. `{ db }: ActionContext`).
 */
export type CallerArgs<F extends (...args: never[]) => unknown> =
  Parameters<F> extends [...infer A, infer L] ? (IsContext<L> extends true ? A : Parameters<F>) : Parameters<F>

/** What `fn` resolves to. */
export type CallResult<F extends (...args: never[]) => unknown> = Awaited<ReturnType<F>>

/**
 * A function whose parameters are optional or a rest would receive the context in place of an
 * argument the caller left out: such a `fn` is refused by its type.
 */
type FixedArity<F extends (...args: never[]) => unknown> = number extends Parameters<F>['length']
  ? {
      readonly 'fn takes a rest parameter: the context is passed after the arguments, so give fn fixed parameters': never
    }
  : Parameters<F> extends Required<Parameters<F>>
    ? unknown
    : {
        readonly 'fn takes optional parameters: the context is passed after the arguments given, so make them required (pass undefined)': never
      }

/** The wrapped function: `fn`'s parameters (without the context), a promise of its result. */
export type IdempotentFunction<A extends readonly unknown[], R> = (...args: A) => Promise<R>

/**
 * Makes `fn` idempotent: the returned function runs `fn` at most once per key (the `key`
 * option, from the arguments) and answers every later call with the key with the stored result.
 *
 * `fn` is called with the arguments the caller gave, then the run's context: its
 * `fencingToken` (pass it to what you write), its `signal` (stop when it fires: another call
 * took the key over) and, with `transaction: true`, `db`; with `transaction: <an ORM's adapter>`,
 * the ORM's transaction object, `adapter.tx(context)`.
 *
 * @returns a function that resolves to `fn`'s result (run now, or stored), or rejects with
 *   `fn`'s own error, `IdempotencyInProgressError` or `StoreUnavailableError` (call again after
 *   `retryAfterMs`), `IdempotencyKeyReusedError` or `IdempotencyRecoveryRequiredError` (calling
 *   again cannot help); `ERR_IDEM_INVALID_ARGUMENT` when the key cannot be taken from the arguments.
 * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` (or `ERR_IDEM_INVALID_SECRET`) for a bad option, at once.
 */
export function idempotent<F extends (...args: never[]) => unknown>(
  fn: F,
  options: IdempotentOptions<CallerArgs<F>, CallResult<F>> & FixedArity<F>,
): IdempotentFunction<CallerArgs<F>, CallResult<F>> {
  type A = CallerArgs<F>
  type R = CallResult<F>
  if (typeof fn !== 'function') {
    throw new TypeError('idempotent(fn, options): fn must be a function.')
  }
  const call = new IdempotentCall<A, R>(parseIdempotentOptions<A, R>(options))
  const run = fn as unknown as (...args: unknown[]) => R | Promise<R>
  const named = {
    async [fn.name || 'idempotent'](...args: A): Promise<R> {
      const called = await call.invoke(args, (context) => run(...args, context))
      return answer(called, call.options)
    },
  }
  return named[fn.name || 'idempotent'] as IdempotentFunction<A, R>
}

/** `idempotent()` under the name AWS Powertools gives it. */
export const makeIdempotent: typeof idempotent = idempotent
