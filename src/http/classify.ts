/**
 * The default classification of an HTTP response (docs/design.md §4): 2xx, 3xx and 4xx are results and
 * are stored (a declined card is an answer); 408, 409, 425 and 429, and an error the handler
 * marks `retryable: true` (thrown, or answered with), mean "not processed" (FAILED_RETRYABLE); any
 * other 5xx or thrown error is an unknown effect (ABANDONED).
 */
import { defaultClassify } from '../core/executor.js'
import { Classification, type Settled } from '../core/outcomes.js'
import type { CapturedResponse } from './response-codec.js'

/** Statuses that say the request was not processed. */
export const RETRYABLE_STATUSES: ReadonlySet<number> = new Set([408, 409, 425, 429])

/** Classifies one handler response. */
export function classifyResponse(response: CapturedResponse): Classification {
  const error = response.error as { retryable?: unknown } | null | undefined
  if (typeof error === 'object' && error !== null && error.retryable === true) return Classification.RETRYABLE
  if (RETRYABLE_STATUSES.has(response.status)) return Classification.RETRYABLE
  if (response.status >= 500) return Classification.UNKNOWN
  return Classification.COMPLETE
}

/**
 * Lifts a response classifier to the executor's settled results. A run that ended with no
 * response (a thrown error no framework turned into one) is classified by its error, as the
 * executor's default does: marked `retryable: true` it was not processed, anything else is unknown.
 */
export function settledClassifier(
  classify: (response: CapturedResponse) => Classification,
): (settled: Settled<CapturedResponse>) => Classification {
  return (settled) => (settled.ok ? classify(settled.value) : defaultClassify(settled))
}
