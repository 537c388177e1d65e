/**
 * Builds `execute()` requests for one scope on one store and counts how often actions ran.
 */
import { randomBytes } from 'node:crypto'
import { jsonCodec } from '../../src/core/codec.js'
import { type ExecuteRequest, execute } from '../../src/core/executor.js'
import type { ExecuteOutcome, ExecutorEvent } from '../../src/core/outcomes.js'
import { type Policy, resolvePolicy } from '../../src/core/policy.js'
import type { IdempotencyStore } from '../../src/core/store.js'
import { storeKey } from '../../src/core/store-key.js'

export interface Harness {
  readonly key: string
  readonly events: ExecutorEvent[]
  /** How many times any action of this harness ran. */
  readonly runs: () => number
  /** Runs `execute()` for the harness's scope; the default action answers `{ n: <run number> }`. */
  run(overrides?: Partial<Extract<ExecuteRequest<unknown>, { key: string }>>): Promise<ExecuteOutcome<unknown>>
  policy(overrides?: Partial<Policy>): Policy
}

export function harness(store: IdempotencyStore): Harness {
  const key = storeKey(store.keyPrefix, 1, 'op', randomBytes(32).toString('hex'))
  const events: ExecutorEvent[] = []
  let runs = 0
  return {
    key,
    events,
    runs: () => runs,
    policy: (overrides) => resolvePolicy({ leaseMs: 5_000, ...overrides }),
    run(overrides = {}) {
      const { action, ...rest } = overrides
      return execute<unknown>({
        store,
        key,
        operation: 'POST /orders',
        fingerprint: 'f1:aa',
        codec: jsonCodec(),
        policy: resolvePolicy({ leaseMs: 5_000 }),
        onEvent: (event) => events.push(event),
        ...rest,
        action: async (context) => {
          runs++
          return action ? action(context) : { n: runs }
        },
      })
    },
  }
}

/** For the tests that import it from here. */
export { sleep } from './sleep.js'

/** A promise with its resolve function, to hold an action open. */
export function gate<T = void>(): { promise: Promise<T>; open: (value: T) => void } {
  let open!: (value: T) => void
  const promise = new Promise<T>((resolve) => {
    open = resolve
  })
  return { promise, open }
}
