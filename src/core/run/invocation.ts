/**
 * What one invocation's flow (flow.ts) and its run (run.ts) share: the operation's settings, the
 * invocation's claim request, events and claim deadline.
 */
import type { Classification, Settled } from '../outcomes.js'
import type { ReplayCache } from '../replay-cache.js'
import type { Schedule } from '../schedule.js'
import type { Secrets } from '../scope.js'
import type { ClaimRequest } from '../store.js'
import type { StoreTransaction } from '../store-transaction.js'
import type { Held } from './calls.js'
import type { ClaimDeadline } from './claim-deadline.js'
import type { EventTargets, RunEvents } from './events.js'
import type { FinishScope } from './finish.js'
import type { HeartbeatSettings } from './heartbeat.js'
import type { CallLimits } from './settle.js'
import type { ExecutorConfig } from './types.js'

/** What a run uses of its operation's executor (`Executor` is one). */
export interface RunSettings<T, C> extends CallLimits, HeartbeatSettings {
  readonly config: ExecutorConfig<T, C>
  readonly classify: (settled: Settled<T>) => Classification
  /** The claim deadline's schedule, with `claimTimeoutMs`. */
  readonly deadlines: Schedule | undefined
  readonly targets: EventTargets<C>
  readonly emitsClaim: boolean
  readonly emitsRecorded: boolean
  readonly emitsOutcome: boolean
  /** The parsed `secrets` of the config: what `keyFor` derives under. */
  readonly secrets: Secrets | undefined
  /** The `replayCache` of the config, when it has one. */
  readonly replayCache: ReplayCache | undefined
  /** Notes how long a run of the operation took (the Retry-After estimate). */
  noteRun(ms: number): void
  /** The Retry-After of IN_PROGRESS, from the lease left. */
  retryAfter(leaseLeftMs: number): number
}

/** One invocation: what its store calls share, its events, and its claim deadline once set. */
export interface Invocation<T, C> extends FinishScope<T> {
  readonly settings: RunSettings<T, C>
  readonly events: RunEvents<C>
  readonly legacyKeys: readonly string[] | undefined
  deadline: ClaimDeadline | undefined
  /**
   * When the latest claim was first sent (`performance.now()`): its lease began after it, so
   * the lease runs at least until this plus the lease (flow.ts `answer`, where the run's heartbeat counts from it).
   */
  claimSentAt: number
  /**
   * The claim; its key changes once, before the claim is sent, to an older secret version's key
   * whose record a resumed claim takes over where it is (flow.ts `lookUp`).
   */
  request: ClaimRequest
}

/** The scope won, with the run's transaction when it runs in one. */
export interface Won extends Held {
  readonly transaction?: StoreTransaction
}
