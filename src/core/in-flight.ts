/**
 * Waiting for an execution in progress instead of answering 409 (`inFlight: { waitMs }`). The
 * waiters of one key in one process share one watch: one subscription to the store's
 * notifications (`store.watch`) and one poll (`store.inspect`), however many they are. The
 * subscription is made first and the first inspect follows once it is active, so a completion
 * that lands between the waiter's claim and its subscription is seen by that inspect; a
 * notification, too, is followed by one shared inspect rather than a claim per waiter.
 *
 * When that inspect no longer finds the execution running with a live lease, every waiter wakes
 * with the record it read: a COMPLETED record is the answer (each waiter checks its fingerprint,
 * codec and policy against it, as a claim would, and replays it without a store call of its
 * own), and so is an ABANDONED one; only a record a claim would change (absent, failed
 * retryably, an expired lease) sends the waiters to claim again, as a retry would. A waiter
 * whose time is up answers IN_PROGRESS (409).
 *
 * Store calls per waiting request: the first claim, and a claim after a wake-up only when the
 * execution did not complete. Per key and process while anyone waits: one subscription, one
 * inspect once it is active, one after each notification, one every `POLL_MS` (every
 * `POLL_UNWATCHED_MS` on a store without notifications), and one when the lease runs out.
 *
 * At most `maxWaiters` requests of a process wait at once, over every key and route: a duplicate
 * beyond them answers at once (`full`), so a burst of duplicates cannot hold a process's memory
 * and sockets for the length of `waitMs`.
 */
import { newOwnerToken } from './attempt.js'
import { bounded, DEFAULT_STORE_CALL_TIMEOUT_MS } from './deadline.js'
import { InspectReply } from './record.js'
import type { IdempotencyStore, InspectResult } from './store.js'

/** Why a waiter woke: the execution may have ended, its time is up, or too many wait already. */
export type Woken = 'changed' | 'deadline' | 'full'

/** What a waiter woke with. */
export interface WaitResult {
  readonly woken: Woken
  /**
   * With `changed`: the record the shared inspect read once the execution was no longer
   * running (read-only, with the same rules and clock as a claim). Absent after a failed read.
   */
  readonly found?: InspectResult
}

/** The safety poll on a store with notifications, in milliseconds. */
export const POLL_MS = 500
/** The poll on a store without notifications (`watch`), in milliseconds. */
export const POLL_UNWATCHED_MS = 100
/** The default cap on the requests of one process waiting at once (`inFlight.maxWaiters`). */
export const DEFAULT_MAX_WAITERS = 10_000

/** The token the polls inspect with: never an owner, so `mine` is always false. */
const POLL_OWNER = newOwnerToken()

interface Waiter {
  readonly resolve: (result: WaitResult) => void
  readonly timer: NodeJS.Timeout
}

/** The watches of one store, by key. */
const watches = new WeakMap<IdempotencyStore, Map<string, KeyWatch>>()
/** Requests of this process waiting now, over every store and key. */
let waiting = 0

const DEADLINE: WaitResult = Object.freeze({ woken: 'deadline' })
const FULL: WaitResult = Object.freeze({ woken: 'full' })

/**
 * Waits until the execution under `key` may have ended, or until `deadline`
 * (`performance.now()` time).
 * @param leaseLeftMs the lease the claim reported: a poll is due when it runs out.
 * @param maxWaiters the most requests of this process that wait at once; past it `full` at once.
 * @param callTimeoutMs the waiter's bound on one store call (`storeCallTimeoutMs`): the shared
 *   poll's inspect is bounded by the shortest of its waiters'.
 */
export function waitForExecution(
  store: IdempotencyStore,
  key: string,
  deadline: number,
  leaseLeftMs: number,
  maxWaiters = DEFAULT_MAX_WAITERS,
  callTimeoutMs = DEFAULT_STORE_CALL_TIMEOUT_MS,
): Promise<WaitResult> {
  if (waiting >= maxWaiters) return Promise.resolve(FULL)
  let byKey = watches.get(store)
  if (byKey === undefined) {
    byKey = new Map()
    watches.set(store, byKey)
  }
  let watch = byKey.get(key)
  if (watch === undefined) {
    watch = new KeyWatch(store, key, byKey, callTimeoutMs)
    byKey.set(key, watch)
    watch.start()
  }
  return watch.add(deadline, leaseLeftMs, callTimeoutMs)
}

/** The number of keys this process is waiting on in `store` (for tests and the bench). */
export function watchedKeys(store: IdempotencyStore): number {
  return watches.get(store)?.size ?? 0
}

/** The number of requests of this process waiting now (for tests). */
export function waitingRequests(): number {
  return waiting
}

class KeyWatch {
  readonly #store: IdempotencyStore
  readonly #key: string
  readonly #registry: Map<string, KeyWatch>
  readonly #waiters = new Set<Waiter>()
  #unwatch: (() => void) | undefined
  #poll: NodeJS.Timeout | undefined
  #polling = false
  /** A notification came while an inspect was under way: look once more after it. */
  #again = false
  #leaseEndsAt = Number.POSITIVE_INFINITY
  #stopped = false
  /** The bound on the poll's inspect: the shortest `storeCallTimeoutMs` of the waiters. */
  #callTimeoutMs: number

  constructor(store: IdempotencyStore, key: string, registry: Map<string, KeyWatch>, callTimeoutMs: number) {
    this.#store = store
    this.#key = key
    this.#registry = registry
    this.#callTimeoutMs = callTimeoutMs
  }

  start(): void {
    try {
      // The first inspect once the subscription is active: nothing that ends the execution
      // after it goes unnoticed. Until then (or if the store never says), the poll's own timer.
      this.#unwatch = this.#store.watch?.(
        this.#key,
        () => this.#changed(),
        () => this.#changed(),
      )
    } catch {
      // No notifications, then: the poll alone decides.
      this.#unwatch = undefined
    }
    this.#schedule(this.#unwatch === undefined ? 0 : POLL_MS)
  }

  add(deadline: number, leaseLeftMs: number, callTimeoutMs: number): Promise<WaitResult> {
    const leaseEndsAt = performance.now() + leaseLeftMs
    if (leaseEndsAt < this.#leaseEndsAt) this.#leaseEndsAt = leaseEndsAt
    if (callTimeoutMs < this.#callTimeoutMs) this.#callTimeoutMs = callTimeoutMs
    waiting++
    return new Promise<WaitResult>((resolve) => {
      const waiter: Waiter = {
        resolve,
        timer: setTimeout(
          () => {
            if (!this.#waiters.delete(waiter)) return
            waiting--
            if (this.#waiters.size === 0) this.#stop()
            resolve(DEADLINE)
          },
          Math.max(0, deadline - performance.now()),
        ),
      }
      this.#waiters.add(waiter)
    })
  }

  /** A notification, or the subscription became active: one shared inspect decides. */
  #changed(): void {
    if (this.#stopped) return
    if (this.#polling) {
      this.#again = true
      return
    }
    clearTimeout(this.#poll)
    void this.#check()
  }

  /** Every waiter wakes with what the inspect read; the watch ends (a waiter still blocked starts a new one). */
  #wake(found: InspectResult | undefined): void {
    if (this.#stopped) return
    this.#stop()
    const result: WaitResult = found === undefined ? { woken: 'changed' } : { woken: 'changed', found }
    for (const waiter of this.#waiters) {
      clearTimeout(waiter.timer)
      waiting--
      waiter.resolve(result)
    }
    this.#waiters.clear()
  }

  #stop(): void {
    if (this.#stopped) return
    this.#stopped = true
    if (this.#registry.get(this.#key) === this) this.#registry.delete(this.#key)
    clearTimeout(this.#poll)
    try {
      this.#unwatch?.()
    } catch {
      // Unsubscribing is best effort as well.
    }
  }

  #schedule(delayMs: number): void {
    if (this.#stopped) return
    clearTimeout(this.#poll)
    const every = this.#unwatch === undefined ? POLL_UNWATCHED_MS : POLL_MS
    const untilLease = Math.max(0, this.#leaseEndsAt - performance.now())
    this.#poll = setTimeout(() => void this.#check(), Math.min(delayMs, every, untilLease + 1))
  }

  /** One inspect: the execution ended when the record is no longer running with a live lease. */
  async #check(): Promise<void> {
    if (this.#stopped || this.#polling) return
    this.#polling = true
    this.#again = false
    let running = true
    let found: InspectResult | undefined
    try {
      found = await bounded('inspect', this.#callTimeoutMs, this.#store.inspect(this.#key, POLL_OWNER))
      if (found.kind === InspectReply.CLAIMED || found.kind === InspectReply.EXECUTING) {
        running = found.leaseRemainingMs > 0
        this.#leaseEndsAt = performance.now() + found.leaseRemainingMs
      } else {
        running = false
      }
    } catch {
      // The store did not answer: keep waiting; the waiters' deadlines bound it.
    }
    this.#polling = false
    if (!running) this.#wake(found)
    else if (this.#again) void this.#check()
    else this.#schedule(Number.POSITIVE_INFINITY)
  }
}
