/**
 * The memory store (docs/design.md §6): the same semantics as the Redis store, in one process, proven by
 * the same contract suite. For development, examples and single-process deployments; records
 * live in this process only and are lost when it ends.
 *
 * This file is the map, the clock and the sweep; the decisions are the shared rules of
 * `src/core/rules.ts` (the twins of the Redis scripts' `lib/live.lua`, `claim.lua` and
 * `lib/transition.lua`) and the argument checks of the store front (`src/core/store-front.ts`), so an application
 * that works on one store works on the other. Every method runs its whole decision
 * synchronously (no `await` between reading the record and writing it), so each call is one
 * atomic step, as one Lua script is in Redis.
 */
import { invalidOption, StoreUnavailableError } from '../../core/errors.js'
import { ClaimReply, FailureKind, InspectReply, RecordState, TransitionReply } from '../../core/record.js'
import {
  ClaimStep,
  claimAnswer,
  claimStep,
  leaseLeftMs,
  liveRecord,
  ownerCheck,
  transitionCheck,
} from '../../core/rules.js'
import type * as Store from '../../core/store.js'
import { checkKey } from '../../core/store-args.js'
import { type MarkFailedArgs, StoreFront } from '../../core/store-front.js'
import { KeyListeners } from '../key-listeners.js'
import { decodeRecord, encodeRecord, PackedRecord, packClaimTexts, RECORD_HEADER_BYTES } from '../record-layout.js'
import { type MemoryStoreOptions, memorySettings } from './options.js'

/**
 * The memory store: one `Map` from store key to record, one clock, and a timer that deletes
 * expired records. Create it with `memoryStore()`. A record is kept as its bytes, in the Redis
 * store's record layout 2 (src/stores/record-layout.ts): one Buffer per record, read and changed
 * in place through a view made per call, so a record that lives for its 24 hours is one small
 * object for the garbage collector, not a dozen fields and strings.
 */
export class MemoryStore extends StoreFront {
  /** `memory`, for logs and errors. */
  readonly name = 'memory'
  /** The first segment of every key (`<keyPrefix>:idem:...`). */
  readonly keyPrefix: string
  readonly #records = new Map<string, Buffer>()
  /** `watch()` listeners by key. */
  readonly #listeners = new KeyListeners()
  readonly #clock: () => number
  readonly #timer: NodeJS.Timeout
  #closed = false

  /**
   * @param options see `MemoryStoreOptions`; `undefined` values take the default.
   * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` for an unknown option or a value out of
   *   range.
   */
  constructor(options: MemoryStoreOptions = {}) {
    super()
    const { keyPrefix, sweepIntervalMs, clock } = memorySettings(options)
    this.keyPrefix = keyPrefix
    this.#clock = clock
    this.#timer = setInterval(() => this.#sweepQuietly(), sweepIntervalMs)
    // A development store must never be the reason a process does not exit.
    this.#timer.unref()
  }

  /** How many records the store holds, expired ones the sweep has not deleted yet included. */
  get size(): number {
    return this.#records.size
  }

  /**
   * Deletes every record whose lifetime is over (`expiresAt <= now`), now, instead of waiting
   * for the timer. Deleting them changes no answer: claim and inspect already treat them as
   * absent.
   * @returns how many records were deleted.
   * @throws StoreUnavailableError after `close()`; IdempotencyError `ERR_IDEM_INVALID_OPTION`
   *   when the clock returns something other than integer milliseconds.
   */
  sweep(): number {
    this.#checkOpen()
    const now = this.#now()
    let deleted = 0
    for (const [key, bytes] of this.#records) {
      if (liveRecord(new PackedRecord(bytes), now) === undefined) {
        this.#records.delete(key)
        deleted++
      }
    }
    return deleted
  }

  /**
   * Claims a scope: docs/design.md §3 claim steps 1-8, in that order, in one atomic step (see
   * `IdempotencyStore.claim` and `claimStep`).
   * @param request the claim; `owner` stays the same for every re-send of one invocation's claim.
   * @returns the claim's outcome.
   * @throws StoreUnavailableError after `close()`. (A malformed request never gets here: the
   *   front, src/core/store-front.ts, refuses it.)
   */
  protected async doClaim(request: Store.ClaimRequest): Promise<Store.ClaimResult> {
    this.#checkOpen()
    const now = this.#now()
    const record = this.#live(request.key, now)
    const left = record === undefined ? 0 : leaseLeftMs(record, now)
    const state = request.start ? RecordState.EXECUTING : RecordState.CLAIMED
    const leaseUntil = now + request.leaseMs
    // store.ts "Record lifetime": an unfinished record outlives its lease by the retention.
    const expiresAt = leaseUntil + request.failureRetentionMs

    const step = claimStep(record, left > 0, record?.owner === request.owner, request)
    const answer = claimAnswer(step, record, left)
    if (answer !== undefined) return answer
    if (step === ClaimStep.ACQUIRE) {
      // A new object replaces an expired one, so nothing of the old record survives.
      this.#records.set(request.key, this.#hold(request, state, 1, 1, leaseUntil, expiresAt, now).bytes)
      return { kind: ClaimReply.ACQUIRED, state, attempt: 1, rev: 1, leaseUntil }
    }
    // TAKE_OVER: a new owner and attempt: every transition of the previous holder now answers
    // NOT_OWNER. The record's identity (createdAt) stays; what the new request brings is
    // written, so a replay is judged by the codec and policy that produced it.
    const old = record as PackedRecord
    const attempt = old.attempt + 1
    const rev = old.rev + 1
    const taken = this.#hold(request, state, attempt, rev, leaseUntil, expiresAt, old.createdAt)
    taken.updatedAt = now
    this.#records.set(request.key, taken.bytes)
    return { kind: ClaimReply.TAKEN_OVER, state, attempt, rev, leaseUntil }
  }

  /**
   * CLAIMED → EXECUTING for `ref`, with a new lease of `times.leaseMs` from now.
   * @param ref the holder: key, owner token, attempt and the rev it last saw.
   * @param times `leaseMs` and `failureRetentionMs` are used.
   * @returns OK with the new rev, ALREADY, NOT_FOUND, NOT_OWNER or WRONG_STATE.
   * @throws StoreUnavailableError after `close()`. (A malformed call never gets here: the front,
   *   src/core/store-front.ts, refuses it.)
   */
  protected async doStart(ref: Store.OwnerRef, times: Store.RecordTimes): Promise<Store.TransitionResult> {
    this.#checkOpen()
    const now = this.#now()
    const record = this.#live(ref.key, now)
    const refused = transitionCheck(record, ref, RecordState.CLAIMED, RecordState.EXECUTING)
    if (refused !== undefined || record === undefined) return refused as Store.TransitionResult
    record.state = RecordState.EXECUTING
    record.leaseUntil = now + times.leaseMs
    record.expiresAt = record.leaseUntil + times.failureRetentionMs
    return this.#applied(record, now)
  }

  /**
   * EXECUTING → COMPLETED for `ref`, storing `response`; the record then replays, and lives,
   * for `times.replayWindowMs` (replayUntil = expiresAt).
   * @param ref the holder.
   * @param response the codec-encoded response, stored and replayed exactly (may be empty).
   * @param times `replayWindowMs` is used.
   * @returns OK with the new rev, ALREADY, NOT_FOUND, NOT_OWNER or WRONG_STATE.
   * @throws StoreUnavailableError after `close()`. (A malformed call never gets here: the front,
   *   src/core/store-front.ts, refuses it.)
   */
  protected async doComplete(
    ref: Store.OwnerRef,
    response: Uint8Array,
    times: Store.RecordTimes,
  ): Promise<Store.TransitionResult> {
    this.#checkOpen()
    const now = this.#now()
    const record = this.#live(ref.key, now)
    const refused = transitionCheck(record, ref, RecordState.EXECUTING, RecordState.COMPLETED)
    if (refused !== undefined || record === undefined) return refused as Store.TransitionResult
    const completed = record.completed(response, record.rev + 1, now + times.replayWindowMs, now)
    this.#records.set(ref.key, completed.bytes)
    this.#listeners.notify(ref.key)
    return { kind: TransitionReply.OK, rev: completed.rev }
  }

  /**
   * EXECUTING → FAILED_RETRYABLE (`retryable`: no effect, a later claim may take over) or
   * ABANDONED (`unknown`: the effect is unknown, automatic retries stop) for `ref`; the record
   * then lives for `times.failureRetentionMs`.
   * @param ref the holder.
   * @param kind `retryable` or `unknown`.
   * @param times `failureRetentionMs` is used.
   * @returns OK with the new rev, ALREADY (the same kind re-sent), NOT_FOUND, NOT_OWNER or
   *   WRONG_STATE (including the other failure state).
   * @throws StoreUnavailableError after `close()`. (A malformed call never gets here: the front,
   *   src/core/store-front.ts, refuses it.)
   */
  protected async doMarkFailed(...[ref, kind, times, cause]: MarkFailedArgs): Promise<Store.TransitionResult> {
    this.#checkOpen()
    const target = kind === FailureKind.RETRYABLE ? RecordState.FAILED_RETRYABLE : RecordState.ABANDONED
    const now = this.#now()
    const live = this.#live(ref.key, now)
    const refused = transitionCheck(live, ref, RecordState.EXECUTING, target)
    if (refused !== undefined || live === undefined) return refused as Store.TransitionResult
    const record = cause === undefined ? live : live.withCause(cause)
    if (record !== live) this.#records.set(ref.key, record.bytes)
    record.state = target
    record.expiresAt = now + times.failureRetentionMs
    const applied = this.#applied(record, now)
    this.#listeners.notify(ref.key)
    return applied
  }

  /**
   * Deletes a CLAIMED record held by `ref` (compare-and-set on owner, attempt, state and rev).
   * Never any other state: an EXECUTING record is the evidence against a second run. There is
   * no ALREADY: a re-sent release finds nothing (NOT_FOUND).
   * @param ref the holder.
   * @returns OK with rev 0 when deleted; NOT_FOUND, NOT_OWNER or WRONG_STATE otherwise.
   * @throws StoreUnavailableError after `close()`. (A malformed call never gets here: the front,
   *   src/core/store-front.ts, refuses it.)
   */
  protected async doRelease(ref: Store.OwnerRef): Promise<Store.TransitionResult> {
    this.#checkOpen()
    const now = this.#now()
    const refused = transitionCheck(this.#live(ref.key, now), ref, RecordState.CLAIMED, undefined)
    if (refused !== undefined) return refused as Store.TransitionResult
    this.#records.delete(ref.key)
    this.#listeners.notify(ref.key)
    return { kind: TransitionReply.OK, rev: 0 }
  }

  /**
   * Moves the lease of an EXECUTING record held by `ref` (owner and attempt; rev is neither
   * compared nor changed) to `times.leaseMs` from now, and its lifetime with it. Always writes
   * and never answers ALREADY (docs/design.md §7 defect 3: a renew that short-circuited never moved the
   * lease).
   * @param ref the holder; `ref.rev` is ignored.
   * @param times `leaseMs` and `failureRetentionMs` are used.
   * @returns OK with the new `leaseUntil`, or NOT_FOUND, NOT_OWNER or WRONG_STATE.
   * @throws StoreUnavailableError after `close()`. (A malformed call never gets here: the front,
   *   src/core/store-front.ts, refuses it.)
   */
  protected async doRenew(ref: Store.OwnerRef, times: Store.RecordTimes): Promise<Store.RenewResult> {
    this.#checkOpen()
    const now = this.#now()
    const record = this.#live(ref.key, now)
    const refused = ownerCheck(record, ref)
    if (refused !== undefined || record === undefined) return refused as Store.RenewResult
    if (record.state !== RecordState.EXECUTING) return { kind: TransitionReply.WRONG_STATE, state: record.state }
    record.leaseUntil = now + times.leaseMs
    record.expiresAt = record.leaseUntil + times.failureRetentionMs
    record.updatedAt = now
    return { kind: TransitionReply.OK, leaseUntil: record.leaseUntil }
  }

  /**
   * Read-only classification with the same rules and clock reading as claim: a record past
   * its replay window or retention is ABSENT, exactly as claim would then acquire.
   * @param key the record's key.
   * @param owner the inspecting invocation's token; decides `mine`.
   * @returns what the record is, for this owner.
   * @throws StoreUnavailableError after `close()`. (A malformed call never gets here: the front,
   *   src/core/store-front.ts, refuses it.)
   */
  protected async doInspect(key: string, owner: string): Promise<Store.InspectResult> {
    this.#checkOpen()
    const now = this.#now()
    const record = this.#live(key, now)
    if (record === undefined) return { kind: InspectReply.ABSENT }
    const mine = record.owner === owner
    const { attempt, rev, fp: fingerprint, op: operation } = record
    switch (record.state) {
      case RecordState.CLAIMED:
      case RecordState.EXECUTING:
        return {
          kind: record.state,
          mine,
          attempt,
          rev,
          fingerprint,
          operation,
          leaseUntil: record.leaseUntil,
          leaseRemainingMs: leaseLeftMs(record, now),
        }
      case RecordState.COMPLETED: {
        const { codec, policy, replayUntil } = record
        const response = Buffer.from(record.response)
        return {
          kind: InspectReply.COMPLETED,
          mine,
          attempt,
          rev,
          fingerprint,
          operation,
          response,
          codec,
          policy,
          replayUntil,
        }
      }
      case RecordState.FAILED_RETRYABLE:
      case RecordState.ABANDONED:
        return { kind: record.state, mine, attempt, rev, fingerprint, operation }
    }
  }

  /**
   * Stops the sweep timer and drops every record. Later calls throw `StoreUnavailableError`
   * (nothing was applied); closing again does nothing.
   */
  /** The record under `key` as stored, live or not, with this store's clock (for operators). */
  async read(key: string): Promise<Store.ReadResult> {
    checkKey(key)
    if (this.#closed) throw new StoreUnavailableError('The memory store is closed; nothing was read.')
    const bytes = this.#records.get(key)
    return { record: bytes === undefined ? undefined : decodeRecord(bytes), now: this.#clock() }
  }

  /** Operators only: replaces (or deletes) the record if it is still `expected` (see `IdempotencyStore.replace`). */
  async replace(key: string, expected: Store.RecordView, next: Store.RecordView | undefined): Promise<boolean> {
    checkKey(key)
    if (this.#closed) throw new StoreUnavailableError('The memory store is closed; nothing was changed.')
    const bytes = this.#records.get(key)
    if (bytes === undefined) return false
    const header = encodeRecord(expected).subarray(0, RECORD_HEADER_BYTES)
    if (!bytes.subarray(0, RECORD_HEADER_BYTES).equals(header)) return false
    if (next === undefined) this.#records.delete(key)
    else this.#records.set(key, encodeRecord(next))
    this.#listeners.notify(key)
    return true
  }

  /**
   * Calls `listener` after the record under `key` completes, fails, is released or replaced
   * (see `IdempotencyStore.watch`): in this process only, like every record of this store.
   */
  watch(key: string, listener: () => void, ready?: () => void): () => void {
    const stop = this.#listeners.add(key, listener)
    // In-process notifications flow at once.
    if (ready !== undefined) queueMicrotask(ready)
    return stop
  }

  /** Operators only: every record, as stored (see `IdempotencyStore.scan`). */
  async *scan(): AsyncIterable<Store.ScannedRecord> {
    if (this.#closed) throw new StoreUnavailableError('The memory store is closed; nothing was read.')
    const now = this.#clock()
    for (const [key, bytes] of [...this.#records]) yield { key, record: decodeRecord(bytes), now }
  }

  /** The startup report: records in this process's memory only. */
  async describe(): Promise<Store.StoreReport> {
    return {
      store: this.name,
      settings: { records: this.#records.size },
      warnings: ['records live in this process only: other instances do not see them and a restart loses them'],
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    clearInterval(this.#timer)
    this.#records.clear()
  }

  /** The live record under `key` at `now`, through the one shared rule. */
  #live(key: string, now: number): PackedRecord | undefined {
    const bytes = this.#records.get(key)
    return bytes === undefined ? undefined : liveRecord(new PackedRecord(bytes), now)
  }

  /** A new hold: everything the claim brings, with the record's identity (`createdAt`) given. */
  #hold(
    request: Store.ClaimRequest,
    state: RecordState,
    attempt: number,
    rev: number,
    leaseUntil: number,
    expiresAt: number,
    createdAt: number,
  ): PackedRecord {
    const texts = packClaimTexts(request.codec, request.policy, request.operation)
    return PackedRecord.create(
      state,
      request.owner,
      attempt,
      rev,
      leaseUntil,
      expiresAt,
      createdAt,
      request.fingerprint,
      texts,
    )
  }

  /** Finishes a compare-and-set transition: every state change moves rev by one. */
  #applied(record: PackedRecord, now: number): Store.TransitionResult {
    record.rev += 1
    record.updatedAt = now
    return { kind: TransitionReply.OK, rev: record.rev }
  }

  /**
   * Reads the clock once for a call. A clock that does not return integer milliseconds would
   * make every lease comparison meaningless, so it is refused before anything is written.
   */
  #now(): number {
    const now = this.#clock()
    if (!Number.isSafeInteger(now) || now < 0) {
      invalidOption('clock', 'a function returning non-negative integer epoch milliseconds', now)
    }
    return now
  }

  #checkOpen(): void {
    if (this.#closed) throw new StoreUnavailableError('The memory store is closed; the call was not applied.')
  }

  /** The timer's sweep: a failing clock is reported by the next call, not as an uncaught error. */
  #sweepQuietly(): void {
    try {
      this.sweep()
    } catch {
      // The same clock fault makes the next store call throw, where a caller can handle it.
    }
  }
}
