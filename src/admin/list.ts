/**
 * Listing and counting records, for operators (`idemkit list`, `idemkit stats`): a scan of the
 * store (`store.scan()`). Records are named by their operation code and the first 12 hex
 * characters of their digest: raw keys and principals are never stored.
 */
import { ErrorCode, IdempotencyError } from '../core/errors.js'
import type { RecordState } from '../core/record.js'
import type { IdempotencyStore, ScannedRecord } from '../core/store.js'
import { storeFront } from '../core/store-front.js'
import { shortDigest } from '../core/store-key.js'
import { type FoundRecord, recordTimes } from './inspect.js'
import { resolutionOf } from './resolution.js'

export interface ScanInput {
  readonly store: IdempotencyStore
  /** Called every 1,000 records scanned, with the count so far (a progress line). */
  readonly onProgress?: (scanned: number) => void
}

export interface ListInput extends ScanInput {
  /** Only records in this state. */
  readonly state?: RecordState
  /** Only records unchanged for at least this long, ms. */
  readonly olderThanMs?: number
  /** At most this many records. @default 1000 */
  readonly limit?: number
}

export interface ListedRecord {
  /** The operation code in the key (8 hex characters of the operation's name). */
  readonly operationCode: string
  readonly digest: string
  readonly operation: string
  readonly state: RecordState
  readonly attempt: number
  readonly rev: number
  readonly ageMs: number
  readonly updatedMsAgo: number
  readonly leaseLeftMs: number
  readonly expired: boolean
}

export interface RecordStats {
  readonly scanned: number
  /** Live records by state. */
  readonly byState: Readonly<Record<string, number>>
  /** Live records by operation code, then state. */
  readonly byOperation: Readonly<Record<string, Readonly<Record<string, number>>>>
  /** The operation's name (`POST /orders`) of each code in `byOperation`, as its records store it. */
  readonly operationNames: Readonly<Record<string, string>>
  /** Records past their expiry, not yet removed (they read as absent). */
  readonly expired: number
}

function scanOf(given: IdempotencyStore): AsyncIterable<ScannedRecord> {
  const store = storeFront(given)
  if (typeof store.scan !== 'function') {
    throw new IdempotencyError(ErrorCode.INVALID_OPTION, `The ${store.name} store cannot list its records.`)
  }
  return store.scan()
}

function listed({ key, record, now }: ScannedRecord): ListedRecord {
  const parts = key.split(':')
  const { ageMs, updatedMsAgo, leaseLeftMs, expired } = recordTimes(record, now)
  return {
    operationCode: parts[parts.length - 2] ?? '',
    digest: shortDigest(parts[parts.length - 1] ?? ''),
    operation: resolutionOf(record.op).operation,
    state: record.state,
    attempt: record.attempt,
    rev: record.rev,
    ageMs,
    updatedMsAgo,
    leaseLeftMs,
    expired,
  }
}

/**
 * The records that match, up to `limit`, in the order the store scans them.
 * @returns the records, how many were scanned, and `complete`: false when the scan stopped at
 *   `limit` before the end of the store (more records may match).
 */
export async function listRecords(
  input: ListInput,
): Promise<{ records: ListedRecord[]; scanned: number; complete: boolean }> {
  const { state, olderThanMs = 0, limit = 1_000, onProgress } = input
  const records: ListedRecord[] = []
  let scanned = 0
  for await (const found of scanOf(input.store)) {
    scanned++
    if (scanned % 1_000 === 0) onProgress?.(scanned)
    const record = listed(found)
    if (record.expired) continue
    if (state !== undefined && record.state !== state) continue
    if (record.updatedMsAgo < olderThanMs) continue
    records.push(record)
    if (records.length >= limit) return { records, scanned, complete: false }
  }
  return { records, scanned, complete: true }
}

/** Live records by state and by operation code, and the expired ones not yet removed. */
export async function recordStats(input: ScanInput): Promise<RecordStats> {
  const byState: Record<string, number> = {}
  const byOperation: Record<string, Record<string, number>> = {}
  const operationNames: Record<string, string> = {}
  let scanned = 0
  let expired = 0
  for await (const found of scanOf(input.store)) {
    scanned++
    if (scanned % 1_000 === 0) input.onProgress?.(scanned)
    const record = listed(found)
    if (record.expired) {
      expired++
      continue
    }
    byState[record.state] = (byState[record.state] ?? 0) + 1
    const perOperation = byOperation[record.operationCode] ?? {}
    perOperation[record.state] = (perOperation[record.state] ?? 0) + 1
    byOperation[record.operationCode] = perOperation
    operationNames[record.operationCode] ??= record.operation
  }
  return { scanned, byState, byOperation, operationNames, expired }
}

/**
 * The records whose scope digest starts with `digest` (what `list` prints: 12 hex characters,
 * or more), expired ones too, found by a scan: what lets `inspect` and `resolve` act on a line
 * of `list` without the principal and key, which the store never holds.
 */
export async function findByDigest(store: IdempotencyStore, digest: string): Promise<FoundRecord[]> {
  const wanted = digest.toLowerCase()
  const found: FoundRecord[] = []
  for await (const { key, record, now } of scanOf(store)) {
    const parts = key.split(':')
    const full = parts[parts.length - 1] ?? ''
    if (!full.startsWith(wanted)) continue
    const version = Number((parts[parts.length - 3] ?? '').replace(/^d/, ''))
    found.push({ version, digest: shortDigest(full), storeKey: key, record, now })
  }
  return found
}
