/**
 * The store's clock fault: a server started under the clock shim (test/helpers/clock-shim.ts)
 * with its wall clock `initialMs` off the true time from the start, stepped during a window by
 * the fault's `stepMs` one way, halfway through the other way, and back to `initialMs` when the
 * window ends. Only the server's wall clock moves (what TIME, key expiry and `clock_timestamp()`
 * read); its monotonic clock and the apps' clocks do not.
 */
import type { ClockShim } from '../../helpers/clock-shim.js'
import { type StoreFault, sleep } from './types.js'

/** How far the stores' clocks are off the apps' from the start, ms. */
export const INITIAL_SHIFT_MS = 20_000

const signed = (ms: number) => `${ms >= 0 ? '+' : '−'}${Math.abs(ms)} ms`

/** The `clock-step` fault on the servers under `shims` (each keeps its own offset). */
export function clockStep(shims: () => readonly ClockShim[]): StoreFault {
  return async ({ fault, start, now }) => {
    const step = fault.stepMs ?? 0
    const stepped = shims().map((shim) => ({ shim, from: shim.shift() }))
    for (const { shim, from } of stepped) shim.set(from + step)
    await sleep(start + fault.durationMs / 2 - now())
    const back = now() - start
    for (const { shim, from } of stepped) shim.set(from - step)
    await sleep(start + fault.durationMs - now())
    for (const { shim, from } of stepped) shim.set(from)
    const from = stepped[0]?.from ?? 0
    return `clock ${signed(step)} (to ${signed(from + step)}), at ${back} ms ${signed(-2 * step)} (to ${signed(from - step)}), healed to ${signed(from)}`
  }
}
