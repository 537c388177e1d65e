/**
 * Claims the executor gave up on without a decision (issue 10, item 4). Such a claim may still
 * land: a Redis paused past the client's command timeout runs the queued claim when it resumes,
 * and with claim-with-start the record is then EXECUTING under an owner whose action never ran.
 * Left alone it would answer 409 for a lease and then recovery-required for the whole failure
 * retention, although nothing ran. So until the claim is known not to hold the scope, the store
 * is asked again, with backoff, for as long as the process lives:
 *
 * | inspect with the claim's owner says | then                                                     |
 * | ----------------------------------- | -------------------------------------------------------- |
 * | EXECUTING, mine                     | markFailed(retryable): the truth, nothing ran; done       |
 * | CLAIMED, mine                       | release; done                                            |
 * | absent, another owner, or final     | look once more after `settleMs`, then done (see below)   |
 * | no answer (unavailable, timeout)    | again after a backoff: 200 ms doubling to `maxDelayMs`   |
 *
 * Why an answered inspect ends it: Redis runs the commands of one connection in order, so an
 * inspect answered on the connection that carried the claim comes after the claim, which has
 * then either landed (and the inspect saw it) or never will. A claim sent on an earlier
 * connection that the client dropped while Redis was paused can still be read by Redis in the
 * same turn as the inspect, in either order: the second look, `settleMs` later, covers that.
 *
 * One queue per store serves every undecided claim: while the store does not answer, one probe
 * is sent per backoff step, not one call per claim, so a long outage with thousands of undecided
 * claims sends no more than one call per step; once a probe is answered the queue is worked
 * through with a few calls at a time.
 */

import { bounded } from './deadline.js'
import { LayerCause } from './failure-cause.js'
import type { ExecutorEvent } from './outcomes.js'
import { FailureKind, InspectReply } from './record.js'
import type { IdempotencyStore, RecordTimes } from './store.js'

/** One undecided claim. */
export interface UndecidedClaim {
  readonly key: string
  readonly owner: string
  readonly times: RecordTimes
  /** The bound on each store call made for it (`storeCallTimeoutMs`). */
  readonly callTimeoutMs: number
  readonly emit: (event: ExecutorEvent) => void
}

interface Entry extends UndecidedClaim {
  /** Set once an inspect answered "not held by this claim": the second look is due then. */
  recheckAt?: number
}

/** The largest number of undecided claims kept per store; past it the oldest is dropped. */
const MAX_ENTRIES = 100_000
/** How many entries are worked on at once once the store answers. */
const CONCURRENCY = 8
const FIRST_DELAY_MS = 200
const MAX_DELAY_MS = 5_000

class UndecidedQueue {
  readonly #store: IdempotencyStore
  readonly #entries: Entry[] = []
  #timer: NodeJS.Timeout | undefined
  #delay = FIRST_DELAY_MS
  #running = false

  constructor(store: IdempotencyStore) {
    this.#store = store
  }

  add(claim: UndecidedClaim): void {
    if (this.#entries.length >= MAX_ENTRIES) {
      const dropped = this.#entries.shift() as Entry
      dropped.emit({ type: 'reconcile', call: 'claim', found: 'dropped: too many undecided claims' })
    }
    this.#entries.push({ ...claim })
    this.#delay = Math.min(this.#delay, FIRST_DELAY_MS)
    this.#schedule(FIRST_DELAY_MS)
  }

  #schedule(delayMs: number): void {
    if (this.#timer !== undefined || this.#running) return
    this.#timer = setTimeout(() => {
      this.#timer = undefined
      void this.#work()
    }, delayMs)
    this.#timer.unref()
  }

  /** Works through the due entries; the first call is the probe that tells whether the store answers. */
  async #work(): Promise<void> {
    this.#running = true
    let answered = false
    try {
      const now = performance.now()
      const due = this.#entries.filter((entry) => entry.recheckAt === undefined || entry.recheckAt <= now)
      const [probe, ...rest] = due
      if (probe !== undefined) {
        answered = await this.#settle(probe)
        for (let i = 0; answered && i < rest.length; i += CONCURRENCY) {
          await Promise.all(rest.slice(i, i + CONCURRENCY).map((entry) => this.#settle(entry)))
        }
      }
    } finally {
      this.#running = false
    }
    if (this.#entries.length === 0) return
    this.#delay = answered ? FIRST_DELAY_MS : Math.min(this.#delay * 2, this.#maxDelay())
    const nextRecheck = Math.min(...this.#entries.map((entry) => entry.recheckAt ?? 0))
    this.#schedule(Math.max(this.#delay, nextRecheck - performance.now()))
  }

  /** The backoff never waits longer than a third of the shortest lease, so a landed claim is freed within a lease. */
  #maxDelay(): number {
    const shortest = Math.min(...this.#entries.map((entry) => entry.times.leaseMs))
    return Math.max(FIRST_DELAY_MS, Math.min(MAX_DELAY_MS, Math.floor(shortest / 3)))
  }

  /** Reconciles one entry; false when the store did not answer. */
  async #settle(entry: Entry): Promise<boolean> {
    let found: Awaited<ReturnType<IdempotencyStore['inspect']>>
    try {
      found = await bounded('inspect', entry.callTimeoutMs, this.#store.inspect(entry.key, entry.owner))
    } catch (error) {
      entry.emit({ type: 'store-error', call: 'inspect', error })
      return false
    }
    const mine = found.kind !== InspectReply.ABSENT && found.mine
    if (mine && (found.kind === InspectReply.EXECUTING || found.kind === InspectReply.CLAIMED)) {
      const ref = { key: entry.key, owner: entry.owner, attempt: found.attempt, rev: found.rev }
      try {
        await (found.kind === InspectReply.EXECUTING
          ? bounded(
              'markFailed',
              entry.callTimeoutMs,
              this.#store.markFailed(ref, FailureKind.RETRYABLE, entry.times, LayerCause.UNDECIDED_CLAIM),
            )
          : bounded('release', entry.callTimeoutMs, this.#store.release(ref)))
      } catch (error) {
        // Whatever happened, the next inspect tells: still mine and unfinished, or settled.
        entry.emit({
          type: 'store-error',
          call: found.kind === InspectReply.EXECUTING ? 'markFailed' : 'release',
          error,
        })
        return true
      }
      entry.emit({ type: 'reconcile', call: 'claim', found: `released ${found.kind}` })
      this.#remove(entry)
      return true
    }
    if (entry.recheckAt === undefined) {
      entry.recheckAt = performance.now() + Math.max(1_000, Math.floor(entry.times.leaseMs / 3))
    } else {
      entry.emit({ type: 'reconcile', call: 'claim', found: `never landed (${found.kind})` })
      this.#remove(entry)
    }
    return true
  }

  #remove(entry: Entry): void {
    const index = this.#entries.indexOf(entry)
    if (index !== -1) this.#entries.splice(index, 1)
  }
}

const queues = new WeakMap<IdempotencyStore, UndecidedQueue>()

/** Hands an undecided claim to its store's queue. */
export function settleUndecidedClaim(store: IdempotencyStore, claim: UndecidedClaim): void {
  let queue = queues.get(store)
  if (queue === undefined) {
    queue = new UndecidedQueue(store)
    queues.set(store, queue)
  }
  queue.add(claim)
}
