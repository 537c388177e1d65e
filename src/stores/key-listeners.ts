/**
 * The `watch()` listeners of a store, by key (the optional `IdempotencyStore.watch`): the
 * memory store calls them in-process, the Redis store from its subscription. A listener that
 * throws never changes what the store does.
 */
export class KeyListeners {
  readonly #byKey = new Map<string, Set<() => void>>()

  /**
   * Adds `listener` under `key`; `first` runs when the key had none (to subscribe).
   * @returns removes the listener, and runs `last` when the key has none left (to unsubscribe).
   */
  add(key: string, listener: () => void, first?: () => void, last?: () => void): () => void {
    let listeners = this.#byKey.get(key)
    if (listeners === undefined) {
      listeners = new Set()
      this.#byKey.set(key, listeners)
      first?.()
    }
    listeners.add(listener)
    const set = listeners
    return () => {
      set.delete(listener)
      if (set.size > 0 || this.#byKey.get(key) !== set) return
      this.#byKey.delete(key)
      last?.()
    }
  }

  /** Calls every listener of `key`. */
  notify(key: string): void {
    const listeners = this.#byKey.get(key)
    if (listeners === undefined) return
    for (const listener of [...listeners]) {
      try {
        listener()
      } catch {
        // A listener never changes what the store does.
      }
    }
  }

  /** Forgets every listener (the store closed): none is called, none unsubscribes. */
  clear(): void {
    this.#byKey.clear()
  }
}
