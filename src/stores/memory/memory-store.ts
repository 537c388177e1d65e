/**
 * The memory store (SPEC §6): the same semantics as the Redis store, in one process, proven by
 * the same contract suite. For development, examples and single-process deployments; records
 * live in this process only and are lost when it ends.
 *
 * Every method runs its whole decision synchronously (no `await` between reading the record
 * and writing it), so each call is one atomic step, as one Lua script is in Redis. The shared
 * rules mirror `src/stores/redis/scripts/lib`: `classify()` is `classify.lua`, `ownerCheck()`
 * and `transition()` are `transition.lua`, and the argument checks accept exactly what
 * `args.lua` accepts, so an application that works on one store works on the other.
 */
import { ErrorCode, IdempotencyError, invalidOption, StoreUnavailableError } from '../../core/errors.js'
import {
  ClaimReply,
  ExpiredExecution,
  FailureKind,
  InspectReply,
  type RecordField,
  RecordState,
  RecoveryReason,
  TransitionReply,
} from '../../core/record.js'
import type {
  ClaimRequest,
  ClaimResult,
  IdempotencyStore,
  InspectResult,
  OwnerRef,
  RecordTimes,
  RenewResult,
  TransitionResult,
} from '../store.js'

/** Options of `memoryStore()`. */
export interface MemoryStoreOptions {
  /**
   * First segment of every key (`<keyPrefix>:idem:...`): non-empty, no whitespace.
   * @default 'idemkit'
   */
  readonly keyPrefix?: string
  /**
   * How often, in milliseconds, records past their lifetime are deleted, so memory does not
   * grow with every key ever used (Redis drops such keys by itself with `PEXPIREAT`). An
   * integer from 1 to 2147483647 (the largest `setInterval` delay). The timer does not keep
   * the process alive; `close()` stops it.
   * @default 60000
   */
  readonly sweepIntervalMs?: number
  /**
   * The store's clock, in integer epoch milliseconds: the store's "server time" (SPEC §2). It
   * is read once per call and that one reading makes every lease and expiry decision of the
   * call; callers never pass a time. Replace it only in tests of your own code, to move time
   * without waiting.
   * @default Date.now
   */
  readonly clock?: () => number
}

/** The default of `keyPrefix`, the same as the Redis store's. */
const DEFAULT_KEY_PREFIX = 'idemkit'
/** The default of `sweepIntervalMs`: one minute. */
const DEFAULT_SWEEP_INTERVAL_MS = 60_000
/** The largest delay `setInterval` honours; a larger one fires at once, every millisecond. */
const MAX_TIMER_DELAY_MS = 2_147_483_647
const KNOWN_OPTIONS: ReadonlySet<string> = new Set(['keyPrefix', 'sweepIntervalMs', 'clock'])

/**
 * The largest duration, attempt or rev a call may carry: 15 digits, the bound of the Redis
 * scripts (lib/args.lua), so both stores accept the same calls. `now + value` stays an exact
 * integer.
 */
const MAX_INTEGER = 999_999_999_999_999

/** Owner tokens are 32 random bytes as 64 lowercase hex characters (SPEC §2 "Attempt"). */
const OWNER_TOKEN = /^[0-9a-f]{64}$/

/**
 * `T` when its keys are exactly `K`, otherwise `never`: a compile-time check that the record
 * keeps the field names of `RecordField` (record.ts), the names of the Redis hash.
 */
type ExactKeys<T, K extends PropertyKey> = [Exclude<keyof T, K>, Exclude<K, keyof T>] extends [never, never] ? T : never

/**
 * One scope's record (SPEC §3), a plain object with the field names of `RecordField`. Times
 * are the store clock's epoch milliseconds. It never leaves the store: every reply is built
 * from its fields.
 */
type MemoryRecord = ExactKeys<
  {
    state: RecordState
    owner: string
    attempt: number
    rev: number
    op: string
    fp: string
    codec: string
    policy: string
    leaseUntil: number
    /** COMPLETED only: the end of the replay window, equal to `expiresAt`. */
    replayUntil?: number
    /** From this instant claim and inspect treat the record as absent and the sweep deletes it. */
    expiresAt: number
    createdAt: number
    updatedAt: number
    /** COMPLETED only: the codec-encoded response, exactly as given to `complete`. */
    resp?: string
  },
  RecordField
>

/** A record that is live at `now`, as `classify()` found it. */
interface LiveRecord {
  readonly record: MemoryRecord
  /** True while `leaseUntil > now` (SPEC §3 steps 6-8: `leaseUntil <= now` has run out). */
  readonly leaseLive: boolean
  /** Milliseconds left on the lease: at least 1 while it is live, 0 once it has run out. */
  readonly leaseLeftMs: number
}

/** A transition or renew refusal that does not depend on the target state. */
type OwnerRefusal =
  | { readonly kind: typeof TransitionReply.NOT_FOUND }
  | { readonly kind: typeof TransitionReply.NOT_OWNER }

/**
 * The one classification claim, inspect, every transition and renew share, with one clock
 * reading (SPEC §3 "Inspect"; SPEC §7 defect 5: inspect must not ignore the replay window that
 * claim respects). A record is absent when there is none, when `expiresAt <= now` (any state:
 * past the replay window, the failure retention, or lease plus retention), or when it is
 * COMPLETED with `replayUntil <= now` (claim step 3 replays only while `now < replayUntil`).
 * The rule is the Redis store's `lib/classify.lua`.
 * @param record the stored record, expired or not, or undefined.
 * @param now the store clock's reading for this call.
 * @returns the live record with its lease status, or undefined when the scope is absent.
 */
function classify(record: MemoryRecord | undefined, now: number): LiveRecord | undefined {
  if (record === undefined) return undefined
  if (record.expiresAt <= now) return undefined
  if (record.state === RecordState.COMPLETED && (record.replayUntil ?? 0) <= now) return undefined
  const leaseLive = record.leaseUntil > now
  return { record, leaseLive, leaseLeftMs: leaseLive ? record.leaseUntil - now : 0 }
}

/**
 * The holder check shared by the transitions and renew: no live record → NOT_FOUND; another
 * owner token or another attempt (the record was taken over) → NOT_OWNER.
 * @returns the record when `ref` holds it, or the refusal.
 */
function ownerCheck(live: LiveRecord | undefined, ref: OwnerRef): MemoryRecord | OwnerRefusal {
  if (live === undefined) return { kind: TransitionReply.NOT_FOUND }
  if (live.record.owner !== ref.owner || live.record.attempt !== ref.attempt) return { kind: TransitionReply.NOT_OWNER }
  return live.record
}

/**
 * Compare-and-set on owner, attempt, state and rev with the ALREADY rule (SPEC §3
 * "Transitions"), shared by start, complete, markFailed and release, in this order:
 * absent → NOT_FOUND; owner or attempt differ → NOT_OWNER; state is `target` and rev is
 * exactly `ref.rev + 1` → ALREADY (a re-sent transition whose reply was lost: that is how a
 * lost reply heals); state is not `expected` or rev is not `ref.rev` → WRONG_STATE. Nothing
 * else short-circuits. The rule is the Redis store's `lib/transition.lua`.
 * @param target the state the transition leads to; undefined (release) never answers ALREADY.
 * @returns the record, which the caller then changes, or the reply to send back unchanged.
 */
function transition(
  live: LiveRecord | undefined,
  ref: OwnerRef,
  expected: RecordState,
  target: RecordState | undefined,
): MemoryRecord | TransitionResult {
  const held = ownerCheck(live, ref)
  if (!isRecord(held)) return held
  if (target !== undefined && held.state === target && held.rev === ref.rev + 1) {
    return { kind: TransitionReply.ALREADY, rev: held.rev }
  }
  if (held.state !== expected || held.rev !== ref.rev) return { kind: TransitionReply.WRONG_STATE, state: held.state }
  return held
}

/** Tells a record from a reply: only a record has an `owner`. */
function isRecord(value: MemoryRecord | { readonly kind: string }): value is MemoryRecord {
  return 'owner' in value
}

/**
 * The memory store: one `Map` from store key to record, one clock, and a timer that deletes
 * expired records. Create it with `memoryStore()`.
 */
export class MemoryStore implements IdempotencyStore {
  /** `memory`, for logs and errors. */
  readonly name = 'memory'
  /** The first segment of every key (`<keyPrefix>:idem:...`). */
  readonly keyPrefix: string
  readonly #records = new Map<string, MemoryRecord>()
  readonly #clock: () => number
  readonly #timer: NodeJS.Timeout
  #closed = false

  /**
   * @param options see `MemoryStoreOptions`; `undefined` values take the default.
   * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` for an unknown option or a value out of
   *   range.
   */
  constructor(options: MemoryStoreOptions = {}) {
    if (typeof options !== 'object' || options === null) invalidOption('memoryStore options', 'an object', options)
    // A mistyped option name must fail loudly, never silently fall back to a default (STYLE 9).
    for (const name of Object.keys(options)) {
      if (!KNOWN_OPTIONS.has(name))
        invalidOption(name, `one of ${[...KNOWN_OPTIONS].join(', ')} (unknown option)`, name)
    }
    const { keyPrefix = DEFAULT_KEY_PREFIX, sweepIntervalMs = DEFAULT_SWEEP_INTERVAL_MS, clock = Date.now } = options
    if (typeof keyPrefix !== 'string' || keyPrefix.length === 0 || /\s/.test(keyPrefix)) {
      invalidOption('keyPrefix', 'a non-empty string without whitespace', keyPrefix)
    }
    if (!Number.isSafeInteger(sweepIntervalMs) || sweepIntervalMs < 1 || sweepIntervalMs > MAX_TIMER_DELAY_MS) {
      invalidOption(
        'sweepIntervalMs',
        `an integer number of milliseconds from 1 to ${MAX_TIMER_DELAY_MS}`,
        sweepIntervalMs,
      )
    }
    if (typeof clock !== 'function') invalidOption('clock', 'a function returning integer epoch milliseconds', clock)

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
    for (const [key, record] of this.#records) {
      if (classify(record, now) === undefined) {
        this.#records.delete(key)
        deleted++
      }
    }
    return deleted
  }

  /**
   * Claims a scope: SPEC §3 claim steps 1-8, in that order, in one atomic step (see
   * `IdempotencyStore.claim`).
   * @param request the claim; `owner` stays the same for every re-send of one invocation's claim.
   * @returns the claim's outcome.
   * @throws IdempotencyError `ERR_IDEM_INVALID_ARGUMENT` for a malformed request, before
   *   anything is read or written; StoreUnavailableError after `close()`.
   */
  async claim(request: ClaimRequest): Promise<ClaimResult> {
    this.#checkOpen()
    checkClaim(request)
    const now = this.#now()
    const live = classify(this.#records.get(request.key), now)
    const state = request.start ? RecordState.EXECUTING : RecordState.CLAIMED
    const leaseUntil = now + request.leaseMs
    // store.ts "Record lifetime": an unfinished record outlives its lease by the retention.
    const expiresAt = leaseUntil + request.failureRetentionMs

    // Step 1: absent or expired. A new object replaces an expired one, so nothing of the old
    // record (a stored response, its attempt count) survives.
    if (live === undefined) {
      this.#records.set(request.key, {
        state,
        owner: request.owner,
        attempt: 1,
        rev: 1,
        op: request.operation,
        fp: request.fingerprint,
        codec: request.codec,
        policy: request.policy,
        leaseUntil,
        expiresAt,
        createdAt: now,
        updatedAt: now,
      })
      return { kind: ClaimReply.ACQUIRED, state, attempt: 1, rev: 1, leaseUntil }
    }
    const { record } = live

    // Step 2: before any mutation, in every state, even for the record's own owner. A stored
    // fingerprint of an older fingerprint version of the same request still matches (SPEC §5).
    const legacy = request.legacyFingerprints ?? []
    if (record.fp !== request.fingerprint && !legacy.includes(record.fp)) {
      return { kind: ClaimReply.FINGERPRINT_MISMATCH }
    }

    // Step 3: classify() already turned a COMPLETED record past replayUntil into step 1.
    if (record.state === RecordState.COMPLETED) {
      return {
        kind: ClaimReply.COMPLETED_REPLAY,
        response: record.resp ?? '',
        codec: record.codec,
        policy: record.policy,
        replayUntil: record.replayUntil ?? record.expiresAt,
      }
    }

    // Step 4.
    if (record.state === RecordState.ABANDONED) {
      return { kind: ClaimReply.RECOVERY_REQUIRED, reason: RecoveryReason.ABANDONED }
    }

    // Step 5: the caller's own earlier claim landed and its reply was lost. Only a record the
    // caller can still hold qualifies; its own FAILED_RETRYABLE record goes on to step 6 like
    // anyone else's (as in claim.lua).
    if (
      record.owner === request.owner &&
      (record.state === RecordState.CLAIMED || record.state === RecordState.EXECUTING)
    ) {
      return {
        kind: ClaimReply.REPLAYED_ACQUIRE,
        state: record.state,
        attempt: record.attempt,
        rev: record.rev,
        leaseUntil: record.leaseUntil,
      }
    }

    // Steps 6 and 7.
    const takeOver =
      record.state === RecordState.FAILED_RETRYABLE ||
      (record.state === RecordState.CLAIMED && !live.leaseLive) ||
      (record.state === RecordState.EXECUTING &&
        !live.leaseLive &&
        request.expiredExecution === ExpiredExecution.TAKEOVER)
    if (takeOver) {
      // A new owner and attempt: every transition of the previous holder now answers
      // NOT_OWNER. The record's identity (createdAt) stays; what the new request brings is
      // written, so a replay is judged by the codec and policy that produced it.
      const attempt = record.attempt + 1
      const rev = record.rev + 1
      this.#records.set(request.key, {
        state,
        owner: request.owner,
        attempt,
        rev,
        op: request.operation,
        fp: request.fingerprint,
        codec: request.codec,
        policy: request.policy,
        leaseUntil,
        expiresAt,
        createdAt: record.createdAt,
        updatedAt: now,
      })
      return { kind: ClaimReply.TAKEN_OVER, state, attempt, rev, leaseUntil }
    }
    if (record.state === RecordState.EXECUTING && !live.leaseLive) {
      // The effect may have happened: never run it again automatically.
      return { kind: ClaimReply.RECOVERY_REQUIRED, reason: RecoveryReason.EXPIRED_EXECUTION }
    }

    // Step 8: a live lease, so at least 1 ms is left.
    return { kind: ClaimReply.IN_PROGRESS, retryAfterMs: Math.max(1, live.leaseLeftMs) }
  }

  /**
   * CLAIMED → EXECUTING for `ref`, with a new lease of `times.leaseMs` from now.
   * @param ref the holder: key, owner token, attempt and the rev it last saw.
   * @param times `leaseMs` and `failureRetentionMs` are used.
   * @returns OK with the new rev, ALREADY, NOT_FOUND, NOT_OWNER or WRONG_STATE.
   * @throws IdempotencyError `ERR_IDEM_INVALID_ARGUMENT` for a malformed call;
   *   StoreUnavailableError after `close()`.
   */
  async start(ref: OwnerRef, times: RecordTimes): Promise<TransitionResult> {
    this.#checkOpen()
    checkRef(ref)
    checkDuration(times, 'leaseMs')
    checkDuration(times, 'failureRetentionMs')
    const now = this.#now()
    const found = transition(this.#live(ref.key, now), ref, RecordState.CLAIMED, RecordState.EXECUTING)
    if (!isRecord(found)) return found
    found.state = RecordState.EXECUTING
    found.leaseUntil = now + times.leaseMs
    found.expiresAt = found.leaseUntil + times.failureRetentionMs
    return this.#applied(found, now)
  }

  /**
   * EXECUTING → COMPLETED for `ref`, storing `response`; the record then replays, and lives,
   * for `times.replayWindowMs` (replayUntil = expiresAt).
   * @param ref the holder.
   * @param response the codec-encoded response, stored and replayed exactly (may be empty).
   * @param times `replayWindowMs` is used.
   * @returns OK with the new rev, ALREADY, NOT_FOUND, NOT_OWNER or WRONG_STATE.
   * @throws IdempotencyError `ERR_IDEM_INVALID_ARGUMENT` for a malformed call;
   *   StoreUnavailableError after `close()`.
   */
  async complete(ref: OwnerRef, response: string, times: RecordTimes): Promise<TransitionResult> {
    this.#checkOpen()
    checkRef(ref)
    if (typeof response !== 'string') throw invalidArgument('The response to complete with must be a string.')
    checkDuration(times, 'replayWindowMs')
    const now = this.#now()
    const found = transition(this.#live(ref.key, now), ref, RecordState.EXECUTING, RecordState.COMPLETED)
    if (!isRecord(found)) return found
    found.state = RecordState.COMPLETED
    found.resp = response
    found.replayUntil = now + times.replayWindowMs
    found.expiresAt = found.replayUntil
    return this.#applied(found, now)
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
   * @throws IdempotencyError `ERR_IDEM_INVALID_ARGUMENT` for a malformed call;
   *   StoreUnavailableError after `close()`.
   */
  async markFailed(ref: OwnerRef, kind: FailureKind, times: RecordTimes): Promise<TransitionResult> {
    this.#checkOpen()
    checkRef(ref)
    if (kind !== FailureKind.RETRYABLE && kind !== FailureKind.UNKNOWN) {
      throw invalidArgument(`The failure kind must be "${FailureKind.RETRYABLE}" or "${FailureKind.UNKNOWN}".`)
    }
    checkDuration(times, 'failureRetentionMs')
    const target = kind === FailureKind.RETRYABLE ? RecordState.FAILED_RETRYABLE : RecordState.ABANDONED
    const now = this.#now()
    const found = transition(this.#live(ref.key, now), ref, RecordState.EXECUTING, target)
    if (!isRecord(found)) return found
    found.state = target
    found.expiresAt = now + times.failureRetentionMs
    return this.#applied(found, now)
  }

  /**
   * Deletes a CLAIMED record held by `ref` (compare-and-set on owner, attempt, state and rev).
   * Never any other state: an EXECUTING record is the evidence against a second run. There is
   * no ALREADY: a re-sent release finds nothing (NOT_FOUND).
   * @param ref the holder.
   * @returns OK with rev 0 when deleted; NOT_FOUND, NOT_OWNER or WRONG_STATE otherwise.
   * @throws IdempotencyError `ERR_IDEM_INVALID_ARGUMENT` for a malformed call;
   *   StoreUnavailableError after `close()`.
   */
  async release(ref: OwnerRef): Promise<TransitionResult> {
    this.#checkOpen()
    checkRef(ref)
    const now = this.#now()
    const found = transition(this.#live(ref.key, now), ref, RecordState.CLAIMED, undefined)
    if (!isRecord(found)) return found
    this.#records.delete(ref.key)
    return { kind: TransitionReply.OK, rev: 0 }
  }

  /**
   * Moves the lease of an EXECUTING record held by `ref` (owner and attempt; rev is neither
   * compared nor changed) to `times.leaseMs` from now, and its lifetime with it. Always writes
   * and never answers ALREADY (SPEC §7 defect 3: a renew that short-circuited never moved the
   * lease).
   * @param ref the holder; `ref.rev` is ignored.
   * @param times `leaseMs` and `failureRetentionMs` are used.
   * @returns OK with the new `leaseUntil`, or NOT_FOUND, NOT_OWNER or WRONG_STATE.
   * @throws IdempotencyError `ERR_IDEM_INVALID_ARGUMENT` for a malformed call;
   *   StoreUnavailableError after `close()`.
   */
  async renew(ref: OwnerRef, times: RecordTimes): Promise<RenewResult> {
    this.#checkOpen()
    checkHolder(ref)
    checkDuration(times, 'leaseMs')
    checkDuration(times, 'failureRetentionMs')
    const now = this.#now()
    const found = ownerCheck(this.#live(ref.key, now), ref)
    if (!isRecord(found)) return found
    if (found.state !== RecordState.EXECUTING) return { kind: TransitionReply.WRONG_STATE, state: found.state }
    found.leaseUntil = now + times.leaseMs
    found.expiresAt = found.leaseUntil + times.failureRetentionMs
    found.updatedAt = now
    return { kind: TransitionReply.OK, leaseUntil: found.leaseUntil }
  }

  /**
   * Read-only classification with the same rules and clock reading as claim: a record past
   * its replay window or retention is ABSENT, exactly as claim would then acquire.
   * @param key the record's key.
   * @param owner the inspecting invocation's token; decides `mine`.
   * @returns what the record is, for this owner.
   * @throws IdempotencyError `ERR_IDEM_INVALID_ARGUMENT` for a malformed call;
   *   StoreUnavailableError after `close()`.
   */
  async inspect(key: string, owner: string): Promise<InspectResult> {
    this.#checkOpen()
    checkKey(key)
    checkOwner(owner)
    const now = this.#now()
    const live = this.#live(key, now)
    if (live === undefined) return { kind: InspectReply.ABSENT }
    const { record } = live
    const seen = {
      mine: record.owner === owner,
      attempt: record.attempt,
      rev: record.rev,
      fingerprint: record.fp,
      operation: record.op,
    }
    switch (record.state) {
      case RecordState.CLAIMED:
      case RecordState.EXECUTING:
        return { kind: record.state, ...seen, leaseUntil: record.leaseUntil, leaseRemainingMs: live.leaseLeftMs }
      case RecordState.COMPLETED:
        return {
          kind: InspectReply.COMPLETED,
          ...seen,
          response: record.resp ?? '',
          codec: record.codec,
          policy: record.policy,
          replayUntil: record.replayUntil ?? record.expiresAt,
        }
      case RecordState.FAILED_RETRYABLE:
        return { kind: InspectReply.FAILED_RETRYABLE, ...seen }
      case RecordState.ABANDONED:
        return { kind: InspectReply.ABANDONED, ...seen }
    }
  }

  /**
   * Stops the sweep timer and drops every record. Later calls throw `StoreUnavailableError`
   * (nothing was applied); closing again does nothing.
   */
  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    clearInterval(this.#timer)
    this.#records.clear()
  }

  /** The live record under `key` at `now`, through the one shared classification. */
  #live(key: string, now: number): LiveRecord | undefined {
    return classify(this.#records.get(key), now)
  }

  /** Finishes a compare-and-set transition: every state change moves rev by one. */
  #applied(record: MemoryRecord, now: number): TransitionResult {
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

function invalidArgument(message: string): IdempotencyError {
  return new IdempotencyError(ErrorCode.INVALID_ARGUMENT, message)
}

/** A positive integer the Redis scripts also accept (lib/args.lua `argv_int`). */
function isPositiveInteger(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= MAX_INTEGER
}

function checkDuration(times: RecordTimes, name: keyof RecordTimes): void {
  if (typeof times !== 'object' || times === null || !isPositiveInteger(times[name])) {
    throw invalidArgument(`${name} must be a positive integer number of milliseconds, at most ${MAX_INTEGER}.`)
  }
}

function checkKey(key: unknown): void {
  if (typeof key !== 'string' || key.length === 0) throw invalidArgument('The store key must be a non-empty string.')
}

function checkOwner(owner: unknown): void {
  if (typeof owner !== 'string' || !OWNER_TOKEN.test(owner)) {
    throw invalidArgument('The owner token must be 64 lowercase hex characters (newOwnerToken()).')
  }
}

/** The parts of an owner reference renew reads: key, owner and attempt. */
function checkHolder(ref: OwnerRef): void {
  if (typeof ref !== 'object' || ref === null) throw invalidArgument('The owner reference must be an object.')
  checkKey(ref.key)
  checkOwner(ref.owner)
  if (!isPositiveInteger(ref.attempt)) throw invalidArgument('The attempt must be a positive integer.')
}

/** A whole owner reference, rev included, as the compare-and-set transitions read it. */
function checkRef(ref: OwnerRef): void {
  checkHolder(ref)
  if (!isPositiveInteger(ref.rev)) throw invalidArgument('The rev must be a positive integer.')
}

function checkClaim(request: ClaimRequest): void {
  if (typeof request !== 'object' || request === null) throw invalidArgument('The claim request must be an object.')
  checkKey(request.key)
  checkOwner(request.owner)
  for (const name of ['fingerprint', 'operation', 'codec', 'policy'] as const) {
    const value: unknown = request[name]
    if (typeof value !== 'string' || value.length === 0)
      throw invalidArgument(`The claim's ${name} must be a non-empty string.`)
  }
  const legacy: unknown = request.legacyFingerprints
  if (
    legacy !== undefined &&
    (!Array.isArray(legacy) || !legacy.every((fp) => typeof fp === 'string' && fp.length > 0))
  ) {
    throw invalidArgument('legacyFingerprints must be an array of non-empty strings.')
  }
  if (typeof request.start !== 'boolean') throw invalidArgument("The claim's start must be a boolean.")
  if (request.expiredExecution !== ExpiredExecution.RECOVER && request.expiredExecution !== ExpiredExecution.TAKEOVER) {
    throw invalidArgument(`expiredExecution must be "${ExpiredExecution.RECOVER}" or "${ExpiredExecution.TAKEOVER}".`)
  }
  checkDuration(request, 'leaseMs')
  checkDuration(request, 'failureRetentionMs')
}
