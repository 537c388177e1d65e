/**
 * Resolving a stuck record, for operators (`idemkit resolve`): an ABANDONED record or an
 * expired execution becomes retryable (the next retry runs), completed with an answer the
 * operator gives (the next retry replays it), or is deleted (the key is new again). Each is a
 * compare-and-set on the record as it was read (`store.replace()`), and each produces one audit
 * line, also published on the `idemkit:event` channel.
 *
 * A resolution is fenced (docs/design.md §3): the resolved record gets an owner token of the
 * operator's own and `attempt + 1`, so a holder that was slow rather than dead finds the record
 * no longer its own. Its renewal is refused (its signal aborts), its completion or failure is
 * refused (the request answers 503 and its transaction rolls back), and the key keeps the one
 * answer the operator gave. Who resolved it, when and why are kept in the record itself, after
 * the operation's name in its `op` text (see `resolutionOf()`), so every store keeps them with
 * no change of layout until the record is next taken over.
 */
import { randomBytes } from 'node:crypto'
import { publishStoreEvent } from '../core/channels.js'
import { ErrorCode, IdempotencyError, integerOption, invalidOption } from '../core/errors.js'
import { RecordState } from '../core/record.js'
import type { IdempotencyStore, RecordView } from '../core/store.js'
import { storeFront } from '../core/store-front.js'
import { DEFAULT_STORED_HEADERS, responseCodec } from '../http/response-codec.js'
import { type FoundRecord, findRecord, type InspectInput } from './inspect.js'
import { RESOLUTION_MARK, type RecordResolution, resolutionOf } from './resolution.js'

export type Resolution =
  /** FAILED_RETRYABLE: the next retry with the key runs the handler again. */
  | { readonly as: 'retryable' }
  /** COMPLETED with this answer: the next retry replays it. */
  | { readonly as: 'completed'; readonly status: number; readonly body: Buffer; readonly contentType?: string }
  /** Gone: the key is new again. */
  | { readonly as: 'deleted' }

/** What to make of a record, whoever found it. */
export interface ResolveRecordInput {
  readonly store: InspectInput['store']
  readonly resolution: Resolution
  /** Also resolve a running execution (its lease not run out) or a COMPLETED record. */
  readonly force?: boolean
  /** How long the resolved record lives (retryable) or replays (completed), ms. @default 86400000 */
  readonly retainMs?: number
  /** Who resolved it, for the audit line and the record. */
  readonly actor?: string
  /** Why, for the audit line and the record; required with `force`. At most 500 characters. */
  readonly reason?: string
}

/** A scope's record, found from its principal, key and operation, and what to make of it. */
export interface ResolveInput extends ResolveRecordInput, InspectInput {}

/** The audit line of one resolution. Never the key or the principal. */
export interface AuditLine {
  readonly type: 'admin-resolve'
  readonly actor: string
  readonly at: string
  readonly operation: string
  readonly digest: string
  readonly version: number
  readonly from: RecordState
  readonly to: RecordState | 'deleted'
  readonly attempt: number
  readonly rev: number
  readonly forced: boolean
  readonly reason: string
  /** The resolved record's attempt (`attempt + 1`): the holder's is fenced off. Absent when deleted. */
  readonly newAttempt?: number
}

const DAY_MS = 86_400_000

function refused(message: string): IdempotencyError {
  return new IdempotencyError(ErrorCode.RESOLVE_REFUSED, message)
}

/**
 * Resolves the scope's record.
 * @returns the audit line, or `undefined` when no record exists under any secret version.
 * @throws IdempotencyError `ERR_IDEM_RESOLVE_REFUSED` for a running or completed record without
 *   `force`, or a record that changed since it was read (read again and decide again).
 */
export async function resolveScope(input: ResolveInput): Promise<AuditLine | undefined> {
  checkResolve(input)
  const found = await findRecord(input)
  if (found === undefined) return undefined
  return resolveRecord(input, found, input.operation)
}

/** The checks of `resolveRecord`'s input, before anything is read. */
function checkResolve(input: ResolveRecordInput): void {
  const { force = false, retainMs = DAY_MS, actor = 'unknown', reason = '' } = input
  const store = storeFront(input.store)
  if (typeof store.replace !== 'function') {
    throw new IdempotencyError(ErrorCode.INVALID_OPTION, `The ${store.name} store cannot resolve records.`)
  }
  integerOption('retainMs', retainMs, 1, undefined, 'milliseconds')
  if (typeof reason !== 'string' || reason.length > 500) invalidOption('reason', 'at most 500 characters', reason)
  if (force && reason.trim() === '') invalidOption('reason', 'given with `force` (why the record is changed)', reason)
  if (typeof actor !== 'string' || actor.length === 0 || actor.length > 200) {
    invalidOption('actor', 'a name of 1 to 200 characters', actor)
  }
}

/**
 * Resolves a record already found (`findRecord`, or `findByDigest` from what `idemkit list`
 * prints), as `resolveScope` does.
 * @param operation the operation's name for the audit line; by default the one the record stores.
 * @throws IdempotencyError `ERR_IDEM_RESOLVE_REFUSED` as `resolveScope`.
 */
export async function resolveRecord(
  input: ResolveRecordInput,
  found: FoundRecord,
  operation = resolutionOf(found.record.op).operation,
): Promise<AuditLine> {
  checkResolve(input)
  const { resolution, force = false, retainMs = DAY_MS, actor = 'unknown', reason = '' } = input
  const store = storeFront(input.store) as ReturnType<typeof storeFront> & Required<Pick<IdempotencyStore, 'replace'>>
  const { record, now } = found
  const running = record.state === RecordState.CLAIMED || record.state === RecordState.EXECUTING
  const liveUntil =
    record.state === RecordState.COMPLETED ? Math.min(record.replayUntil, record.expiresAt) : record.expiresAt
  if (!force && liveUntil > now) {
    if (running && record.leaseUntil > now) {
      throw refused(
        `The record is ${record.state} and its lease runs for ${record.leaseUntil - now} ms more: a handler may be running. ` +
          'Wait for the lease, or pass `force` with a `reason`.',
      )
    }
    if (record.state === RecordState.COMPLETED) {
      throw refused('The record is COMPLETED: retries replay its answer. Pass `force` with a `reason` to change it.')
    }
  }
  const at = new Date(now).toISOString()
  const kept: RecordResolution = {
    by: actor,
    at,
    reason,
    from: record.state,
    forced: force,
    fencedAttempt: record.attempt,
  }
  // A new owner and the next attempt: the holder's renewals and transitions no longer match.
  const fenced = {
    ...record,
    owner: randomBytes(32).toString('hex'),
    attempt: record.attempt + 1,
    op: `${resolutionOf(record.op).operation}${RESOLUTION_MARK}${JSON.stringify(kept)}`,
  }
  let next: RecordView | undefined
  if (resolution.as === 'retryable') {
    next = {
      ...fenced,
      state: RecordState.FAILED_RETRYABLE,
      rev: record.rev + 1,
      updatedAt: now,
      replayUntil: 0,
      expiresAt: now + retainMs,
      response: Buffer.alloc(0),
    }
  } else if (resolution.as === 'completed') {
    const { status, body, contentType = 'application/json' } = resolution
    if (!Number.isInteger(status) || status < 100 || status > 599) invalidOption('status', 'an HTTP status', status)
    const codec = responseCodec(DEFAULT_STORED_HEADERS, Number.MAX_SAFE_INTEGER)
    next = {
      ...fenced,
      state: RecordState.COMPLETED,
      rev: record.rev + 1,
      updatedAt: now,
      replayUntil: now + retainMs,
      expiresAt: now + retainMs,
      codec: codec.id,
      response: codec.encode({ status, headers: { 'content-type': contentType }, body }),
    }
  }
  if (!(await store.replace(found.storeKey, record, next))) {
    throw refused('The record changed since it was read (renewed, completed or taken over); read it again.')
  }
  const audit: AuditLine = {
    type: 'admin-resolve',
    actor,
    at,
    operation,
    digest: found.digest,
    version: found.version,
    from: record.state,
    to: next === undefined ? 'deleted' : next.state,
    attempt: record.attempt,
    rev: record.rev,
    forced: force,
    reason,
    ...(next === undefined ? {} : { newAttempt: next.attempt }),
  }
  publishStoreEvent(store.name, { ...audit })
  return audit
}
