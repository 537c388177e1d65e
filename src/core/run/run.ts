/**
 * A won scope, as `begin()` hands it out: the action's frozen context (fencing token, signal,
 * db), its lease kept alive by the heartbeat, and `finish(settled)`, which records the action's
 * outcome and never rejects.
 */
import { type KeyFor, type KeyForOptions, keyDeriver, noKeyFor } from '../derived-key.js'
import type { LeaseSignal } from '../lease.js'
import type { Settled } from '../outcomes.js'
import type { Secrets } from '../scope.js'
import type { TransactionClient } from '../store-transaction.js'
import { record } from './finish.js'
import type { Heartbeat } from './heartbeat.js'
import type { Invocation, Won } from './invocation.js'
import { type Step, stepper } from './steps.js'
import { finishInTransaction } from './transaction.js'
import type { ActionContext, Finished } from './types.js'

/** What the action is given: frozen; the signal and the key deriver are made only when used. */
class RunContext implements ActionContext {
  readonly fencingToken: number
  readonly db: TransactionClient | undefined
  readonly tx: unknown
  /** Bound, so `const { keyFor } = context` works too. */
  readonly keyFor: KeyFor
  /** Bound too; `noStep` without a transaction that keeps recovery points. */
  readonly step: Step
  readonly #lease: LeaseSignal

  constructor(won: Won, lease: LeaseSignal, secrets: Secrets | undefined) {
    const { hold, transaction } = won
    const key = hold.key
    this.fencingToken = hold.attempt
    this.db = transaction?.db
    this.tx = transaction?.tx
    this.step = stepper(transaction, hold)
    this.#lease = lease
    let derive: KeyFor | undefined
    // The held record's key: a re-run of a record under an older secret derives that version's keys.
    this.keyFor =
      secrets === undefined
        ? noKeyFor
        : (name, options) => {
            derive ??= keyDeriver(secrets, key)
            return derive(name, options)
          }
    Object.freeze(this)
  }

  get signal(): AbortSignal {
    return this.#lease.signal
  }
}

/**
 * A won scope, as `begin()` hands it out: the action's context, and `finish(settled)` once the
 * action has settled. The lease is renewed by the heartbeat from the win until finish.
 */
export class Run<T, C = undefined> {
  readonly kind = 'RUN'
  /** What the action is given (`execute()` passes it to the action). */
  readonly context: ActionContext
  readonly #invocation: Invocation<T, C>
  readonly #won: Won
  readonly #heartbeat: Heartbeat
  /** When the scope was won (the Retry-After estimate). */
  readonly #heldAt: number
  #finished = false

  /** `heartbeat`: the won scope's lease, counted from the send of its latest confirmation. */
  constructor(invocation: Invocation<T, C>, won: Won, heartbeat: Heartbeat) {
    this.#invocation = invocation
    this.#won = won
    this.#heartbeat = heartbeat
    this.context = new RunContext(won, heartbeat.lease, invocation.settings.secrets)
    const now = performance.now()
    this.#heldAt = now
    invocation.events.ran(now)
    heartbeat.start()
  }

  /** The record's attempt number: the fencing token. */
  get attempt(): number {
    return this.context.fencingToken
  }

  /** See `ActionContext.fencingToken`. */
  get fencingToken(): number {
    return this.context.fencingToken
  }

  /** See `ActionContext.signal`. */
  get signal(): AbortSignal {
    return this.context.signal
  }

  /** See `ActionContext.keyFor`. */
  keyFor(name: string, options?: KeyForOptions): string {
    return this.context.keyFor(name, options)
  }

  /** See `ActionContext.step`. */
  step<R>(name: string, run: (db: TransactionClient) => R | Promise<R>): Promise<R> {
    return this.context.step(name, run)
  }

  /** See `ActionContext.db`. */
  get db(): TransactionClient | undefined {
    return this.context.db
  }

  /** See `ActionContext.tx`. */
  get tx(): unknown {
    return this.context.tx
  }

  /**
   * Records the action's settled result and answers the run's outcome. Never rejects: a store
   * that cannot record it is an outcome (FAILED not recorded, UNRECORDED), not an error.
   * Once per run: the heartbeat stops, a renewal already sent is waited for, so none lands
   * after the outcome.
   */
  finish(settled: Settled<T>): Promise<Finished<T>> {
    const invocation = this.#invocation
    const now = performance.now()
    invocation.settings.noteRun(now - this.#heldAt)
    if (!invocation.events.timed) return this.#finish(settled)
    invocation.events.finishing(now)
    return this.#finish(settled).then((finished) => {
      invocation.events.outcome(finished)
      return finished
    })
  }

  async #finish(settled: Settled<T>): Promise<Finished<T>> {
    if (this.#finished) throw new Error('A run is finished once.')
    this.#finished = true
    const renewing = this.#heartbeat.stop()
    if (renewing !== undefined) await renewing
    const { hold, transaction } = this.#won
    return transaction === undefined
      ? record(this.#invocation, hold, settled)
      : finishInTransaction(this.#invocation, hold, transaction, settled)
  }
}
