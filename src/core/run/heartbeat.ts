/**
 * A run's lease, kept alive from the moment the scope is held until `finish`: an item of the
 * process-wide schedule (schedule.ts) that renews every `renewEveryMs` (lease/3) and fires the
 * action's signal when the lease is lost: a renewal refused (another invocation took the scope
 * over), or none confirmed for a whole lease.
 */
import { bounded } from '../deadline.js'
import { LeaseLostError, LeaseSignal } from '../lease.js'
import type { Policy } from '../policy.js'
import { TransitionReply } from '../record.js'
import type { Schedule, Ticked } from '../schedule.js'
import type { IdempotencyStore, OwnerRef, RenewResult } from '../store.js'
import type { Observer } from './events.js'

/** What a heartbeat uses of its executor. */
export interface HeartbeatSettings {
  readonly heartbeat: Schedule
  readonly renewEveryMs: number
  readonly storeCallTimeoutMs: number
}

export class Heartbeat implements Ticked {
  /** The action's signal: fires once the lease is lost. */
  readonly lease = new LeaseSignal()
  readonly #store: IdempotencyStore
  readonly #policy: Policy
  readonly #settings: HeartbeatSettings
  readonly #events: Observer
  readonly #held: OwnerRef
  #renewDueAt = 0
  #confirmedAt = 0
  #renewing: Promise<void> | undefined

  constructor(store: IdempotencyStore, policy: Policy, settings: HeartbeatSettings, events: Observer, held: OwnerRef) {
    this.#store = store
    this.#policy = policy
    this.#settings = settings
    this.#events = events
    this.#held = held
  }

  /** The lease was confirmed at `now` (the claim or start that won it): renewals from now on. */
  start(now: number): void {
    this.#confirmedAt = now
    this.#renewDueAt = now + this.#settings.renewEveryMs
    this.#settings.heartbeat.add(this)
  }

  /** No renewal after this one; resolves once a renewal already sent is answered. */
  stop(): Promise<void> | undefined {
    this.#settings.heartbeat.delete(this)
    return this.#renewing
  }

  /** Renews when due; past a whole lease without a confirmed renewal, the lease is lost. */
  tick(now: number): void {
    if (this.#renewing !== undefined) return
    // Renewals go on after a lease lost this way: one refused tells the takeover for sure.
    if (!this.lease.aborted && now - this.#confirmedAt >= this.#policy.leaseMs) {
      this.lease.abort(
        new LeaseLostError('No lease renewal was confirmed for a whole lease; the scope may be taken over.'),
      )
    }
    if (now < this.#renewDueAt) return
    this.#renewDueAt = now + this.#settings.renewEveryMs
    this.#renewing = this.#renew(now).finally(() => {
      this.#renewing = undefined
    })
  }

  async #renew(sentAt: number): Promise<void> {
    let result: RenewResult
    try {
      result = await this.#events.traced('renew', () =>
        bounded('renew', this.#settings.storeCallTimeoutMs, this.#store.renew(this.#held, this.#policy)),
      )
    } catch (error) {
      this.#events.emit({ type: 'renew-failed', error })
      return
    }
    if (result.kind === TransitionReply.OK) {
      this.#confirmedAt = sentAt
      this.#events.emit({ type: 'renewed', leaseUntil: result.leaseUntil })
      return
    }
    this.#events.emit({ type: 'renew-refused', result: result.kind, attempt: this.#held.attempt })
    this.#settings.heartbeat.delete(this)
    this.lease.abort(
      new LeaseLostError(`The lease renewal was refused (${result.kind}): another invocation holds the scope.`),
    )
  }
}
