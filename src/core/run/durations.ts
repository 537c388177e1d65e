/**
 * How long an operation's last runs took in this process: the Retry-After of IN_PROGRESS when
 * the route sets none (docs/design.md §5) is their median.
 */

/** How many recent runs the estimate looks at. */
const RUN_SAMPLES = 16
/** The estimate before the operation has run in this process, ms. */
const FIRST_RETRY_AFTER_MS = 1_000

export class RunDurations {
  /** A ring of the last `RUN_SAMPLES` runs, ms. */
  readonly #runs = new Float64Array(RUN_SAMPLES)
  #count = 0

  /** Notes one run's duration. */
  note(ms: number): void {
    this.#runs[this.#count++ % RUN_SAMPLES] = ms
  }

  /** The median of the last runs (1 s before the first). */
  typical(): number {
    const count = Math.min(this.#count, RUN_SAMPLES)
    if (count === 0) return FIRST_RETRY_AFTER_MS
    const sorted = this.#runs.slice(0, count).sort()
    return sorted[count >> 1] as number
  }
}
