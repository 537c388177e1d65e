/**
 * What a run tells its observers: the executor events (to `onEvent` and `idemkit:event`), the
 * outcome event with its timings (to `onEvent` and `idemkit:outcome`), and the store calls it
 * makes (traced on `idemkit:store`), each numbered by the invocation's `idemkit:start` message when
 * someone listens there (a tracer nests the store calls' spans in the request's). Nothing is built for nobody: an event type `onEvent` does not
 * want is not even made, and the timings are kept only while someone listens for the outcome.
 */
import { eventChannel, type InvocationStart, outcomeChannel, startChannel, storeChannel } from '../channels.js'
import type { EventScope, ExecuteOutcome, ExecutorEvent, StoreCall } from '../outcomes.js'
import type { StoreEndpoint } from '../store.js'
import { shortDigest } from '../store-key.js'

/** Where an operation's events go, and which are wanted: made once per executor. */
export interface EventTargets<C> {
  readonly operation: string
  /** The store's `name`, for the traces. */
  readonly store: string
  readonly labels: { readonly method?: string; readonly route?: string } | undefined
  readonly onEvent: ((event: ExecutorEvent, context: C, key: string) => void) | undefined
  /** The event types `onEvent` receives; `undefined`: all of them. */
  readonly types: ReadonlySet<ExecutorEvent['type']> | undefined
  /** Over HTTP: the status an outcome is answered with, for the outcome event. */
  readonly statusOf?: (outcome: ExecuteOutcome<unknown>) => number | undefined
  /** The store's `endpoint()`, for the traces. */
  readonly endpoint?: () => StoreEndpoint | undefined
}

/** The last invocation number given out in this process (`idemkit:start`). */
let invocations = 0

/** What the store calls of a run use of its observers. */
export interface Observer {
  emit(event: ExecutorEvent): void
  /** Whether an every-request event of this type is wanted by anyone (build it only then). */
  wants(type: 'claim' | 'recorded'): boolean
  /** Whether store calls are timed or traced now (`traced` is needed). */
  readonly tracing: boolean
  /** A store call, timed for the outcome event and traced on `idemkit:store`, for whoever listens. */
  traced<R>(call: StoreCall, send: () => Promise<R>): Promise<R>
}

/** Whether `onEvent` receives events of `type`. */
export function wanted<C>(targets: EventTargets<C>, type: ExecutorEvent['type']): boolean {
  return targets.onEvent !== undefined && (targets.types === undefined || targets.types.has(type))
}

/** One invocation's observers: its events, its store calls' traces, and its outcome's timings. */
export class RunEvents<C> implements Observer {
  readonly #targets: EventTargets<C>
  readonly #key: string
  readonly #context: C
  readonly #claims: boolean
  readonly #records: boolean
  /** The number of this invocation's `idemkit:start` message; undefined when nobody listened. */
  readonly #invocation: number | undefined
  // Timing, only while someone listens for the outcome: begin, the action's start, finish.
  readonly #startedAt: number | undefined
  #ranAt: number | undefined
  #finishingAt = 0
  #storeMs = 0

  /**
   * @param timed whether the outcome event is wanted: the timings are kept from now on.
   * @param claims, records whether `onEvent` wants the `claim` and `recorded` events.
   */
  constructor(targets: EventTargets<C>, key: string, context: C, timed: boolean, claims: boolean, records: boolean) {
    this.#targets = targets
    this.#key = key
    this.#context = context
    this.#claims = claims
    this.#records = records
    this.#startedAt = timed ? performance.now() : undefined
    if (startChannel.hasSubscribers) {
      this.#invocation = ++invocations
      const { operation, labels } = targets
      const start: InvocationStart = { invocation: this.#invocation, operation, digest: this.#digest(), ...labels }
      startChannel.publish(start)
    }
  }

  /** True when the outcome event is to be sent (`outcome()`). */
  get timed(): boolean {
    return this.#startedAt !== undefined
  }

  /** The action starts at `now`. */
  ran(now: number): void {
    if (this.#startedAt !== undefined) this.#ranAt = now
  }

  /** `finish` was called at `now`. */
  finishing(now: number): void {
    this.#finishingAt = now
  }

  get tracing(): boolean {
    return this.#startedAt !== undefined || storeChannel.hasSubscribers
  }

  wants(type: 'claim' | 'recorded'): boolean {
    return (type === 'claim' ? this.#claims : this.#records) || eventChannel.hasSubscribers
  }

  traced<R>(call: StoreCall, send: () => Promise<R>): Promise<R> {
    if (this.#startedAt === undefined && !storeChannel.hasSubscribers) return send()
    const started = performance.now()
    const sent = storeChannel.hasSubscribers
      ? storeChannel.tracePromise(send, {
          call,
          store: this.#targets.store,
          operation: this.#targets.operation,
          digest: this.#digest(),
          invocation: this.#invocation,
          endpoint: this.#targets.endpoint?.(),
        })
      : send()
    if (this.#startedAt === undefined || call === 'renew') return sent
    const add = () => {
      this.#storeMs += performance.now() - started
    }
    sent.then(add, add)
    return sent
  }

  /** The outcome event, to `onEvent` and `idemkit:outcome`. */
  outcome(result: ExecuteOutcome<unknown>): void {
    const now = performance.now()
    const event: ExecutorEvent = {
      type: 'outcome',
      outcome: result.kind,
      attempt: 'attempt' in result ? result.attempt : undefined,
      reason: 'reason' in result ? result.reason : undefined,
      classification: result.kind === 'FAILED' ? result.classification : undefined,
      durationMs: now - (this.#startedAt ?? now),
      storeMs: this.#storeMs,
      executionMs: this.#ranAt === undefined ? undefined : this.#finishingAt - this.#ranAt,
      status: this.#targets.statusOf?.(result),
    }
    if (outcomeChannel.hasSubscribers) outcomeChannel.publish(this.#scoped(event))
    this.emit(event)
  }

  emit(event: ExecutorEvent): void {
    const { onEvent, types } = this.#targets
    if (event.type !== 'outcome' && eventChannel.hasSubscribers) eventChannel.publish(this.#scoped(event))
    if (onEvent === undefined || (types !== undefined && !types.has(event.type))) return
    try {
      onEvent(event, this.#context, this.#key)
    } catch {
      // Observers never change the outcome.
    }
  }

  /** An event with what names its scope: operation, digest prefix, HTTP labels. Never the key or principal. */
  #scoped(event: ExecutorEvent): ExecutorEvent & EventScope {
    const { operation, labels } = this.#targets
    const scoped = { ...event, operation, digest: this.#digest(), ...labels }
    return this.#invocation === undefined ? scoped : { ...scoped, invocation: this.#invocation }
  }

  /** The first 12 hex characters of the scope digest (the key's last 64 characters). */
  #digest(): string {
    return shortDigest(this.#key)
  }
}
