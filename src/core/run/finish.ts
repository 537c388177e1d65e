/**
 * A run's end: the action's settled result classified, encoded and recorded (complete, or
 * markFailed as FAILED_RETRYABLE or ABANDONED), and the run's outcome. A store that cannot record
 * it is an outcome (FAILED not recorded, UNRECORDED), never an error.
 */
import type { Codec } from '../codec.js'
import { causeOfSettled } from '../failure-cause.js'
import { Classification, type Settled } from '../outcomes.js'
import { FailureKind, RecordState } from '../record.js'
import { calls, type RecordVerdict } from './calls.js'
import { type CallScope, type Hold, settle } from './settle.js'
import type { Finished } from './types.js'

/** What the end of a run uses besides the calls: the operation's codec and classifier. */
export interface FinishScope<T> extends CallScope {
  readonly codec: Codec<T>
  readonly classify: (settled: Settled<T>) => Classification
}

const CLASSIFICATIONS: ReadonlySet<string> = new Set(Object.values(Classification))

/** The classifier's verdict; one that throws or answers something else cannot vouch for "no effect". */
export function classification<T>(scope: FinishScope<T>, settled: Settled<T>): Classification {
  try {
    const found = scope.classify(settled)
    if (CLASSIFICATIONS.has(found)) return found
  } catch {
    // A classifier that throws cannot vouch for "no effect".
  }
  return Classification.UNKNOWN
}

/** Records a settled result outside a transaction: complete, or mark it failed. */
export async function record<T>(scope: FinishScope<T>, hold: Hold, settled: Settled<T>): Promise<Finished<T>> {
  let classified = classification(scope, settled)
  if (settled.ok && classified === Classification.COMPLETE) {
    const value = settled.value
    let encoded: Buffer | undefined
    try {
      encoded = scope.codec.encode(value)
    } catch (error) {
      settled = { ok: false, error }
      classified = Classification.UNKNOWN
    }
    if (encoded !== undefined) {
      return recorded(scope, hold, value, await settle(scope, calls.complete, { hold, encoded }))
    }
  }
  const retryable = classified === Classification.RETRYABLE
  const failure = retryable ? FailureKind.RETRYABLE : FailureKind.UNKNOWN
  return {
    kind: 'FAILED',
    classification: retryable ? Classification.RETRYABLE : Classification.UNKNOWN,
    settled,
    attempt: hold.attempt,
    recorded: await settle(scope, calls.markFailed, { hold, failure, cause: causeOfSettled(settled) }),
  }
}

/** The outcome of a completion's verdict: EXECUTED, or the value UNRECORDED. */
export function recorded<T>(scope: CallScope, hold: Hold, value: T, verdict: RecordVerdict): Finished<T> {
  if (verdict.kind === 'RECORDED') {
    if (scope.events.wants('recorded')) {
      scope.events.emit({ type: 'recorded', state: RecordState.COMPLETED, attempt: hold.attempt })
    }
    return { kind: 'EXECUTED', value, attempt: hold.attempt }
  }
  return { kind: 'UNRECORDED', reason: verdict.reason, value, attempt: hold.attempt, cause: verdict.cause }
}
