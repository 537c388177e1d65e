/**
 * A store that counts the calls made on it and passes each one on unchanged to the real store
 * behind it (every other property too), so a test can print how many store calls a request
 * made. `hideWatch` leaves the store's notifications out, as on a store without them.
 */
import type { IdempotencyStore } from '../../src/core/store.js'

export interface CountingStore {
  readonly store: IdempotencyStore
  readonly counts: Record<string, number>
  reset(): void
}

export function countingStore(inner: IdempotencyStore, options: { hideWatch?: boolean } = {}): CountingStore {
  const counts: Record<string, number> = {}
  const store = new Proxy(inner, {
    get(target, name, receiver) {
      if (name === 'watch' && options.hideWatch === true) return undefined
      const value = Reflect.get(target, name, receiver)
      if (typeof value !== 'function' || typeof name !== 'string') return value
      return (...args: unknown[]) => {
        counts[name] = (counts[name] ?? 0) + 1
        return (value as (...a: unknown[]) => unknown).apply(target, args)
      }
    },
  })
  return {
    store,
    counts,
    reset() {
      for (const name of Object.keys(counts)) delete counts[name]
    },
  }
}
