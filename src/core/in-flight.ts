/**
 * Waiting for an execution in progress instead of answering 409 (`inFlight: { waitMs }`). The
 * waiters of one key in one process share one watch: one subscription to the store's
 * notifications (`store.watch`) and one poll (`store.inspect`), however many they are. When the
 * execution ends (a notification, or a poll that no longer finds it running with a live lease)
 * every waiter wakes and claims once more, as a retry would; a waiter whose time is up answers
 * IN_PROGRESS (409).
 *
 * Store calls per waiting request: the first claim, and one claim per wake-up. Per key and
 * process while anyone waits: one subscription and one inspect at once (a completion between
 * the claim and the subscription is not missed), then one every `POLL_MS` (every
 * `POLL_UNWATCHED_MS` on a store without notifications), and one when the lease runs out.
 */
import { newOwnerToken } from './attempt.js'
import { bounded, DEFAULT_STORE_CALL_TIMEOUT_MS } from './deadline.js'
import { InspectReply } from './record.js'
import type { IdempotencyStore } from './store.js'

/** Why a waiter woke. */
export type Woken = 'changed' | 'deadline'

/** The safety poll on a store with notifications, in milliseconds. */
export const POLL_MS = 500
/** The poll on a store without notifications (`watch`), in milliseconds. */
export const POLL_UNWATCHED_MS = 100

/** The token the polls inspect with: never an owner, so `mine` is always false. */
const POLL_OWNER = newOwnerToken()

interface Waiter {
  readonly resolve: (woken: Woken) => void
  readonly timer: NodeJS.Timeout
}

/** The watches of one store, by key. */
const watches = new WeakMap<IdempotencyStore, Map<string, KeyWatch>>()

/**
 * Waits until the execution under `key` may have ended, or until `deadline`
 * (`performance.now()` time).
 * @param leaseLeftMs the lease the claim reported: a poll is due when it runs out.
 */
export function waitForExecution(
  store: IdempotencyStore,
  key: string,
  deadline: number,
  leaseLeftMs: number,
): Promise<Woken> {
  let byKey = watches.get(store)
  if (byKey === undefined) {
    byKey = new Map()
    watches.set(store, byKey)
  }
  let watch = byKey.get(key)
  if (watch === undefined) {
    watch = new KeyWatch(store, key, byKey)
    byKey.set(key, watch)
    watch.start()
  }
  return watch.add(deadline, leaseLeftMs)
}

/** The number of keys this process is waiting on in `store` (for tests and the bench). */
export function watchedKeys(store: IdempotencyStore): number {
  return watches.get(store)?.size ?? 0
}

class KeyWatch {
  readonly #store: IdempotencyStore
  readonly #key: string
  readonly #registry: Map<string, KeyWatch>
  readonly #waiters = new Set<Waiter>()
  #unwatch: (() => void) | undefined
  #poll: NodeJS.Timeout | undefined
  #polling = false
  #leaseEndsAt = Number.POSITIVE_INFINITY
  #stopped = false

  constructor(store: IdempotencyStore, key: string, registry: Map<string, KeyWatch>) {
    this.#store = store
    this.#key = key
    this.#registry = registry
  }

  start(): void {
    try {
      this.#unwatch = this.#store.watch?.(this.#key, () => this.#wake())
    } catch {
      // No notifications, then: the poll alone decides.
      this.#unwatch = undefined
    }
    this.#schedule(0)
  }

  add(deadline: number, leaseLeftMs: number): Promise<Woken> {
    const leaseEndsAt = performance.now() + leaseLeftMs
    if (leaseEndsAt < this.#leaseEndsAt) this.#leaseEndsAt = leaseEndsAt
    return new Promise<Woken>((resolve) => {
      const waiter: Waiter = {
        resolve,
        timer: setTimeout(
          () => {
            this.#waiters.delete(waiter)
            if (this.#waiters.size === 0) this.#stop()
            resolve('deadline')
          },
          Math.max(0, deadline - performance.now()),
        ),
      }
      this.#waiters.add(waiter)
    })
  }

  /** Every waiter claims again; the watch ends (a waiter still blocked starts a new one). */
  #wake(): void {
    if (this.#stopped) return
    this.#stop()
    for (const waiter of this.#waiters) {
      clearTimeout(waiter.timer)
      waiter.resolve('changed')
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
    const every = this.#unwatch === undefined ? POLL_UNWATCHED_MS : POLL_MS
    const untilLease = Math.max(0, this.#leaseEndsAt - performance.now())
    this.#poll = setTimeout(() => void this.#check(), Math.min(delayMs, every, untilLease + 1))
  }

  /** One inspect: the execution ended when the record is no longer running with a live lease. */
  async #check(): Promise<void> {
    if (this.#stopped || this.#polling) return
    this.#polling = true
    let running = true
    try {
      const found = await bounded('inspect', DEFAULT_STORE_CALL_TIMEOUT_MS, this.#store.inspect(this.#key, POLL_OWNER))
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
    if (running) this.#schedule(Number.POSITIVE_INFINITY)
    else this.#wake()
  }
}
