/**
 * Heartbeat renew (SPEC §4; §7 defect 4): while an action runs, the lease is renewed every
 * lease/3. A refused renew means another invocation took the scope over: the action's signal
 * fires. The signal also fires when no renew has been confirmed for a whole lease, since the
 * scope may then be taken over at any moment.
 */
import { IdempotencyError, ErrorCode } from './errors.js'
import type { ExecutorEvent } from './outcomes.js'
import { TransitionReply } from './record.js'
import type { IdempotencyStore, OwnerRef, RecordTimes } from '../stores/store.js'

/** The reason an action's signal fires. */
export class LeaseLostError extends IdempotencyError {
  constructor(message: string) {
    super(ErrorCode.LEASE_LOST, message)
  }
}

export interface LeaseRenewerOptions {
  readonly store: IdempotencyStore
  readonly ref: OwnerRef
  readonly times: RecordTimes
  readonly controller: AbortController
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
  async stop(): Promise<void> {
    if (this.timer !== undefined) clearInterval(this.timer)
    this.timer = undefined
    await this.inFlight
  }

  private tick(): void {
    if (this.inFlight !== undefined) return
    const { controller, times } = this.options
    if (!controller.signal.aborted && performance.now() - this.lastConfirmed >= times.leaseMs) {
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
      this.lose(new LeaseLostError(`The lease renewal was refused (${result.kind}): another invocation holds the scope.`))
    } catch (error) {
      onEvent({ type: 'renew-failed', error })
    }
  }

  private lose(reason: LeaseLostError): void {
    if (!this.options.controller.signal.aborted) this.options.controller.abort(reason)
  }
}
