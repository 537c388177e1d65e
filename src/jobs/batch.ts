/**
 * `idempotentBatch(handler, options)`: a consumer of messages that arrive in batches (an SQS
 * event, a Kafka poll, a bulk fetch) whose handler runs once per message key, each message on
 * `idempotent()`'s calls. The batch's answer says which messages failed, in the shape AWS's
 * partial batch responses take (`batchItemFailures: [{ itemIdentifier }]`), so only those are
 * delivered again. A message costs what one call costs: a replay one store round trip (the
 * claim), a first run two (the claim with its start, then the completion), and nothing per batch.
 */
import { ErrorCode, IdempotencyError, invalidOption } from '../core/errors.js'
import type { ActionContext } from '../core/run/types.js'
import { answer, IdempotentCall } from './call.js'
import { IDEMPOTENT_OPTIONS, type IdempotentOptions, parseIdempotentOptions } from './options.js'

/** Options of `idempotentBatch()`: `idempotent()`'s for one message, and how the batch is walked. */
export interface IdempotentBatchOptions<M, R> extends IdempotentOptions<[message: M], R> {
  /**
   * What `batchItemFailures` names a failed message by (SQS: its `messageId`).
   * @default the message's `messageId` when it is a string, else its key
   */
  readonly itemIdentifier?: (message: M) => string
  /**
   * How many messages of a batch are handled at once; 1 handles them in order.
   * @default 1
   */
  readonly concurrency?: number
  /**
   * For ordered queues (SQS FIFO): after the first message that fails, the rest of the batch is
   * not handled and is reported failed too, so nothing overtakes it.
   * @default false
   */
  readonly stopOnFailure?: boolean
}

/** One message's place in `batchItemFailures`. */
export interface BatchItemFailure {
  readonly itemIdentifier: string
}

/** What became of one message of a batch. */
export type BatchItemResult<M, R> =
  /** Handled now, or its key's stored result. */
  | { readonly status: 'fulfilled'; readonly message: M; readonly itemIdentifier: string; readonly value: R }
  /** Failed: the handler's own error, or what `idempotent()` throws (a typed error with `code`). */
  | { readonly status: 'rejected'; readonly message: M; readonly itemIdentifier: string; readonly reason: unknown }
  /** Not handled: an earlier message failed and `stopOnFailure` is set. */
  | { readonly status: 'skipped'; readonly message: M; readonly itemIdentifier: string }

/** A batch's answer: the messages to deliver again, and each message's result in the batch's order. */
export interface BatchResult<M, R> {
  /** The rejected and skipped messages: what an SQS-triggered Lambda function returns. */
  readonly batchItemFailures: BatchItemFailure[]
  readonly results: BatchItemResult<M, R>[]
}

/** The handler of a batch's messages: one message, and its run's context. */
export type BatchHandler<M, R> = (message: M, context: ActionContext) => R | Promise<R>

const BATCH_OPTIONS = [...IDEMPOTENT_OPTIONS, 'itemIdentifier', 'concurrency', 'stopOnFailure'] as const

/**
 * A function that handles a batch of messages, each at most once per key.
 * @returns resolves to the batch's answer; it rejects only for a batch that is not an array.
 * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` for a bad option, at once.
 */
export function idempotentBatch<M, R>(
  handler: BatchHandler<M, R>,
  options: IdempotentBatchOptions<M, R>,
): (messages: readonly M[]) => Promise<BatchResult<M, R>> {
  if (typeof handler !== 'function')
    throw new TypeError('idempotentBatch(handler, options): handler must be a function.')
  const resolved = parseIdempotentOptions<[message: M], R>(options, BATCH_OPTIONS)
  const call = new IdempotentCall<[message: M], R>(resolved)
  const concurrency = options.concurrency ?? 1
  if (!Number.isSafeInteger(concurrency) || concurrency < 1 || concurrency > 1000) {
    invalidOption('concurrency', 'an integer from 1 to 1000', concurrency)
  }
  const stopOnFailure = options.stopOnFailure ?? false
  if (typeof stopOnFailure !== 'boolean') invalidOption('stopOnFailure', 'a boolean', stopOnFailure)
  const itemIdentifier = options.itemIdentifier
  if (itemIdentifier !== undefined && typeof itemIdentifier !== 'function') {
    invalidOption('itemIdentifier', 'a function (message) => string', itemIdentifier)
  }

  /** The identifier a message is reported by. */
  function identifierOf(message: M, index: number): string {
    if (itemIdentifier !== undefined) return itemIdentifier(message)
    const messageId = (message as { messageId?: unknown } | null)?.messageId
    if (typeof messageId === 'string') return messageId
    try {
      return resolved.key([message])
    } catch {
      // No key to name it by: its place in the batch (its result says why it failed).
      return String(index)
    }
  }

  async function one(message: M, index: number): Promise<BatchItemResult<M, R>> {
    let identifier: string
    try {
      identifier = identifierOf(message, index)
    } catch (error) {
      return { status: 'rejected', message, itemIdentifier: String(index), reason: error }
    }
    try {
      const called = await call.invoke([message], (context) => handler(message, context))
      return { status: 'fulfilled', message, itemIdentifier: identifier, value: answer(called, resolved) }
    } catch (reason) {
      return { status: 'rejected', message, itemIdentifier: identifier, reason }
    }
  }

  return async function handleBatch(messages) {
    if (!Array.isArray(messages)) {
      throw new IdempotencyError(
        ErrorCode.INVALID_ARGUMENT,
        'idempotentBatch(): the batch must be an array of messages.',
      )
    }
    const results: BatchItemResult<M, R>[] = new Array(messages.length)
    let next = 0
    let failed = false
    async function lane(): Promise<void> {
      while (next < messages.length) {
        const index = next++
        const message = messages[index] as M
        if (failed && stopOnFailure) {
          results[index] = { status: 'skipped', message, itemIdentifier: safeIdentifier(message, index) }
          continue
        }
        const result = await one(message, index)
        if (result.status === 'rejected') failed = true
        results[index] = result
      }
    }
    function safeIdentifier(message: M, index: number): string {
      try {
        return identifierOf(message, index)
      } catch {
        return String(index)
      }
    }
    // With stopOnFailure the messages go one at a time, in order: nothing may overtake a failure.
    const lanes = stopOnFailure ? 1 : Math.min(concurrency, messages.length)
    await Promise.all(Array.from({ length: lanes }, lane))
    const batchItemFailures = results
      .filter((result) => result.status !== 'fulfilled')
      .map((result) => ({ itemIdentifier: result.itemIdentifier }))
    return { batchItemFailures, results }
  }
}
