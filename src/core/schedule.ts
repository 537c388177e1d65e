/**
 * Timers shared by every execution of the process: one timer per period, however many items
 * it serves, instead of a timer per request. An item joins and leaves a set (a few
 * nanoseconds); the timer runs while the set has items and stops after a tick that finds it
 * empty. The lease heartbeat and the claim deadline use it.
 */

/** Something a schedule looks at on every tick. */
export interface Ticked {
  /** Called on every tick while the item is in the schedule, with `performance.now()`. */
  tick(now: number): void
}

/** One period's items and timer. */
export class Schedule {
  readonly #items = new Set<Ticked>()
  readonly #periodMs: number
  #timer: NodeJS.Timeout | undefined

  constructor(periodMs: number) {
    this.#periodMs = Math.max(1, Math.floor(periodMs))
  }

  add(item: Ticked): void {
    this.#items.add(item)
    if (this.#timer === undefined) {
      this.#timer = setInterval(() => this.#tick(), this.#periodMs)
      // A schedule never keeps the process alive; what it waits for does.
      this.#timer.unref()
    }
  }

  delete(item: Ticked): void {
    this.#items.delete(item)
  }

  #tick(): void {
    if (this.#items.size === 0) {
      clearInterval(this.#timer)
      this.#timer = undefined
      return
    }
    const now = performance.now()
    for (const item of this.#items) item.tick(now)
  }
}

const schedules = new Map<number, Schedule>()

/** The process-wide schedule that ticks every `periodMs` (rounded down to whole ms). */
export function scheduleEvery(periodMs: number): Schedule {
  const period = Math.max(1, Math.floor(periodMs))
  let schedule = schedules.get(period)
  if (schedule === undefined) {
    schedule = new Schedule(period)
    schedules.set(period, schedule)
  }
  return schedule
}
