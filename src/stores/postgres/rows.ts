/**
 * The PostgreSQL store's answers read: each function's row (the functions it calls, in
 * sql/functions/2-operations.sql) decoded into the store port's results, and any other shape refused as `StoreProtocolError`.
 */
import { StoreProtocolError } from '../../core/errors.js'
import { storedCause } from '../../core/failure-cause.js'
import { ClaimReply, InspectReply, RecordState, RecoveryReason, TransitionReply } from '../../core/record.js'
import type {
  ClaimResult,
  HeldRecord,
  InspectResult,
  ReadResult,
  RecordView,
  RenewResult,
  ScannedRecord,
  StoreReport,
  TransitionResult,
} from '../../core/store.js'

const RECORD_STATES: ReadonlySet<unknown> = new Set(Object.values(RecordState))

/** The error of an answer in a shape the store does not know (a newer schema, a hand edit). */
export function protocolError(fn: string, problem: string): StoreProtocolError {
  return new StoreProtocolError(`The PostgreSQL function ${fn} answered in an unexpected shape: ${problem}.`)
}

/** The one row a function answers with. */
export function oneRow(name: string, result: { rows: unknown[][] }): unknown[] {
  const row = result.rows[0]
  if (result.rows.length !== 1 || !Array.isArray(row)) {
    throw protocolError(name, `${result.rows.length} rows instead of one`)
  }
  return row
}

/** An int8 column (pg hands them over as text), or a field of a packed answer, as an exact integer of at least `min`. */
function integer(fn: string, row: readonly unknown[], index: number, min: number): number {
  const value = Number(row[index])
  if (row[index] === null || row[index] === '' || !Number.isSafeInteger(value) || value < min) {
    throw protocolError(fn, `column ${index} is not an integer >= ${min}`)
  }
  return value
}

function text(fn: string, row: readonly unknown[], index: number): string {
  const value = row[index]
  if (typeof value !== 'string' || value.length === 0)
    throw protocolError(fn, `column ${index} is not a non-empty text`)
  return value
}

function bytes(fn: string, row: readonly unknown[], index: number): Buffer {
  const value = row[index]
  if (!Buffer.isBuffer(value)) throw protocolError(fn, `column ${index} is not bytea`)
  return value
}

function state(fn: string, row: readonly unknown[], index: number): RecordState {
  const value = row[index]
  if (!RECORD_STATES.has(value)) throw protocolError(fn, `column ${index} is not a record state`)
  return value as RecordState
}

function held(fn: string, row: readonly unknown[]): HeldRecord {
  const s = state(fn, row, 0)
  if (s !== RecordState.CLAIMED && s !== RecordState.EXECUTING)
    throw protocolError(fn, 'a held record is not CLAIMED or EXECUTING')
  return { state: s, attempt: integer(fn, row, 1, 1), rev: integer(fn, row, 2, 1), leaseUntil: integer(fn, row, 3, 1) }
}

/** The fields of a packed answer (`<outcome> <field> ...`): the outcome, then the rest. */
function unpack(fn: string, row: readonly unknown[]): [unknown, string[]] {
  const packed = row[0]
  if (typeof packed !== 'string') throw protocolError(fn, 'column 0 is not a text')
  const [kind, ...fields] = packed.split(' ')
  return [kind, fields]
}

/** The claim's answer (`_claim_v4`, as `_claim_v3`): `r` packed (the outcome and its numbers), then resp, codec, policy. */
export function decodeClaim(row: readonly unknown[]): ClaimResult {
  const [kind, fields] = unpack('claim', row)
  switch (kind) {
    case ClaimReply.ACQUIRED:
    case ClaimReply.TAKEN_OVER:
    case ClaimReply.REPLAYED_ACQUIRE:
      return { kind, ...held('claim', fields) }
    case ClaimReply.COMPLETED_REPLAY:
      return {
        kind,
        response: bytes('claim', row, 1),
        codec: text('claim', row, 2),
        policy: text('claim', row, 3),
        replayUntil: integer('claim', fields, 0, 1),
      }
    case ClaimReply.FINGERPRINT_MISMATCH:
      return { kind }
    case ClaimReply.RECOVERY_REQUIRED: {
      const reason = fields[0]
      if (reason !== RecoveryReason.ABANDONED && reason !== RecoveryReason.EXPIRED_EXECUTION) {
        throw protocolError('claim', 'the answer has no recovery reason')
      }
      return { kind, reason }
    }
    case ClaimReply.IN_PROGRESS:
      return { kind, retryAfterMs: integer('claim', fields, 0, 1) }
    default:
      throw protocolError('claim', 'column 0 is not a claim outcome')
  }
}

/** The completion's answer (`_complete_v3`), packed in one text: as a transition's. */
export function decodeComplete(row: readonly unknown[]): TransitionResult {
  const [kind, fields] = unpack('complete', row)
  return decodeTransition('complete', [kind, fields[0] ?? null, fields[0] ?? null])
}

/** Inspect's answer (`_inspect_v2`). */
export function decodeInspect(row: readonly unknown[]): InspectResult {
  const kind = row[0]
  if (kind === InspectReply.ABSENT) return { kind }
  if (typeof row[1] !== 'boolean') throw protocolError('inspect', 'column 1 (mine) is not a boolean')
  const seen = {
    mine: row[1],
    attempt: integer('inspect', row, 2, 1),
    rev: integer('inspect', row, 3, 1),
    fingerprint: text('inspect', row, 4),
    operation: text('inspect', row, 5),
  }
  switch (kind) {
    case InspectReply.CLAIMED:
    case InspectReply.EXECUTING:
      return {
        kind,
        ...seen,
        leaseUntil: integer('inspect', row, 6, 1),
        leaseRemainingMs: integer('inspect', row, 7, 0),
      }
    case InspectReply.COMPLETED:
      return {
        kind,
        ...seen,
        response: bytes('inspect', row, 8),
        codec: text('inspect', row, 9),
        policy: text('inspect', row, 10),
        replayUntil: integer('inspect', row, 11, 1),
      }
    case InspectReply.FAILED_RETRYABLE:
    case InspectReply.ABANDONED:
      return { kind, ...seen }
    default:
      throw protocolError('inspect', 'column 0 is not a record state or ABSENT')
  }
}

/** A transition's answer (`_start_v2`, `_mark_failed_v2`, `_release_v2`): kind, rev, state. */
export function decodeTransition(fn: string, row: readonly unknown[]): TransitionResult {
  const kind = row[0]
  switch (kind) {
    case TransitionReply.OK:
      // release answers rev 0 (the row is gone); the others the new rev, at least 2.
      return { kind, rev: integer(fn, row, 1, 0) }
    case TransitionReply.ALREADY:
      return { kind, rev: integer(fn, row, 1, 2) }
    case TransitionReply.NOT_FOUND:
    case TransitionReply.NOT_OWNER:
      return { kind }
    case TransitionReply.WRONG_STATE:
      return { kind, state: state(fn, row, 2) }
    default:
      throw protocolError(fn, 'column 0 is not a transition outcome')
  }
}

/** Renew's answer (`_renew_v2`): kind, lease_until, state. */
export function decodeRenew(row: readonly unknown[]): RenewResult {
  const kind = row[0]
  switch (kind) {
    case TransitionReply.OK:
      return { kind, leaseUntil: integer('renew', row, 1, 1) }
    case TransitionReply.NOT_FOUND:
    case TransitionReply.NOT_OWNER:
      return { kind }
    case TransitionReply.WRONG_STATE:
      return { kind, state: state('renew', row, 2) }
    default:
      throw protocolError('renew', 'column 0 is not a renew outcome')
  }
}

/** A sweep statement's answer: the rows it deleted, or -1 when another instance holds the sweep lock. */
export function decodeSwept(row: readonly unknown[]): number {
  const n = Number(row[0])
  if (!Number.isSafeInteger(n) || n < -1) throw protocolError('sweep', 'column 0 is not a row count')
  return n
}

/** The record in a row of `read` or `scan`, its 14 columns from `at` on. */
function recordAt(fn: string, row: readonly unknown[], at: number): RecordView {
  return {
    state: state(fn, row, at),
    owner: text(fn, row, at + 1),
    attempt: integer(fn, row, at + 2, 1),
    rev: integer(fn, row, at + 3, 1),
    leaseUntil: integer(fn, row, at + 4, 0),
    replayUntil: row[at + 5] === null ? 0 : integer(fn, row, at + 5, 0),
    expiresAt: integer(fn, row, at + 6, 0),
    createdAt: integer(fn, row, at + 7, 0),
    updatedAt: integer(fn, row, at + 8, 0),
    fp: text(fn, row, at + 9),
    codec: text(fn, row, at + 10),
    policy: text(fn, row, at + 11),
    op: text(fn, row, at + 12),
    ...stored(fn, row, at),
  }
}

/** A row's `resp`: a COMPLETED row's response, a failed row's cause (sql/006-failure-cause.sql). */
function stored(fn: string, row: readonly unknown[], at: number): Pick<RecordView, 'response' | 'cause'> {
  const resp = row[at + 13] === null ? Buffer.alloc(0) : bytes(fn, row, at + 13)
  const cause = storedCause(state(fn, row, at), resp)
  return cause === undefined ? { response: resp } : { response: Buffer.alloc(0), cause }
}

/** `read`'s row: the database's clock, then the record's columns (all NULL when there is none). */
export function decodeRead(row: readonly unknown[]): ReadResult {
  const now = integer('read', row, 0, 0)
  return { now, record: row[1] === null ? undefined : recordAt('read', row, 1) }
}

/** A row of `scan`: the database's clock, the key, the record's columns. */
export function decodeScanned(row: readonly unknown[]): ScannedRecord {
  return { key: scannedKey(row), now: integer('scan', row, 0, 0), record: recordAt('scan', row, 2) }
}

/** The key of a row of `scan`, where the next page starts after the last one. */
export function scannedKey(row: readonly unknown[]): string {
  return text('scan', row, 1)
}

/**
 * `describe`'s row as the startup report: the settings that decide whether a commit survives a
 * crash, whether the table is there, logged and at schema `version`, with a warning for each
 * that can lose records or answers.
 */
export function decodeDescribe(row: readonly unknown[], table: string, version: number): StoreReport {
  const [serverVersion, synchronousCommit, fsync, persistence, comment] = row.map((value) =>
    value === null ? null : String(value),
  )
  const warnings: string[] = []
  if (synchronousCommit === 'off') {
    warnings.push('synchronous_commit is off: a crash can lose commits the store was told about')
  }
  if (fsync === 'off') warnings.push('fsync is off: a power loss or an OS crash can lose committed records')
  if (persistence === null) warnings.push(`${table} does not exist: run store.migrate()`)
  else if (persistence !== 'p') warnings.push(`${table} is not a logged table: a crash empties it`)
  else if (comment !== `idemkit records, schema ${version}`) {
    warnings.push(`${table} is not at schema ${version}: run store.migrate()`)
  }
  return {
    store: 'postgres',
    version: serverVersion ?? undefined,
    settings: {
      table,
      synchronous_commit: synchronousCommit ?? 'unknown',
      fsync: fsync ?? 'unknown',
      logged: persistence === 'p',
    },
    warnings,
  }
}
