/**
 * What the nemesis run needs of a store deployment (one file per kind beside this one): the
 * apps' environment, the store faults it can apply, a reader of the records and its stop.
 */
import type { IdempotencyStore } from '../../../src/core/store.js'
import type { Fault, FaultKind } from '../schedule.js'

/** One store fault being applied: the fault, its instance (0 when it names none), when it began. */
export interface FaultWindow {
  readonly fault: Fault
  readonly instance: number
  readonly start: number
  /** Milliseconds since the load began. */
  now(): number
}

/** Applies a fault, waits out its window, heals it; answers a detail for the log, if any. */
export type StoreFault = (window: FaultWindow) => Promise<string | undefined>

export interface Deployment {
  /**
   * The port each instance's TCP proxy forwards to, or undefined when the apps reach the nodes
   * at the addresses the deployment gives (Sentinel, Cluster) with no proxy in between.
   */
  readonly proxiedPort: number | undefined
  /** The store's part of an app instance's environment; `proxyPort` is its proxy's, if any. */
  env(proxyPort: number | undefined): Record<string, string>
  /** The store faults this deployment applies, by kind (the schedule gives it no others). */
  readonly faults: Partial<Record<FaultKind, StoreFault>>
  /** Which node is what now, by the deployment's own account (Sentinel only). */
  roles?(): Promise<string>
  /** A store that reads the records as they are now, as `idemkit inspect` does. */
  reader(): Promise<{ readonly store: IdempotencyStore; close(): Promise<void> }>
  /** The database of the deposits' rows, on PostgreSQL. */
  databaseUrl(): string | undefined
  stop(): Promise<void>
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)))
