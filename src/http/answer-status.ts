/**
 * The HTTP status each executor outcome is answered with (docs/design.md §5), for the outcome
 * event's `status` (`http.response.status_code` in idemkit/otel): a replayed 402 and a replayed
 * 201 are told apart.
 */
import type { ExecuteOutcome } from '../core/outcomes.js'
import { layerStop, ProblemCode, problemStatus } from './problem.js'
import type { CapturedResponse } from './response-codec.js'

/**
 * The status of `outcome`'s answer; `undefined` for a handler that threw (the framework's error
 * handler decides its status).
 */
export function answerStatus(outcome: ExecuteOutcome<CapturedResponse>): number | undefined {
  switch (outcome.kind) {
    case 'EXECUTED':
    case 'REPLAYED':
      return outcome.value.status
    case 'FAILED':
      if (layerStop(outcome.settled) !== undefined) return problemStatus(ProblemCode.STORE_UNAVAILABLE)
      return outcome.settled.ok ? outcome.settled.value.status : undefined
    case 'IN_PROGRESS':
      return problemStatus(ProblemCode.IN_FLIGHT)
    case 'FINGERPRINT_MISMATCH':
      return problemStatus(ProblemCode.KEY_REUSED)
    case 'RECOVERY_REQUIRED':
      return problemStatus(ProblemCode.RECOVERY_REQUIRED)
    case 'STORE_UNAVAILABLE':
    case 'UNRECORDED':
      return problemStatus(ProblemCode.STORE_UNAVAILABLE)
  }
}
