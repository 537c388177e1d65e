/** What the contract's sections share: the store and key of the test now, and the helpers that make records. */
import { randomBytes } from 'node:crypto'
import type { FailureKind } from '../../core/record.js'
import type { ClaimRequest, IdempotencyStore, OwnerRef, RecordTimes } from '../../core/store.js'

export const LONG: RecordTimes = { leaseMs: 30_000, replayWindowMs: 60_000, failureRetentionMs: 60_000 }
export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
export const token = () => randomBytes(32).toString('hex')

type Held = OwnerRef & { request: ClaimRequest }

export interface ContractContext {
  /** The store (through its front) of the test that runs now. */
  readonly store: IdempotencyStore
  /** The key of the test that runs now. */
  readonly key: string
  /** A claim request for the test's key with long times. */
  request(overrides?: Partial<ClaimRequest>): ClaimRequest
  /** Claims the key and answers the held record. */
  held(overrides?: Partial<ClaimRequest>): Promise<Held>
  /** A held record completed with `response`. */
  completed(response?: string, overrides?: Partial<ClaimRequest>): Promise<Held>
  /** A held record marked failed with `kind`. */
  failed(kind: FailureKind, overrides?: Partial<ClaimRequest>): Promise<Held>
  /** The record as another caller sees it, without the lease countdown. */
  snapshot(): Promise<unknown>
}
