/**
 * The lease as the action sees it: an AbortSignal that fires once the lease is lost, created
 * only when the action reads it (most actions never do, and an AbortController per request was
 * a measurable share of a request's CPU time). A run's heartbeat (run/heartbeat.ts) keeps one, so
 * the signal costs no AbortController until it is read.
 */
import { ErrorCode, IdempotencyError } from './errors.js'

/** The reason an action's signal fires. */
export class LeaseLostError extends IdempotencyError {
  constructor(message: string) {
    super(ErrorCode.LEASE_LOST, message)
  }
}

export class LeaseSignal {
  #controller: AbortController | undefined
  #reason: unknown
  #lost = false

  /** The signal; fires (or is already aborted) once the lease is lost. */
  get signal(): AbortSignal {
    if (this.#controller === undefined) {
      this.#controller = new AbortController()
      if (this.#lost) this.#controller.abort(this.#reason)
    }
    return this.#controller.signal
  }

  /** True once the lease is lost. */
  get aborted(): boolean {
    return this.#lost
  }

  /** Marks the lease lost and fires the signal, once. */
  abort(reason: unknown): void {
    if (this.#lost) return
    this.#lost = true
    this.#reason = reason
    this.#controller?.abort(reason)
  }
}
