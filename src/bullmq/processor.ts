/**
 * A BullMQ `Processor` that runs its handler at most once per key (`job.id` unless the options
 * say otherwise), on `idempotent()`'s calls (docs/jobs.md). What BullMQ should do with each
 * outcome is decided here, in BullMQ's own terms:
 *
 * | outcome | the job |
 * | --- | --- |
 * | run now, or the stored result | completes with the result |
 * | in progress, store unavailable, rolled back, not recorded | delayed by `retryAfterMs` (`moveToDelayed`, no attempt used) |
 * | the handler threw an error marked retryable | fails with it: BullMQ's `attempts` and `backoff` retry it |
 * | the handler threw any other error (effect unknown) | fails for good (`UnrecoverableError`): a retry could only answer recovery-required |
 * | key reused with other data, recovery required | fails for good (`UnrecoverableError`), the reason in `failedReason` |
 */
import { DelayedError, type Job, type Processor, UnrecoverableError } from 'bullmq'
import {
  IdempotencyInProgressError,
  IdempotencyKeyReusedError,
  IdempotencyRecoveryRequiredError,
  StoreUnavailableError,
} from '../core/errors.js'
import { Classification } from '../core/outcomes.js'
import type { ActionContext } from '../core/run/types.js'
import { answer, IdempotentCall } from '../jobs/call.js'
import {
  checkedKey,
  IDEMPOTENT_OPTIONS,
  type IdempotentOptions,
  parseIdempotentOptions,
  type ResolvedIdempotent,
} from '../jobs/options.js'

/** Options of `idempotentProcessor()`: `idempotent()`'s, with the key and fingerprint taken from the job by default. */
export interface IdempotentProcessorOptions<D, R, N extends string>
  extends Omit<IdempotentOptions<[job: Job<D, R, N>], R>, 'key'> {
  /**
   * The idempotency key of a job: a function of the job, or a property path of it
   * (`'data.orderId'`). The default, `job.id`, makes a job that BullMQ hands to a second worker
   * (a stalled job) or that a producer adds again under the same `jobId` run once; a business
   * key in the data also covers a producer that adds the same work under two job ids.
   * @default job.id
   */
  readonly key?: ((job: Job<D, R, N>) => string) | string
}

/** The handler of an idempotent processor: the job, and the run's context. */
export type IdempotentJobHandler<D, R, N extends string> = (job: Job<D, R, N>, context: ActionContext) => R | Promise<R>

/**
 * A BullMQ processor that runs `handler` at most once per key: pass it to `new Worker(queue,
 * processor, options)`.
 *
 * The fingerprint is the job's name and data by default: the same key with other data fails the
 * job for good. A job whose key is running elsewhere is delayed, without using an attempt, and
 * then completes with the stored result.
 * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` for a bad option, at once.
 */
export function idempotentProcessor<D = unknown, R = unknown, N extends string = string>(
  handler: IdempotentJobHandler<D, R, N>,
  options: IdempotentProcessorOptions<D, R, N>,
): Processor<D, R, N> {
  if (typeof handler !== 'function')
    throw new TypeError('idempotentProcessor(handler, options): handler must be a function.')
  type A = [job: Job<D, R, N>]
  const resolved: ResolvedIdempotent<A, R> = parseIdempotentOptions<A, R>(
    {
      ...options,
      key: options.key as IdempotentOptions<A, R>['key'],
      fingerprint: options.fingerprint ?? ((job) => ({ name: job.name, data: job.data })),
    },
    IDEMPOTENT_OPTIONS,
    ([job]) => checkedKey(job.id, options.operation, 'the job has the id'),
  )
  const call = new IdempotentCall<A, R>(resolved)
  return async function processor(job: Job<D, R, N>, token?: string): Promise<R> {
    const called = await call.invoke([job], (context) => handler(job, context))
    try {
      return answer(called, resolved)
    } catch (error) {
      if (error instanceof IdempotencyInProgressError || error instanceof StoreUnavailableError) {
        // Nothing of it is known to have happened yet, or the store could not say: try again
        // later, without using one of the job's attempts.
        if (token === undefined || error.retryAfterMs === undefined) throw error
        await job.moveToDelayed(Date.now() + error.retryAfterMs, token)
        throw new DelayedError(error.message)
      }
      if (error instanceof IdempotencyKeyReusedError || error instanceof IdempotencyRecoveryRequiredError) {
        throw unrecoverable(error.message, error)
      }
      const { outcome } = called
      if (outcome.kind === 'FAILED' && outcome.classification === Classification.UNKNOWN) {
        // Its effect is unknown, so any later attempt would answer recovery-required: fail now,
        // with the handler's own message first.
        const message = error instanceof Error ? error.message : String(error)
        throw unrecoverable(
          `${message} (idemkit: the handler threw an error not marked retryable, so its effect is unknown and the job is not retried; mark errors that had no effect retryable, see the "retryable" option)`,
          error,
        )
      }
      throw error
    }
  }
}

function unrecoverable(message: string, cause: unknown): UnrecoverableError {
  const error = new UnrecoverableError(message)
  Object.defineProperty(error, 'cause', { value: cause, configurable: true, writable: true })
  return error
}
