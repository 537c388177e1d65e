/**
 * The store contract (docs/design.md §3 and §6), for vitest: every store this package ships
 * passes it unchanged, and a store of your own proves itself with the same suite.
 * Short lease and window tests wait on real time: a store must use its own clock, never ours.
 */
import { randomBytes } from 'node:crypto'
import { afterEach, beforeEach, describe, expect } from 'vitest'
import { newOwnerToken } from '../core/attempt.js'
import { ClaimReply, type FailureKind, TransitionReply } from '../core/record.js'
import type { ClaimRequest, IdempotencyStore, OwnerRef, RecordTimes } from '../core/store.js'
import { storeFront } from '../core/store-front.js'
import { claimCases } from './contract/claim.js'
import { type ContractContext, LONG, token } from './contract/context.js'
import { inspectCases } from './contract/inspect.js'
import { transitionCases } from './contract/transitions.js'

/** A store under test with its own teardown (stop a server, drop a table), when `close()` is not enough. */
export interface StoreHarness {
  readonly store: IdempotencyStore
  teardown(): Promise<void>
}

/** Settings of the suite. */
export interface StoreContractOptions {
  /** Named in the suite's title, `store contract: <name>`. @default 'store' */
  readonly name?: string
}

/**
 * A claim request as the suite sends it: a new owner token, fingerprint `fp-a`, operation
 * `POST /orders`, codec `json-1`, policy `1`, with start, `expiredExecution: 'recover'`, and the
 * given times; `overrides` replace any of these. For a store's own tests beside the suite.
 */
export function claimRequest(key: string, times: RecordTimes, overrides: Partial<ClaimRequest> = {}): ClaimRequest {
  return {
    key,
    owner: newOwnerToken(),
    fingerprint: 'fp-a',
    operation: 'POST /orders',
    codec: 'json-1',
    policy: '1',
    start: true,
    expiredExecution: 'recover',
    ...times,
    ...overrides,
  }
}

/**
 * Registers the contract suite (a vitest `describe` with about 70 cases) for one store.
 * `makeStore` runs before every test and returns a fresh store, or a harness with its own
 * teardown; a bare store is closed (`store.close()`) after each test. Records of one test must
 * not be seen by the next: use a new key prefix, or empty the store, in `makeStore`.
 */
export function describeStoreContract(
  makeStore: () => IdempotencyStore | StoreHarness | Promise<IdempotencyStore | StoreHarness>,
  options: StoreContractOptions = {},
): void {
  const setup = async (): Promise<StoreHarness> => {
    const made = await makeStore()
    if ('teardown' in made && typeof made.teardown === 'function') return made
    const store = made as IdempotencyStore
    return { store, teardown: () => store.close() }
  }
  describe(`store contract: ${options.name ?? 'store'}`, () => {
    let harness: StoreHarness
    let store: IdempotencyStore
    let key: string

    beforeEach(async () => {
      harness = await setup()
      // As the layer calls it: through the front, which checks every call's arguments once.
      store = storeFront(harness.store)
      key = `${store.keyPrefix}:idem:1:d1:op1:${randomBytes(32).toString('hex')}`
    })

    afterEach(async () => {
      await harness.teardown()
    })

    function request(overrides: Partial<ClaimRequest> = {}): ClaimRequest {
      return claimRequest(key, LONG, overrides)
    }

    async function held(overrides: Partial<ClaimRequest> = {}): Promise<OwnerRef & { request: ClaimRequest }> {
      const claim = request(overrides)
      const result = await store.claim(claim)
      if (result.kind !== ClaimReply.ACQUIRED && result.kind !== ClaimReply.TAKEN_OVER) {
        throw new Error(`expected to hold the record, got ${result.kind}`)
      }
      return { key: claim.key, owner: claim.owner, attempt: result.attempt, rev: result.rev, request: claim }
    }

    async function completed(response = '{"ok":true}', overrides: Partial<ClaimRequest> = {}) {
      const ref = await held(overrides)
      const times = { ...LONG, ...overrides }
      expect(await store.complete(ref, Buffer.from(response, 'utf8'), times)).toEqual({
        kind: TransitionReply.OK,
        rev: ref.rev + 1,
      })
      return ref
    }

    async function failed(kind: FailureKind, overrides: Partial<ClaimRequest> = {}) {
      const ref = await held(overrides)
      const times = { ...LONG, ...overrides }
      expect(await store.markFailed(ref, kind, times)).toEqual({ kind: TransitionReply.OK, rev: ref.rev + 1 })
      return ref
    }

    /** The record as another caller sees it, without the lease countdown (it moves with time). */
    async function snapshot() {
      const found = await store.inspect(key, token())
      if ('leaseRemainingMs' in found) {
        const { leaseRemainingMs: _moving, ...rest } = found
        return rest
      }
      return found
    }

    const context: ContractContext = {
      get store() {
        return store
      },
      get key() {
        return key
      },
      request,
      held,
      completed,
      failed,
      snapshot,
    }
    claimCases(context)
    transitionCases(context)
    inspectCases(context)
  })
}
