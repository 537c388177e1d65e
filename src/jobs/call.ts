/**
 * One wrapped function's calls: its executor made once, and per call the key, principal and
 * fingerprint taken from the arguments, the executor's begin on that scope (which digests it and
 * looks it up under older secret versions first, docs/design.md §2), the function run with its
 * context, and finish. `answer()` turns an outcome
 * into what a caller acts on: the value, or a typed error with a stable code (docs/jobs.md).
 */

import {
  ErrorCode,
  IdempotencyError,
  IdempotencyInProgressError,
  IdempotencyKeyReusedError,
  IdempotencyRecoveryRequiredError,
  StoreUnavailableError,
} from '../core/errors.js'
import { Executor, type Run } from '../core/executor.js'
import { fingerprint } from '../core/fingerprint.js'
import { Classification, type ExecuteOutcome, type Settled, UnrecordedReason } from '../core/outcomes.js'
import { RecoveryReason } from '../core/record.js'
import type { ActionContext, Decided, ScopedBeginInput } from '../core/run/types.js'
import { scopeDigest } from '../core/scope.js'
import { shortDigest } from '../core/store-key.js'
import type { ResolvedIdempotent } from './options.js'

/** An outcome, and what its errors name the call by. */
export interface CallOutcome<R> {
  readonly outcome: ExecuteOutcome<R>
  /** The first 12 hex characters of the call's scope digest, never the key: made only for an error. */
  digest(): string
  /** With FAILED: true when the error is the function's own (not the codec's refusal of its result). */
  readonly thrown: boolean
}

/** The calls of one wrapped function. */
export class IdempotentCall<A extends readonly unknown[], R> {
  readonly options: ResolvedIdempotent<A, R>
  readonly #executor: Executor<R>

  constructor(options: ResolvedIdempotent<A, R>) {
    this.options = options
    const { operation, onEvent, retryable } = options
    this.#executor = new Executor<R>({
      store: options.store,
      operation,
      codec: options.codec,
      policy: options.policy,
      // What each call's scope is digested with, under every version, and keyFor() derives with.
      secrets: options.secrets,
      classify: (settled: Settled<R>) => {
        if (settled.ok) return Classification.COMPLETE
        return retryable(settled.error) ? Classification.RETRYABLE : Classification.UNKNOWN
      },
      onEvent:
        onEvent === undefined
          ? undefined
          : (event, _context, key) => {
              try {
                onEvent({ ...event, operation, digest: shortDigest(key) })
              } catch {
                // An observer never changes the answer.
              }
            },
      recordRetryMs: options.recordRetryMs,
      claimTimeoutMs: options.claimTimeoutMs,
      storeCallTimeoutMs: options.storeCallTimeoutMs,
      unavailableRetryAfterMs: options.unavailableRetryAfterMs,
      transaction: options.transaction,
      inFlightWaitMs: options.inFlightWaitMs,
      inFlightMaxWaiters: options.inFlightMaxWaiters,
      inProgressRetryAfterMs: options.inProgressRetryAfterMs,
      replayCache: options.replayCache,
    })
  }

  /**
   * The call's scope (its key, from the `key` option, and its principal) and fingerprint.
   * @throws IdempotencyError `ERR_IDEM_INVALID_ARGUMENT` when the key or the fingerprint cannot be made.
   */
  input(args: A): ScopedBeginInput {
    const { options } = this
    return {
      scope: { principal: options.principal(args), key: options.key(args) },
      fingerprint: this.#fingerprint(args),
    }
  }

  #fingerprint(args: A): string {
    const custom = this.options.fingerprint
    const value = custom === undefined ? args : custom(...args)
    try {
      // The HTTP fingerprint of a JSON body (RFC 8785), with the call's values as the body.
      return fingerprint({ method: 'CALL', path: '', body: { json: value } })
    } catch (error) {
      throw new IdempotencyError(
        ErrorCode.INVALID_ARGUMENT,
        `The arguments of a call of "${this.options.operation}" cannot be fingerprinted as JSON (RFC 8785: no BigInt, NaN, cycles or lone surrogates); give a "fingerprint" option that returns what identifies the call.`,
        { cause: error },
      )
    }
  }

  /** Begins one call: a decision (nothing runs) or a run of its own. */
  begin(input: ScopedBeginInput): Promise<Decided<R> | Run<R>> {
    return this.#executor.begin(input, undefined)
  }

  /** Runs `action` at most once for the call's key, and answers the outcome. */
  async invoke(args: A, action: (context: ActionContext) => R | Promise<R>): Promise<CallOutcome<R>> {
    const input = this.input(args)
    const digest = () => this.#digest(input)
    const begun = await this.begin(input)
    if (begun.kind !== 'RUN') return { outcome: begun, digest, thrown: false }
    let settled: Settled<R>
    let thrown = false
    try {
      settled = { ok: true, value: await action(begun.context) }
    } catch (error) {
      thrown = true
      settled = { ok: false, error }
    }
    return { outcome: await begun.finish(settled), digest, thrown }
  }

  /** The short digest of a call's scope under the current secret: what `idemkit inspect` shows. */
  #digest(input: ScopedBeginInput): string {
    const { secrets, operation } = this.options
    return shortDigest(scopeDigest(secrets, secrets.current, { ...input.scope, operation }))
  }
}

/**
 * The value of a call's outcome, or the error its caller acts on (docs/jobs.md): the function's
 * own error as it threw it; `IdempotencyInProgressError`, `StoreUnavailableError` (both with
 * `retryAfterMs`: call again later), `IdempotencyKeyReusedError` and
 * `IdempotencyRecoveryRequiredError` (calling again cannot help).
 */
export function answer<R>(
  called: CallOutcome<R>,
  options: Pick<ResolvedIdempotent<never, R>, 'operation' | 'transaction' | 'unavailableRetryAfterMs'>,
): R {
  const { outcome } = called
  if (outcome.kind === 'EXECUTED' || outcome.kind === 'REPLAYED') return outcome.value
  const digest = called.digest()
  const name = `"${options.operation}"`
  switch (outcome.kind) {
    case 'IN_PROGRESS':
      throw new IdempotencyInProgressError(
        `A call of ${name} with this key (digest ${digest}) is running; this one did not run. Call again in ${outcome.retryAfterMs} ms.`,
        outcome.retryAfterMs,
      )
    case 'FINGERPRINT_MISMATCH':
      throw new IdempotencyKeyReusedError(
        `The key of this call of ${name} (digest ${digest}) was used before with other arguments; this call did not run. Give other arguments another key, or a "fingerprint" option that leaves out what may differ.`,
      )
    case 'RECOVERY_REQUIRED':
      throw new IdempotencyRecoveryRequiredError(recoveryMessage(name, digest, outcome.reason), outcome.reason)
    case 'STORE_UNAVAILABLE':
      throw new StoreUnavailableError(
        `The idempotency store did not decide this call of ${name} (digest ${digest}); it did not run. Call again in ${outcome.retryAfterMs} ms.`,
        { cause: outcome.cause, retryAfterMs: outcome.retryAfterMs },
      )
    case 'FAILED': {
      const error = outcome.settled.ok ? undefined : outcome.settled.error
      if (called.thrown) throw error
      // The function returned, and its codec refused the result: the effect happened.
      throw new IdempotencyError(
        ErrorCode.RESPONSE_NOT_STORABLE,
        `The result of this call of ${name} (digest ${digest}) could not be stored: its codec refused it. The function ran; later calls with this key throw IdempotencyRecoveryRequiredError. Return a JSON-serialisable value, or give a "codec".`,
        { cause: error },
      )
    }
    case 'UNRECORDED':
      throw new StoreUnavailableError(unrecordedMessage(name, digest, outcome.reason, options.transaction), {
        cause: outcome.cause,
        retryAfterMs: options.unavailableRetryAfterMs,
      })
  }
}

function recoveryMessage(name: string, digest: string, reason: string): string {
  const settle =
    'An operator settles it with `idemkit resolve` (docs/operations.md), or it expires after failureRetentionMs.'
  switch (reason) {
    case RecoveryReason.ABANDONED:
      return `An earlier call of ${name} with this key (digest ${digest}) failed with an unknown effect, so it is not run again; this call did not run. ${settle}`
    case RecoveryReason.EXPIRED_EXECUTION:
      return `An earlier call of ${name} with this key (digest ${digest}) stopped without an outcome (its process died or lost its lease); its effect may have happened, so it is not run again and this call did not run. ${settle}`
    default:
      return `The stored result of ${name} for this key (digest ${digest}) was written under another ${reason === RecoveryReason.POLICY_MISMATCH ? 'policyRevision' : 'codec'} and cannot be replayed; this call did not run. ${settle}`
  }
}

function unrecordedMessage(name: string, digest: string, reason: string, transaction: unknown): string {
  // In a transaction (the store's, or an ORM's), a run that lost its key was rolled back.
  const inTransaction = transaction !== false
  if (reason === UnrecordedReason.ROLLED_BACK || (inTransaction && reason === UnrecordedReason.LOST_OWNERSHIP)) {
    return `This call of ${name} (digest ${digest}) was rolled back: nothing of it happened (its commit failed, or another call took the key over). Call again.`
  }
  if (reason === UnrecordedReason.LOST_OWNERSHIP) {
    return `This call of ${name} (digest ${digest}) ran, but another call took its key over meanwhile (its lease ran out): its result is not the key's answer.`
  }
  return `This call of ${name} (digest ${digest}) ran, but its result could not be recorded; later calls with this key throw IdempotencyRecoveryRequiredError once its lease runs out (the effect happened).`
}
