/**
 * A run in a transaction of the store's (`transaction: true`, a `TransactionalStore`): opened
 * once the scope is held, handed to the action as `db`, and ended by the run's finish. A result
 * is committed with its completion, in the transaction (refused: rolled back, not ours); anything
 * else rolls back, and since nothing of the action's writes is kept, it is recorded as
 * FAILED_RETRYABLE. A commit whose reply was lost is judged by inspecting (calls.ts, `commit`).
 */
import { causeOfError, causeOfSettled } from '../failure-cause.js'
import { Classification, type Settled, UnrecordedReason } from '../outcomes.js'
import { FailureKind } from '../record.js'
import type { AppTransactions, StoreTransaction, TransactionalStore } from '../store-transaction.js'
import { calls, type Held } from './calls.js'
import { classification, type FinishScope, recorded } from './finish.js'
import type { Won } from './invocation.js'
import { type CallScope, type Hold, type Refusal, settle, unavailable } from './settle.js'
import type { Finished } from './types.js'

/**
 * Opens the run's transaction on the scope held. When it cannot be opened nothing ran: the hold
 * is marked FAILED_RETRYABLE and the answer is 503.
 */
export async function openTransaction(
  scope: CallScope,
  store: TransactionalStore,
  held: Held,
  app?: AppTransactions,
): Promise<Won | Refusal> {
  try {
    return { kind: 'HELD', hold: held.hold, transaction: await store.beginTransaction(held.hold, scope.policy, app) }
  } catch (error) {
    scope.events.emit({ type: 'store-error', call: 'begin', error })
    await settle(scope, calls.markFailed, {
      hold: held.hold,
      failure: FailureKind.RETRYABLE,
      cause: causeOfError(error),
    })
    return unavailable(scope, error)
  }
}

/** Whether the option `transaction` runs the action in a transaction: `true`, or an ORM's adapter. */
export function inTransaction(option: boolean | AppTransactions | undefined): option is true | AppTransactions {
  return option !== undefined && option !== false
}

/** Finishes a run in its transaction: commit with the completion, or roll back. */
export async function finishInTransaction<T>(
  scope: FinishScope<T>,
  hold: Hold,
  transaction: StoreTransaction,
  settled: Settled<T>,
): Promise<Finished<T>> {
  if (!settled.ok || classification(scope, settled) !== Classification.COMPLETE) {
    await transaction.rollback()
    return {
      kind: 'FAILED',
      classification: Classification.RETRYABLE,
      settled,
      attempt: hold.attempt,
      recorded: await settle(scope, calls.markFailed, {
        hold,
        failure: FailureKind.RETRYABLE,
        cause: causeOfSettled(settled),
      }),
    }
  }
  const value = settled.value
  let encoded: Buffer
  try {
    encoded = scope.codec.encode(value)
  } catch (error) {
    // Not storable: its writes must not commit without it.
    await transaction.rollback()
    return rolledBack(scope, hold, value, error)
  }
  const verdict = await settle(scope, calls.commit, { transaction, hold, encoded })
  switch (verdict.kind) {
    case 'ROLLED_BACK':
      return rolledBack(scope, hold, value, verdict.cause)
    case 'ENDED':
      await settle(scope, calls.markFailed, { hold, failure: FailureKind.UNKNOWN, cause: causeOfError(verdict.cause) })
      return {
        kind: 'UNRECORDED',
        reason: UnrecordedReason.STORE_UNAVAILABLE,
        value,
        attempt: hold.attempt,
        cause: verdict.cause,
      }
    default:
      return recorded(scope, hold, value, verdict)
  }
}

/** Nothing of the action happened, so a retry may run: FAILED_RETRYABLE, and the value UNRECORDED. */
async function rolledBack<T>(scope: CallScope, hold: Hold, value: T, cause: unknown): Promise<Finished<T>> {
  await settle(scope, calls.markFailed, { hold, failure: FailureKind.RETRYABLE, cause: causeOfError(cause) })
  return { kind: 'UNRECORDED', reason: UnrecordedReason.ROLLED_BACK, value, attempt: hold.attempt, cause }
}
