/**
 * Finding one scope's record from what an operator knows (principal, key, operation): the
 * store holds only HMAC digests, so the digest is computed under every configured secret
 * version and each key read as stored (`store.read()`), with the store's clock.
 */
import { ErrorCode, IdempotencyError, invalidOption } from '../core/errors.js'
import type { FailureCause } from '../core/failure-cause.js'
import { leaseLeftMs, liveRecord } from '../core/rules.js'
import type { Secrets } from '../core/scope.js'
import type { IdempotencyStore, RecordView } from '../core/store.js'
import { storeFront } from '../core/store-front.js'
import { operationCode, scopeKeys, shortDigest } from '../core/store-key.js'
import { RESPONSE_CODEC_ID } from '../http/response-codec.js'
import { type RecordResolution, resolutionOf } from './resolution.js'

export interface InspectInput {
  readonly store: IdempotencyStore
  readonly secrets: Secrets
  readonly principal: string
  readonly key: string
  /** The operation's name, e.g. `POST /orders` (the route's default: `METHOD /route/pattern`). */
  readonly operation: string
}

/** One record as an operator reads it: the stored fields and what they mean now. */
export interface RecordSummary {
  readonly state: RecordView['state']
  readonly attempt: number
  readonly rev: number
  readonly operation: string
  /** Since the record was created (or recreated after it expired), ms. */
  readonly ageMs: number
  /** Since its last change (a claim, a renewal, an outcome), ms. */
  readonly updatedMsAgo: number
  /** Left on the lease (CLAIMED, EXECUTING); 0 once it ran out. */
  readonly leaseLeftMs: number
  /** COMPLETED: left in the replay window. */
  readonly replayLeftMs: number | undefined
  /** Until the record reads as absent (and a new request with the key runs). */
  readonly expiresInMs: number
  readonly expired: boolean
  readonly codec: string
  readonly policy: string
  /** COMPLETED: the stored response's status (http-2 responses) and size. */
  readonly response: { readonly status: number | undefined; readonly bytes: number } | undefined
  /** The first 8 characters of the holder's token. */
  readonly owner: string
  /** Who resolved the record, when and why (`idemkit resolve`); absent on a record no operator changed. */
  readonly resolution: RecordResolution | undefined
  /**
   * FAILED_RETRYABLE, ABANDONED: why the execution failed (its class; idemkit's own message),
   * when the record kept it (docs/operations.md "Why a record failed").
   */
  readonly cause: FailureCause | undefined
}

export interface InspectedVersion {
  readonly version: number
  readonly current: boolean
  /** The first 12 hex characters of the scope digest under this version. */
  readonly digest: string
  readonly storeKey: string
  readonly record: RecordSummary | undefined
}

export interface Inspection {
  readonly operation: string
  readonly versions: readonly InspectedVersion[]
  /** The store's clock at the read, epoch ms. */
  readonly now: number
}

/** Reads the scope's record under every secret version, the current one first. */
export async function inspectScope(input: InspectInput): Promise<Inspection> {
  const { secrets, principal, key, operation } = input
  const store = storeFront(input.store)
  if (typeof store.read !== 'function') {
    throw new IdempotencyError(ErrorCode.INVALID_OPTION, `The ${store.name} store cannot read records for operators.`)
  }
  if (typeof principal !== 'string') invalidOption('principal', 'a string', principal)
  if (typeof key !== 'string' || key.length === 0) invalidOption('key', 'the Idempotency-Key, a non-empty string', key)
  if (typeof operation !== 'string' || operation.length === 0)
    invalidOption('operation', 'e.g. "POST /orders"', operation)
  const versions: InspectedVersion[] = []
  let now = 0
  for (const at of scopeKeys(store.keyPrefix, secrets, operationCode(operation), { principal, key, operation })) {
    const read = await store.read(at.key)
    now = read.now
    versions.push({
      version: at.version,
      current: at.version === secrets.current,
      digest: shortDigest(at.digest),
      storeKey: at.key,
      record: read.record === undefined ? undefined : summarise(read.record, read.now),
    })
  }
  return { operation, versions, now }
}

/** A record found, with where it is: its secret version, digest prefix and store key. */
export interface FoundRecord {
  readonly version: number
  /** The first 12 hex characters of the scope digest. */
  readonly digest: string
  readonly storeKey: string
  readonly record: RecordView
  /** The store's clock at the read, epoch ms. */
  readonly now: number
}

/** The scope's record under the first secret version that has one (current first), as stored. */
export async function findRecord(input: InspectInput): Promise<FoundRecord | undefined> {
  const { secrets, principal, key, operation } = input
  const store = storeFront(input.store)
  if (typeof store.read !== 'function') {
    throw new IdempotencyError(ErrorCode.INVALID_OPTION, `The ${store.name} store cannot read records for operators.`)
  }
  for (const at of scopeKeys(store.keyPrefix, secrets, operationCode(operation), { principal, key, operation })) {
    const read = await store.read(at.key)
    if (read.record !== undefined) {
      const { version, digest, key: storeKey } = at
      return { version, digest: shortDigest(digest), storeKey, record: read.record, now: read.now }
    }
  }
  return undefined
}

/** A record's times by the store's clock `now`, for `inspect` and `list`. */
export function recordTimes(record: RecordView, now: number) {
  const running = record.state === 'CLAIMED' || record.state === 'EXECUTING'
  return {
    ageMs: now - record.createdAt,
    updatedMsAgo: now - record.updatedAt,
    leaseLeftMs: running ? leaseLeftMs(record, now) : 0,
    /** When it stops being live: the end of the replay window for a completed record. */
    liveUntil: record.state === 'COMPLETED' ? Math.min(record.replayUntil, record.expiresAt) : record.expiresAt,
    // The stores' own rule (src/core/rules.ts): what claim and inspect would treat as absent.
    expired: liveRecord(record, now) === undefined,
  }
}

/** A record as `inspect` shows it, by the store's clock `now`. */
export function summarise(record: RecordView, now: number): RecordSummary {
  const completed = record.state === 'COMPLETED'
  const { ageMs, updatedMsAgo, leaseLeftMs, liveUntil, expired } = recordTimes(record, now)
  const { operation, resolution } = resolutionOf(record.op)
  return {
    state: record.state,
    attempt: record.attempt,
    rev: record.rev,
    operation,
    ageMs,
    updatedMsAgo,
    leaseLeftMs,
    replayLeftMs: completed ? Math.max(0, record.replayUntil - now) : undefined,
    expiresInMs: Math.max(0, liveUntil - now),
    expired,
    codec: record.codec,
    policy: record.policy,
    response: completed
      ? {
          status:
            record.codec === RESPONSE_CODEC_ID && record.response.length >= 2
              ? record.response.readUInt16BE(0)
              : undefined,
          bytes: record.response.length,
        }
      : undefined,
    owner: record.owner.slice(0, 8),
    resolution,
    cause: record.cause,
  }
}
