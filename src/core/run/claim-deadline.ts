/**
 * The claim deadline (`claimTimeoutMs`): the longest a decision before the action may take. It
 * is an item of the process-wide schedule of its period (schedule.ts), not a timer of its own:
 * once its time has passed it calls `onExpiry` once and reads as `expired`. A wait between two
 * decisions is not bounded by it: the wait takes it off the schedule (`stop`) and the next
 * decision gets a whole deadline again (`restart`).
 */
import type { Schedule, Ticked } from '../schedule.js'

export class ClaimDeadline implements Ticked {
  readonly #schedule: Schedule
  readonly #timeoutMs: number
  readonly #onExpiry: () => void
  #at = 0
  #expired = false

  /** Starts at once: `timeoutMs` from now. */
  constructor(schedule: Schedule, timeoutMs: number, onExpiry: () => void) {
    this.#schedule = schedule
    this.#timeoutMs = timeoutMs
    this.#onExpiry = onExpiry
    this.restart()
  }

  /** True once the deadline has passed (and `onExpiry` was called). */
  get expired(): boolean {
    return this.#expired
  }

  /** A whole deadline again from now, unless it has expired already. */
  restart(): void {
    if (this.#expired) return
    this.#at = performance.now() + this.#timeoutMs
    this.#schedule.add(this)
  }

  /** The decision was made in time, or a wait begins (the time until `restart()` is not the decision's). */
  stop(): void {
    this.#schedule.delete(this)
  }

  tick(now: number): void {
    if (now < this.#at) return
    this.#schedule.delete(this)
    this.#expired = true
    this.#onExpiry()
  }
}
