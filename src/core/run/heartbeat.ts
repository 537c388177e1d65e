/**
 * A run's lease, kept alive from the moment the scope is held until `finish`: an item of the
 * process-wide schedule (schedule.ts) that renews every `renewEveryMs` (lease/3) and fires the
 * action's signal when the lease is lost: a renewal refused (another invocation took the scope
 * over), or none confirmed for a whole lease. `renewNow()` is the one renewal: the heartbeat's, and
 * the one that confirms a hold whose claim was answered late before its action starts (flow.ts
 * `confirmLateHold`, docs/design.md §4).
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

/**
 * How one renewal ended: `confirmed` (answered OK within a lease of its send: the lease now
 * counts from that send), `late` (answered OK a lease or more after its send: it confirms
 * nothing), `refused` (another invocation holds the scope, or the record is gone: the lease is
 * lost), or `failed` (not answered within the store-call timeout, or a store fault).
 */
export type Renewal =
  | { readonly kind: 'confirmed' | 'late' }
  | { readonly kind: 'refused'; readonly result: RenewResult['kind'] }
  | { readonly kind: 'failed'; readonly error: unknown }

const CONFIRMED: Renewal = { kind: 'confirmed' }
const LATE: Renewal = { kind: 'late' }

export class Heartbeat implements Ticked {
  /** The action's signal: fires once the lease is lost. */
  readonly lease = new LeaseSignal()
  readonly #store: IdempotencyStore
  readonly #policy: Policy
  readonly #settings: HeartbeatSettings
  readonly #events: Observer
  readonly #held: OwnerRef
  #renewDueAt = 0
  /** When the latest confirmation of the lease (the claim, or a renewal) was sent. */
  #confirmedAt: number
  #renewing: Promise<unknown> | undefined

  /** `confirmedAt`: when the claim that won the scope was sent; its lease began after it. */
  constructor(
    store: IdempotencyStore,
    policy: Policy,
    settings: HeartbeatSettings,
    events: Observer,
    held: OwnerRef,
    confirmedAt: number,
  ) {
    this.#store = store
    this.#policy = policy
    this.#settings = settings
    this.#events = events
    this.#held = held
    this.#confirmedAt = confirmedAt
  }

  /** True while the lease runs at `now`: less than a lease since its latest confirmation was sent. */
  live(now: number): boolean {
    return now - this.#confirmedAt < this.#policy.leaseMs
  }

  /** Renewals from the latest confirmation on, until `stop()`. */
  start(): void {
    this.#renewDueAt = this.#confirmedAt + this.#settings.renewEveryMs
    this.#settings.heartbeat.add(this)
  }

  /** No renewal after this one; resolves once a renewal already sent is answered. */
  stop(): Promise<unknown> | undefined {
    this.#settings.heartbeat.delete(this)
    return this.#renewing
  }

  /** Renews when due; past a whole lease without a confirmed renewal, the lease is lost. */
  tick(now: number): void {
    if (this.#renewing !== undefined) return
    // Renewals go on after a lease lost this way: one refused tells the takeover for sure.
    if (!this.lease.aborted && !this.live(now)) {
      this.lease.abort(
        new LeaseLostError('No lease renewal was confirmed for a whole lease; the scope may be taken over.'),
      )
    }
    if (now < this.#renewDueAt) return
    this.#renewDueAt = now + this.#settings.renewEveryMs
    this.#renewing = this.renewNow().finally(() => {
      this.#renewing = undefined
    })
  }

  /**
   * Sends one renewal now, fenced on the held owner and attempt, within the store-call timeout,
   * and says how it ended (`Renewal`); never rejects. A confirmed one moves the lease's start to
   * its send; a refused one loses the lease and ends the renewals.
   */
  async renewNow(): Promise<Renewal> {
    const sentAt = performance.now()
    let result: RenewResult
    try {
      result = await this.#events.traced('renew', () =>
        bounded('renew', this.#settings.storeCallTimeoutMs, this.#store.renew(this.#held, this.#policy)),
      )
    } catch (error) {
      this.#events.emit({ type: 'renew-failed', error })
      return { kind: 'failed', error }
    }
    if (result.kind !== TransitionReply.OK) {
      this.#events.emit({ type: 'renew-refused', result: result.kind, attempt: this.#held.attempt })
      this.#settings.heartbeat.delete(this)
      this.lease.abort(
        new LeaseLostError(`The lease renewal was refused (${result.kind}): another invocation holds the scope.`),
      )
      return { kind: 'refused', result: result.kind }
    }
    if (performance.now() - sentAt >= this.#policy.leaseMs) return LATE
    this.#confirmedAt = sentAt
    this.#events.emit({ type: 'renewed', leaseUntil: result.leaseUntil })
    return CONFIRMED
  }
}
