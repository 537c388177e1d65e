/**
 * Redis's own clock for tests and test helpers. Kept apart from stores.ts (which reads the
 * suite's servers through vitest's `inject`) so that helpers run under any vitest config, such
 * as store-model.ts under vitest.faults.config.ts, can use it without that import.
 */
import type { Redis } from 'ioredis'

/** Redis's own clock (TIME) in ms, as the store's scripts read it. */
export async function serverNow(redis: Redis): Promise<number> {
  const [seconds, micros] = (await redis.time()) as [number | string, number | string]
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)
}
