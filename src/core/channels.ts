/**
 * The library's `node:diagnostics_channel` channels, the way undici and Fastify publish theirs:
 * subscribe with `diagnostics_channel.subscribe(name, listener)` (or `tracingChannel(name)` for
 * the store calls). Nothing is built for a channel nobody subscribed to. No message carries a
 * raw idempotency key or a principal: scopes are named by the first 12 hex characters of their
 * digest.
 *
 * - `idemkit:start`: one message per invocation as it begins (`InvocationStart`), in the caller's
 *   async context; its `invocation` number is in the invocation's store-call contexts and its
 *   outcome, so a tracer can make the request's span the parent of its store calls' spans.
 * - `idemkit:outcome`: one message per invocation when its answer is known (`OutcomeEvent`).
 * - `idemkit:event`: the executor's other events (reconcile, store-error, lease renewal and
 *   loss, recorded) and the stores' own (redis-restarted, unsafe-eviction-policy, sweep-failed).
 * - `idemkit:store` (a TracingChannel: `tracing:idemkit:store:start`, `:end`, `:asyncStart`,
 *   `:asyncEnd`, `:error`): around every store call an invocation makes, with a
 *   `StoreCallContext`.
 */
import { channel, tracingChannel } from 'node:diagnostics_channel'
import type { StoreCall } from './outcomes.js'
import type { StoreEndpoint } from './store.js'

export const START_CHANNEL = 'idemkit:start'
export const OUTCOME_CHANNEL = 'idemkit:outcome'
export const EVENT_CHANNEL = 'idemkit:event'
export const STORE_CHANNEL = 'idemkit:store'

export const startChannel = channel(START_CHANNEL)
export const outcomeChannel = channel(OUTCOME_CHANNEL)

/** What `idemkit:start` carries: an invocation begins. Never the key or the principal. */
export interface InvocationStart {
  /** The invocation's number in this process: the same in its store calls' contexts and its outcome. */
  readonly invocation: number
  readonly operation: string
  /** The first 12 hex characters of the scope digest. */
  readonly digest: string
  /** Over HTTP: the request method and the route pattern. */
  readonly method?: string
  readonly route?: string
}
export const eventChannel = channel(EVENT_CHANNEL)

/** What `idemkit:store` traces carry: the call, and after it, `result` or `error`. */
export interface StoreCallContext {
  readonly call: StoreCall
  /** The store's `name`: `redis`, `postgres`, `memory`. */
  readonly store: string
  readonly operation: string
  /** The first 12 hex characters of the scope digest. */
  readonly digest: string
  /** The invocation's number, as in its `idemkit:start` message, when someone listens there. */
  readonly invocation?: number
  /** Where the store's server is (`store.endpoint()`), when the store says. */
  readonly endpoint?: StoreEndpoint
  result?: unknown
  error?: unknown
}

/**
 * What the executor uses of the `idemkit:store` TracingChannel. Declared here rather than as
 * `TracingChannel<...>`, whose type parameters differ between `@types/node` majors (20 and 26),
 * so that the published declarations compile against either.
 */
export interface StoreTracing {
  readonly hasSubscribers: boolean
  tracePromise<R>(send: () => Promise<R>, context: StoreCallContext): Promise<R>
}

export const storeChannel: StoreTracing = tracingChannel(STORE_CHANNEL)

/** Publishes a store's own event (e.g. `redis-restarted`) on `idemkit:event`, if anyone listens. */
export function publishStoreEvent(
  store: string,
  event: { readonly type: string; readonly [field: string]: unknown },
): void {
  if (eventChannel.hasSubscribers) eventChannel.publish({ store, ...event })
}
