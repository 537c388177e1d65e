/**
 * A wrapper around a real store that injects faults per call, in order:
 * - `lost-reply`: the call reaches the store and is applied, then the reply is lost
 *   (StoreIndeterminateError);
 * - `not-sent`: the call never reaches the store (StoreUnavailableError);
 * - `dropped`: the call never reaches the store, but the caller cannot know it
 *   (StoreIndeterminateError);
 * - `stalled`: like a paused Redis behind a client with a command timeout: the caller gets
 *   StoreIndeterminateError after `stallTimeoutMs`, and the call is applied only when
 *   `resumeStalled()` is called (in the order the calls were made), its reply going nowhere;
 * - `slow`: the call is applied and answered after `stallTimeoutMs` (a slow store);
 * - `late-reply`: the call is applied at once and its reply read only after `stallTimeoutMs`
 *   (the caller's event loop stalled, or its network, while the store went on).
 */
import { StoreIndeterminateError, StoreUnavailableError } from '../../src/core/errors.js'
import type { IdempotencyStore } from '../../src/core/store.js'
import { sleep } from './sleep.js'

export type Fault = 'lost-reply' | 'not-sent' | 'dropped' | 'stalled' | 'slow' | 'late-reply'
export type StoreMethod = 'claim' | 'start' | 'complete' | 'markFailed' | 'release' | 'renew' | 'inspect'

export interface FaultyStore extends IdempotencyStore {
  /** Queues faults for the next calls of `method`. */
  inject(method: StoreMethod, ...faults: Fault[]): void
  /** While set, every call of `method` fails with this fault. */
  block(method: StoreMethod, fault: Fault | undefined): void
  /** How many calls of each method reached the real store. */
  readonly applied: Record<StoreMethod, number>
  /** Applies the stalled calls, in order. */
  resumeStalled(): Promise<void>
}

export function faultyStore(inner: IdempotencyStore, stallTimeoutMs = 200): FaultyStore {
  const stalled: (() => Promise<unknown>)[] = []
  const queues = new Map<StoreMethod, Fault[]>()
  const blocked = new Map<StoreMethod, Fault>()
  const applied: Record<StoreMethod, number> = {
    claim: 0,
    start: 0,
    complete: 0,
    markFailed: 0,
    release: 0,
    renew: 0,
    inspect: 0,
  }

  async function call<R>(method: StoreMethod, run: () => Promise<R>): Promise<R> {
    const fault = blocked.get(method) ?? queues.get(method)?.shift()
    if (fault === 'not-sent') throw new StoreUnavailableError(`injected: ${method} not sent`)
    if (fault === 'dropped') throw new StoreIndeterminateError(`injected: ${method} dropped`)
    if (fault === 'slow') await sleep(stallTimeoutMs)
    if (fault === 'stalled') {
      stalled.push(async () => {
        await run()
        applied[method]++
      })
      await sleep(stallTimeoutMs)
      throw new StoreIndeterminateError(`injected: ${method} timed out (stalled)`)
    }
    const result = await run()
    applied[method]++
    if (fault === 'lost-reply') throw new StoreIndeterminateError(`injected: ${method} reply lost`)
    if (fault === 'late-reply') await sleep(stallTimeoutMs)
    return result
  }

  return {
    name: `faulty(${inner.name})`,
    keyPrefix: inner.keyPrefix,
    applied,
    inject(method, ...faults) {
      queues.set(method, [...(queues.get(method) ?? []), ...faults])
    },
    async resumeStalled() {
      for (const apply of stalled.splice(0)) await apply().catch(() => {})
    },
    block(method, fault) {
      if (fault === undefined) blocked.delete(method)
      else blocked.set(method, fault)
    },
    claim: (request) => call('claim', () => inner.claim(request)),
    start: (ref, times) => call('start', () => inner.start(ref, times)),
    complete: (ref, response, times) => call('complete', () => inner.complete(ref, response, times)),
    markFailed: (ref, kind, times, cause) => call('markFailed', () => inner.markFailed(ref, kind, times, cause)),
    release: (ref) => call('release', () => inner.release(ref)),
    renew: (ref, times) => call('renew', () => inner.renew(ref, times)),
    inspect: (key, owner) => call('inspect', () => inner.inspect(key, owner)),
    close: () => inner.close(),
  }
}
