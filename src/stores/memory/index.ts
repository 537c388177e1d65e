/**
 * The memory store's entry point (docs/design.md §6): `memoryStore()` and its types.
 */
import { MemoryStore } from './memory-store.js'
import type { MemoryStoreOptions } from './options.js'

/**
 * Creates a memory store: the same contract as the Redis store, in one process. For
 * development, examples and single-process deployments; several processes or instances never
 * see each other's records, and records are lost when the process ends.
 * @param options `keyPrefix`, `sweepIntervalMs` and `clock`; every one is optional.
 * @returns the store; `close()` stops its sweep timer and drops its records.
 * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` for an unknown option or a value out of range.
 * @example
 * const store = memoryStore()
 */
export function memoryStore(options?: MemoryStoreOptions): MemoryStore {
  return new MemoryStore(options)
}

export type { MemoryStoreOptions }
export { MemoryStore }
