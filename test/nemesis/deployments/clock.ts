/**
 * The store's clock fault: a server started under the clock shim (test/helpers/clock-shim.ts)
 * with its wall clock `initialMs` off the true time from the start, stepped during a window by
 * the fault's `stepMs` one way, halfway through the other way, and back to `initialMs` when the
 * window ends. Only the server's wall clock moves (what TIME, key expiry and `clock_timestamp()`
 * read); its monotonic clock and the apps' clocks do not.
 */
import { buildClockShim, type ClockShim } from '../../helpers/clock-shim.js'
import { type StoreFault, sleep } from './types.js'

/** How far the stores' clocks are off the apps' from the start, ms. */
export const INITIAL_SHIFT_MS = 20_000

/** A deployment's servers' clock shims, one per server, each `INITIAL_SHIFT_MS` plus its offset. */
export interface ClockShims {
  readonly shims: readonly ClockShim[]
  /** Removes them all (after the servers stopped, or when they failed to start). */
  remove(): void
}

export function clockShims(offsetsMs: readonly number[]): ClockShims {
  const shims = offsetsMs.map((offset) => buildClockShim(INITIAL_SHIFT_MS + offset))
  return {
    shims,
    remove() {
      for (const shim of shims) shim.remove()
    },
  }
}

/** Starts the servers under `clocks`, removing the shims when the start fails. */
export function startedUnder<T>(clocks: ClockShims, start: Promise<T>): Promise<T> {
  return start.catch((error) => {
    clocks.remove()
    throw error
  })
}

const signed = (ms: number) => `${ms >= 0 ? '+' : '−'}${Math.abs(ms)} ms`

/**
 * The `clock-step` fault on the servers under `shims` (each keeps its own offset). `offset`
 * reads the store's clock now, minus this process's (ms, to a round trip): the detail gives what
 * the store read after each step, or `?` where it did not answer.
 */
export function clockStep(shims: () => readonly ClockShim[], offset: () => Promise<number>): StoreFault {
  const read = () =>
    Promise.race([offset(), sleep(1_000).then(() => Number.NaN)]).then(
      (ms) => (Number.isFinite(ms) ? signed(Math.round(ms)) : '?'),
      () => '?',
    )
  return async ({ fault, start, now }) => {
    const step = fault.stepMs ?? 0
    const stepped = shims().map((shim) => ({ shim, from: shim.shift() }))
    for (const { shim, from } of stepped) shim.set(from + step)
    const ahead = await read()
    await sleep(start + fault.durationMs / 2 - now())
    const back = now() - start
    for (const { shim, from } of stepped) shim.set(from - step)
    const behind = await read()
    await sleep(start + fault.durationMs - now())
    for (const { shim, from } of stepped) shim.set(from)
    const healed = await read()
    return `clock ${signed(step)} (read ${ahead} off), at ${back} ms ${signed(-2 * step)} (read ${behind} off), healed (read ${healed} off)`
  }
}

/** A Redis client's TIME minus this process's clock, ms. */
export async function redisOffset(client: { time(): Promise<unknown> } | undefined): Promise<number> {
  if (client === undefined) return Number.NaN
  const before = Date.now()
  const [seconds, micros] = (await client.time()) as [string, string]
  return Number(seconds) * 1_000 + Number(micros) / 1_000 - (before + Date.now()) / 2
}
