/**
 * The memory store (SPEC §6): the same semantics as the Redis store in one process, with one
 * clock for every decision. For development, examples, tests of an application's own code and
 * single-instance deployments; records are lost when the process ends.
 */
import { ErrorCode, IdempotencyError, invalidOption, StoreUnavailableError } from '../../core/errors.js'
import {
  ClaimReply,
  ExpiredExecution,
  FailureKind,
  InspectReply,
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
   * How often expired records are removed, in milliseconds. The timer does not keep the
   * process alive; `close()` stops it.
   * @default 60000
   */
  readonly sweepIntervalMs?: number
  /**
   * The store's clock in epoch milliseconds: every lease and expiry decision reads it, never
   * the caller's. Replace it only in tests of your own code.
   * @default Date.now
   */
  readonly clock?: () => number
}

/** One record, with the field names of `RecordField`. */
interface MemoryRecord {
  state: RecordState
  owner: string
  attempt: number
  rev: number
  op: string
  fp: string
  codec: string
  policy: string
  leaseUntil: number
  replayUntil?: number
  expiresAt: number
  createdAt: number
  updatedAt: number
  resp?: string
}

const KNOWN_OPTIONS = ['keyPrefix', 'sweepIntervalMs', 'clock']

/**
 * Classifies a record at `now`, with the rules claim and inspect share (SPEC §3): a record
 * past `expiresAt` (replay window, retention, or lease plus retention) is no record at all.
 */
function live(record: MemoryRecord | undefined, now: number): MemoryRecord | undefined {
  return record !== undefined && record.expiresAt > now ? record : undefined
}

export class MemoryStore implements IdempotencyStore {
  readonly name = 'memory'
  readonly keyPrefix: string
  private readonly records = new Map<string, MemoryRecord>()
  private readonly clock: () => number
  private readonly timer: NodeJS.Timeout
  private closed = false

  constructor(options: MemoryStoreOptions = {}) {
    if (options === null || typeof options !== 'object') invalidOption('options', 'an object', options)
    for (const name of Object.keys(options)) {
      if (!KNOWN_OPTIONS.includes(name)) invalidOption(name, `one of ${KNOWN_OPTIONS.join(', ')}`, name)
    }
    const keyPrefix = options.keyPrefix ?? 'idemkit'
    if (typeof keyPrefix !== 'string' || keyPrefix.length === 0 || /\s/.test(keyPrefix)) {
      invalidOption('keyPrefix', 'a non-empty string without whitespace', keyPrefix)
    }
    const sweepIntervalMs = options.sweepIntervalMs ?? 60_000
    if (!Number.isSafeInteger(sweepIntervalMs) || sweepIntervalMs < 1 || sweepIntervalMs > 2_147_483_647) {
      invalidOption('sweepIntervalMs', 'an integer number of milliseconds from 1 to 2147483647', sweepIntervalMs)
    }
    const clock = options.clock ?? Date.now
    if (typeof clock !== 'function') invalidOption('clock', 'a function returning epoch milliseconds', clock)
    this.keyPrefix = keyPrefix
    this.clock = clock
    this.timer = setInterval(() => this.sweep(), sweepIntervalMs)
    this.timer.unref()
  }

  /** How many records are held, expired ones not yet swept included. */
  get size(): number {
    return this.records.size
  }

  /** Removes every expired record now. @returns how many were removed. */
  sweep(): number {
    const now = this.clock()
    let removed = 0
    for (const [key, record] of this.records) {
      if (record.expiresAt <= now) {
        this.records.delete(key)
        removed++
      }
    }
    return removed
  }

  async claim(request: ClaimRequest): Promise<ClaimResult> {
    this.checkOpen()
    checkClaim(request)
    const now = this.clock()
    const record = live(this.records.get(request.key), now)
    const state = request.start ? RecordState.EXECUTING : RecordState.CLAIMED
    const leaseUntil = now + request.leaseMs
    const expiresAt = leaseUntil + request.failureRetentionMs

    // Step 1: absent or expired.
    if (record === undefined) {
      this.records.set(request.key, {
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
    // Step 2: before any mutation, whatever the state.
    if (record.fp !== request.fingerprint && !(request.legacyFingerprints ?? []).includes(record.fp)) {
      return { kind: ClaimReply.FINGERPRINT_MISMATCH }
    }
    // Step 3.
    if (record.state === RecordState.COMPLETED) {
      return {
        kind: ClaimReply.COMPLETED_REPLAY,
        response: record.resp as string,
        codec: record.codec,
        policy: record.policy,
        replayUntil: record.replayUntil as number,
      }
    }
    // Step 4.
    if (record.state === RecordState.ABANDONED) {
      return { kind: ClaimReply.RECOVERY_REQUIRED, reason: RecoveryReason.ABANDONED }
    }
    // Step 5: the caller's own claim landed earlier; its reply was lost.
    if (record.owner === request.owner && (record.state === RecordState.CLAIMED || record.state === RecordState.EXECUTING)) {
      return {
        kind: ClaimReply.REPLAYED_ACQUIRE,
        state: record.state,
        attempt: record.attempt,
        rev: record.rev,
        leaseUntil: record.leaseUntil,
      }
    }
    // Steps 6 and 7.
    const leaseLive = record.leaseUntil > now
    const takeOver =
      record.state === RecordState.FAILED_RETRYABLE ||
      (record.state === RecordState.CLAIMED && !leaseLive) ||
      (record.state === RecordState.EXECUTING && !leaseLive && request.expiredExecution === ExpiredExecution.TAKEOVER)
    if (takeOver) {
      Object.assign(record, {
        state,
        owner: request.owner,
        attempt: record.attempt + 1,
        rev: record.rev + 1,
        op: request.operation,
        fp: request.fingerprint,
        codec: request.codec,
        policy: request.policy,
        leaseUntil,
        expiresAt,
        updatedAt: now,
      })
      return { kind: ClaimReply.TAKEN_OVER, state, attempt: record.attempt, rev: record.rev, leaseUntil }
    }
    if (record.state === RecordState.EXECUTING && !leaseLive) {
      return { kind: ClaimReply.RECOVERY_REQUIRED, reason: RecoveryReason.EXPIRED_EXECUTION }
    }
    // Step 8.
    return { kind: ClaimReply.IN_PROGRESS, retryAfterMs: Math.max(1, record.leaseUntil - now) }
  }

  async start(ref: OwnerRef, times: RecordTimes): Promise<TransitionResult> {
    return this.transition(ref, RecordState.CLAIMED, RecordState.EXECUTING, (record, now) => {
      record.leaseUntil = now + times.leaseMs
      record.expiresAt = record.leaseUntil + times.failureRetentionMs
    }, times)
  }

  async complete(ref: OwnerRef, response: string, times: RecordTimes): Promise<TransitionResult> {
    if (typeof response !== 'string') throw invalidArgument('The response must be a string.')
    return this.transition(ref, RecordState.EXECUTING, RecordState.COMPLETED, (record, now) => {
      record.resp = response
      record.replayUntil = now + times.replayWindowMs
      record.expiresAt = record.replayUntil
    }, times)
  }

  async markFailed(ref: OwnerRef, kind: FailureKind, times: RecordTimes): Promise<TransitionResult> {
    if (kind !== FailureKind.RETRYABLE && kind !== FailureKind.UNKNOWN) {
      throw invalidArgument('The failure kind must be "retryable" or "unknown".')
    }
    const target = kind === FailureKind.RETRYABLE ? RecordState.FAILED_RETRYABLE : RecordState.ABANDONED
    return this.transition(ref, RecordState.EXECUTING, target, (record, now) => {
      record.expiresAt = now + times.failureRetentionMs
    }, times)
  }

  async release(ref: OwnerRef): Promise<TransitionResult> {
    this.checkOpen()
    checkRef(ref)
    const now = this.clock()
    const record = live(this.records.get(ref.key), now)
    const refused = refusal(record, ref)
    if (refused !== undefined) return refused
    const held = record as MemoryRecord
    if (held.state !== RecordState.CLAIMED || held.rev !== ref.rev) {
      return { kind: TransitionReply.WRONG_STATE, state: held.state }
    }
    this.records.delete(ref.key)
    return { kind: TransitionReply.OK, rev: 0 }
  }

  async renew(ref: OwnerRef, times: RecordTimes): Promise<RenewResult> {
    this.checkOpen()
    checkRef(ref)
    checkTimes(times)
    const now = this.clock()
    const record = live(this.records.get(ref.key), now)
    const refused = refusal(record, ref)
    if (refused !== undefined) return refused
    const held = record as MemoryRecord
    if (held.state !== RecordState.EXECUTING) return { kind: TransitionReply.WRONG_STATE, state: held.state }
    // Always written (SPEC §7 defect 3): the lease really moves; rev does not.
    held.leaseUntil = now + times.leaseMs
    held.expiresAt = held.leaseUntil + times.failureRetentionMs
    held.updatedAt = now
    return { kind: TransitionReply.OK, leaseUntil: held.leaseUntil }
  }

  async inspect(key: string, owner: string): Promise<InspectResult> {
    this.checkOpen()
    if (typeof key !== 'string') throw invalidArgument('The key must be a string.')
    checkOwner(owner)
    const now = this.clock()
    const record = live(this.records.get(key), now)
    if (record === undefined) return { kind: InspectReply.ABSENT }
    const base = {
      mine: record.owner === owner,
      attempt: record.attempt,
      rev: record.rev,
      fingerprint: record.fp,
      operation: record.op,
    }
    switch (record.state) {
      case RecordState.CLAIMED:
      case RecordState.EXECUTING:
        return {
          kind: record.state,
          ...base,
          leaseUntil: record.leaseUntil,
          leaseRemainingMs: Math.max(0, record.leaseUntil - now),
        }
      case RecordState.COMPLETED:
        return {
          kind: InspectReply.COMPLETED,
          ...base,
          response: record.resp as string,
          codec: record.codec,
          policy: record.policy,
          replayUntil: record.replayUntil as number,
        }
      default:
        return { kind: record.state, ...base }
    }
  }

  async close(): Promise<void> {
    clearInterval(this.timer)
    this.closed = true
  }

  /**
   * Compare-and-set on owner, attempt, rev and the expected state, with the ALREADY rule: a
   * re-sent transition whose effect is already there (same owner, target state, rev exactly
   * one past the sender's) answers ALREADY (SPEC §3).
   */
  private transition(
    ref: OwnerRef,
    expected: RecordState,
    target: RecordState,
    apply: (record: MemoryRecord, now: number) => void,
    times: RecordTimes,
  ): TransitionResult {
    this.checkOpen()
    checkRef(ref)
    checkTimes(times)
    const now = this.clock()
    const record = live(this.records.get(ref.key), now)
    const refused = refusal(record, ref)
    if (refused !== undefined) return refused
    const held = record as MemoryRecord
    if (held.state === target && held.rev === ref.rev + 1) return { kind: TransitionReply.ALREADY, rev: held.rev }
    if (held.state !== expected || held.rev !== ref.rev) return { kind: TransitionReply.WRONG_STATE, state: held.state }
    apply(held, now)
    held.state = target
    held.rev += 1
    held.updatedAt = now
    return { kind: TransitionReply.OK, rev: held.rev }
  }

  private checkOpen(): void {
    if (this.closed) throw new StoreUnavailableError('The memory store is closed.')
  }
}

function refusal(
  record: MemoryRecord | undefined,
  ref: OwnerRef,
): { kind: typeof TransitionReply.NOT_FOUND } | { kind: typeof TransitionReply.NOT_OWNER } | undefined {
  if (record === undefined) return { kind: TransitionReply.NOT_FOUND }
  if (record.owner !== ref.owner || record.attempt !== ref.attempt) return { kind: TransitionReply.NOT_OWNER }
  return undefined
}

function invalidArgument(message: string): IdempotencyError {
  return new IdempotencyError(ErrorCode.INVALID_ARGUMENT, message)
}

function positiveInt(value: unknown): boolean {
  return typeof value === 'number' && Number.isSafeInteger(value) && value > 0
}

function checkTimes(times: RecordTimes): void {
  if (!positiveInt(times.leaseMs) || !positiveInt(times.replayWindowMs) || !positiveInt(times.failureRetentionMs)) {
    throw invalidArgument('leaseMs, replayWindowMs and failureRetentionMs must be positive integers.')
  }
}

/** Owner tokens are 32 random bytes as 64 lowercase hex characters (SPEC §2 "Attempt"). */
const OWNER_TOKEN = /^[0-9a-f]{64}$/

function checkOwner(owner: unknown): void {
  if (typeof owner !== 'string' || !OWNER_TOKEN.test(owner)) {
    throw invalidArgument('The owner token must be 64 lowercase hex characters.')
  }
}

function checkRef(ref: OwnerRef): void {
  checkOwner(ref.owner)
  if (typeof ref.key !== 'string' || !positiveInt(ref.attempt) || !Number.isSafeInteger(ref.rev)) {
    throw invalidArgument('An owner reference needs a key, an owner token, an attempt and a rev.')
  }
}

function checkClaim(request: ClaimRequest): void {
  checkTimes(request)
  checkOwner(request.owner)
  for (const name of ['key', 'owner', 'fingerprint', 'operation', 'codec', 'policy'] as const) {
    if (typeof request[name] !== 'string' || request[name].length === 0) {
      throw invalidArgument(`The claim's ${name} must be a non-empty string.`)
    }
  }
  if (request.expiredExecution !== ExpiredExecution.RECOVER && request.expiredExecution !== ExpiredExecution.TAKEOVER) {
    throw invalidArgument('expiredExecution must be "recover" or "takeover".')
  }
}
