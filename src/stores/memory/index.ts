/**
 * The memory store's entry point.
 */
import { MemoryStore, type MemoryStoreOptions } from './memory-store.js'

/**
 * Creates a memory store: the same contract as the Redis store, in one process.
 * @param options key prefix, sweep interval and clock.
 * @returns the store; `close()` stops its sweep timer.
 * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` for an unknown or invalid option.
 */
export function memoryStore(options?: MemoryStoreOptions): MemoryStore {
  return new MemoryStore(options)
}

export { MemoryStore }
export type { MemoryStoreOptions }
