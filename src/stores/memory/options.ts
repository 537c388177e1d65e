/** The memory store's options, their defaults and their checks (`memorySettings()`). */
import { integerOption, invalidOption } from '../../core/errors.js'
import { checkKeyPrefix, checkOptionNames } from '../../core/store-front.js'

/** Options of `memoryStore()`. */
export interface MemoryStoreOptions {
  /**
   * First segment of every key (`<keyPrefix>:idem:...`): non-empty, no whitespace.
   * @default 'idemkit'
   */
  readonly keyPrefix?: string
  /**
   * How often, in milliseconds, records past their lifetime are deleted, so memory does not
   * grow with every key ever used (Redis drops such keys by itself, at their `PXAT` expiry). An
   * integer from 1 to 2147483647 (the largest `setInterval` delay). The timer does not keep
   * the process alive; `close()` stops it.
   * @default 60000
   */
  readonly sweepIntervalMs?: number
  /**
   * The store's clock, in integer epoch milliseconds: the store's "server time" (docs/design.md §2). It
   * is read once per call and that one reading makes every lease and expiry decision of the
   * call; callers never pass a time. Replace it only in tests of your own code, to move time
   * without waiting.
   * @default Date.now
   */
  readonly clock?: () => number
}

/** The default of `keyPrefix`, the same as the Redis store's. */
const DEFAULT_KEY_PREFIX = 'idemkit'
/** The default of `sweepIntervalMs`: one minute. */
const DEFAULT_SWEEP_INTERVAL_MS = 60_000
/** The largest delay `setInterval` honours; a larger one fires at once, every millisecond. */
const MAX_TIMER_DELAY_MS = 2_147_483_647
const KNOWN_OPTIONS: readonly string[] = ['keyPrefix', 'sweepIntervalMs', 'clock']

/** The options with their defaults, checked: `ERR_IDEM_INVALID_OPTION` names what is wrong. */
export function memorySettings(options: MemoryStoreOptions): Required<MemoryStoreOptions> {
  checkOptionNames(options, KNOWN_OPTIONS, 'memoryStore options')
  const { keyPrefix = DEFAULT_KEY_PREFIX, sweepIntervalMs = DEFAULT_SWEEP_INTERVAL_MS, clock = Date.now } = options
  checkKeyPrefix(keyPrefix)
  integerOption('sweepIntervalMs', sweepIntervalMs, 1, MAX_TIMER_DELAY_MS, 'milliseconds')
  if (typeof clock !== 'function') invalidOption('clock', 'a function returning integer epoch milliseconds', clock)
  return { keyPrefix, sweepIntervalMs, clock }
}
