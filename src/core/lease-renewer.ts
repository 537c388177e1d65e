/**
 * Heartbeat renew (SPEC §4; §7 defect 4): while an action runs, the lease is renewed every
 * lease/3. A refused renew means another invocation took the scope over: the action's signal
 * fires. The signal also fires when no renew has been confirmed for a whole lease, since the
 * scope may then be taken over at any moment.
 */

import { ErrorCode, IdempotencyError } from './errors.js'
import type { ExecutorEvent } from './outcomes.js'
import { TransitionReply } from './record.js'
import type { IdempotencyStore, OwnerRef, RecordTimes } from './store.js'

/** The reason an action's signal fires. */
export class LeaseLostError extends IdempotencyError {
  constructor(message: string) {
    super(ErrorCode.LEASE_LOST, message)
  }
}

/**
 * The action's AbortSignal, created only when the action asks for it: most actions never read
 * it, and an AbortController per request was a measurable share of a request's CPU time.
 */
export class LeaseSignal {
  private controller: AbortController | undefined
  private lostReason: unknown
  private lost = false

  /** The signal; fires (or is already aborted) once the lease is lost. */
  get signal(): AbortSignal {
    if (this.controller === undefined) {
      this.controller = new AbortController()
      if (this.lost) this.controller.abort(this.lostReason)
    }
    return this.controller.signal
  }

  /** True once the lease is lost. */
  get aborted(): boolean {
    return this.lost
  }

  /** Marks the lease lost and fires the signal, once. */
  abort(reason: unknown): void {
    if (this.lost) return
    this.lost = true
    this.lostReason = reason
    this.controller?.abort(reason)
  }
}

export interface LeaseRenewerOptions {
  readonly store: IdempotencyStore
  readonly ref: OwnerRef
  readonly times: RecordTimes
  readonly lease: LeaseSignal
  readonly onEvent: (event: ExecutorEvent) => void
}

export class LeaseRenewer {
  private timer: NodeJS.Timeout | undefined
  private inFlight: Promise<void> | undefined
  private lastConfirmed = performance.now()

  constructor(private readonly options: LeaseRenewerOptions) {}

  start(): void {
    const every = Math.max(1, Math.floor(this.options.times.leaseMs / 3))
    this.timer = setInterval(() => this.tick(), every)
    this.timer.unref()
  }

  /** Stops renewing and waits for a renew already sent, so none lands after the outcome. */
  stop(): Promise<void> | undefined {
    if (this.timer !== undefined) clearInterval(this.timer)
    this.timer = undefined
    return this.inFlight
  }

  private tick(): void {
    if (this.inFlight !== undefined) return
    const { lease, times } = this.options
    if (!lease.aborted && performance.now() - this.lastConfirmed >= times.leaseMs) {
      this.lose(new LeaseLostError('No lease renewal was confirmed for a whole lease; the scope may be taken over.'))
    }
    this.inFlight = this.renew().finally(() => {
      this.inFlight = undefined
    })
  }

  private async renew(): Promise<void> {
    const { store, ref, times, onEvent } = this.options
    const sentAt = performance.now()
    try {
      const result = await store.renew(ref, times)
      if (result.kind === TransitionReply.OK) {
        this.lastConfirmed = sentAt
        onEvent({ type: 'renewed', leaseUntil: result.leaseUntil })
        return
      }
      onEvent({ type: 'renew-refused', result: result.kind, attempt: ref.attempt })
      if (this.timer !== undefined) clearInterval(this.timer)
      this.timer = undefined
      this.lose(
        new LeaseLostError(`The lease renewal was refused (${result.kind}): another invocation holds the scope.`),
      )
    } catch (error) {
      onEvent({ type: 'renew-failed', error })
    }
  }

  private lose(reason: LeaseLostError): void {
    this.options.lease.abort(reason)
  }
}
