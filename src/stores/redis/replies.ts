/**
 * Strict decoders from the Lua scripts' replies (documented in each script's header) to the
 * store's outcome unions. Anything of an unexpected shape throws
 * `StoreProtocolError`: a reply this code does not understand is never guessed at.
 * Messages name the script and the problem, never the reply's values (a stored response may
 * hold personal data).
 */
import { StoreProtocolError } from '../../core/errors.js'
import {
  ClaimReply,
  InspectReply,
  RecordState,
  RecoveryReason,
  type StoreRecoveryReason,
  TransitionReply,
} from '../../core/record.js'
import type { ClaimResult, HeldRecord, InspectResult, RenewResult, TransitionResult } from '../../core/store.js'
import { decodeRecord } from '../record-layout.js'

type Reply = readonly unknown[]

const RECORD_STATES: ReadonlySet<unknown> = new Set(Object.values(RecordState))
/** The recovery reasons a script answers with (claim steps 4 and 7). */
const RECOVERY_REASONS: ReadonlySet<unknown> = new Set([RecoveryReason.ABANDONED, RecoveryReason.EXPIRED_EXECUTION])

/**
 * Decodes claim.lua's reply, read with the Buffer variant of the command (a stored response is
 * bytes): reply words arrive as Buffers, numbers as numbers.
 * @throws StoreProtocolError on any unexpected shape.
 */
export function decodeClaimReply(reply: unknown): ClaimResult {
  const r = words(asReply('claim', reply), 0)
  const kind = r[0]
  switch (kind) {
    case ClaimReply.ACQUIRED:
    case ClaimReply.TAKEN_OVER:
    case ClaimReply.REPLAYED_ACQUIRE:
      expectLength('claim', r, 5)
      return { kind, ...held('claim', r) }
    case ClaimReply.COMPLETED_REPLAY: {
      expectLength('claim', r, 2)
      const { response, codec, policy, replayUntil } = recordAt('claim', r, 1)
      return { kind, response, codec, policy, replayUntil }
    }
    case ClaimReply.FINGERPRINT_MISMATCH:
      expectLength('claim', r, 1)
      return { kind }
    case ClaimReply.RECOVERY_REQUIRED: {
      expectLength('claim', r, 2)
      const reason = word(r[1])
      if (!RECOVERY_REASONS.has(reason)) throw protocolError('claim', 'element 1 is not a recovery reason')
      return { kind, reason: reason as StoreRecoveryReason }
    }
    case ClaimReply.IN_PROGRESS:
      expectLength('claim', r, 2)
      return { kind, retryAfterMs: integer('claim', r, 1, 1) }
    default:
      throw unknownKind('claim', kind)
  }
}

/**
 * Decodes the reply of start.lua, complete.lua, mark-failed.lua or release.lua.
 * @param script the script's name, for the error message.
 * @throws StoreProtocolError on any unexpected shape.
 */
export function decodeTransitionReply(script: string, reply: unknown): TransitionResult {
  const r = asReply(script, reply)
  const kind = r[0]
  switch (kind) {
    case TransitionReply.OK:
      expectLength(script, r, 2)
      // release answers rev 0 (the record is gone); the others the new rev, at least 2.
      return { kind, rev: integer(script, r, 1, 0) }
    case TransitionReply.ALREADY:
      expectLength(script, r, 2)
      return { kind, rev: integer(script, r, 1, 2) }
    case TransitionReply.NOT_FOUND:
    case TransitionReply.NOT_OWNER:
      expectLength(script, r, 1)
      return { kind }
    case TransitionReply.WRONG_STATE:
      expectLength(script, r, 2)
      return { kind, state: state(script, r, 1) }
    default:
      throw unknownKind(script, kind)
  }
}

/**
 * Decodes renew.lua's reply.
 * @throws StoreProtocolError on any unexpected shape (ALREADY included: renew never answers it).
 */
export function decodeRenewReply(reply: unknown): RenewResult {
  const r = asReply('renew', reply)
  const kind = r[0]
  switch (kind) {
    case TransitionReply.OK:
      expectLength('renew', r, 2)
      return { kind, leaseUntil: integer('renew', r, 1, 1) }
    case TransitionReply.NOT_FOUND:
    case TransitionReply.NOT_OWNER:
      expectLength('renew', r, 1)
      return { kind }
    case TransitionReply.WRONG_STATE:
      expectLength('renew', r, 2)
      return { kind, state: state('renew', r, 1) }
    default:
      throw unknownKind('renew', kind)
  }
}

/**
 * Decodes inspect.lua's reply `{ state, mine, leaseRemainingMs, record }` (or `{ 'ABSENT' }`),
 * read with the Buffer variant of the command.
 * @throws StoreProtocolError on any unexpected shape.
 */
export function decodeInspectReply(reply: unknown): InspectResult {
  const r = words(asReply('inspect', reply), 0)
  const kind = r[0]
  if (kind === InspectReply.ABSENT) {
    expectLength('inspect', r, 1)
    return { kind }
  }
  if (!RECORD_STATES.has(kind)) throw unknownKind('inspect', kind)
  expectLength('inspect', r, 4)
  const mine = r[1]
  if (mine !== 0 && mine !== 1) throw protocolError('inspect', 'element 1 (mine) is not 0 or 1')
  const leaseRemainingMs = integer('inspect', r, 2, 0)
  const record = recordAt('inspect', r, 3)
  if (record.state !== kind) throw protocolError('inspect', 'the record is not in the state the reply names')
  const seen = {
    mine: mine === 1,
    attempt: record.attempt,
    rev: record.rev,
    fingerprint: record.fp,
    operation: record.op,
  }
  switch (record.state) {
    case RecordState.CLAIMED:
    case RecordState.EXECUTING:
      return { kind: record.state, ...seen, leaseUntil: record.leaseUntil, leaseRemainingMs }
    case RecordState.COMPLETED:
      return {
        kind: record.state,
        ...seen,
        response: record.response,
        codec: record.codec,
        policy: record.policy,
        replayUntil: record.replayUntil,
      }
    case RecordState.FAILED_RETRYABLE:
    case RecordState.ABANDONED:
      return { kind: record.state, ...seen }
  }
}

/** `[kind, state, attempt, rev, leaseUntil]` of ACQUIRED, TAKEN_OVER and REPLAYED_ACQUIRE. */
function held(script: string, r: Reply): HeldRecord {
  const s = word(r[1])
  if (s !== RecordState.CLAIMED && s !== RecordState.EXECUTING) {
    throw protocolError(script, 'element 1 is not CLAIMED or EXECUTING')
  }
  return {
    state: s,
    attempt: integer(script, r, 2, 1),
    rev: integer(script, r, 3, 1),
    leaseUntil: integer(script, r, 4, 0),
  }
}

function asReply(script: string, reply: unknown): Reply {
  if (!Array.isArray(reply) || reply.length === 0) {
    throw protocolError(script, `expected a non-empty array, got ${shape(reply)}`)
  }
  return reply
}

/** Reply words of the Buffer variant of a command, as strings, up to index `upTo`. */
function words(r: Reply, upTo: number): Reply {
  let out: unknown[] | undefined
  for (let i = 0; i <= upTo && i < r.length; i++) {
    if (Buffer.isBuffer(r[i])) {
      out ??= [...r]
      out[i] = word(r[i])
    }
  }
  return out ?? r
}

function word(value: unknown): unknown {
  return Buffer.isBuffer(value) ? value.toString('latin1') : value
}

function bytes(script: string, r: Reply, index: number): Buffer {
  const value = r[index]
  if (!Buffer.isBuffer(value)) throw protocolError(script, `element ${index} is not bytes (got ${shape(value)})`)
  return value
}

/** The layout-2 record at `index` (lib/record.lua), decoded. */
function recordAt(script: string, r: Reply, index: number): ReturnType<typeof decodeRecord> {
  const value = bytes(script, r, index)
  try {
    return decodeRecord(value)
  } catch (error) {
    throw protocolError(script, `element ${index}: ${(error as Error).message}`)
  }
}

function expectLength(script: string, r: Reply, length: number): void {
  if (r.length !== length) {
    throw protocolError(script, `${String(r[0])} has ${r.length} elements, expected ${length}`)
  }
}

function integer(script: string, r: Reply, index: number, min: number): number {
  const value = r[index]
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) {
    throw protocolError(script, `element ${index} is not an integer >= ${min} (got ${shape(value)})`)
  }
  return value
}

function state(script: string, r: Reply, index: number): RecordState {
  const value = r[index]
  if (!RECORD_STATES.has(value)) throw protocolError(script, `element ${index} is not a record state`)
  return value as RecordState
}

function unknownKind(script: string, kind: unknown): StoreProtocolError {
  const name = typeof kind === 'string' ? JSON.stringify(kind.slice(0, 40)) : shape(kind)
  return protocolError(script, `unknown reply kind ${name}`)
}

function shape(value: unknown): string {
  if (Array.isArray(value)) return `an array of ${value.length}`
  if (value === null) return 'null'
  if (typeof value === 'number') return Number.isInteger(value) ? 'an integer' : 'a number'
  return `a ${typeof value}`
}

function protocolError(script: string, problem: string): StoreProtocolError {
  return new StoreProtocolError(
    `The Redis store's ${script} script answered with an unexpected reply: ${problem}. ` +
      'The scripts and this library version may disagree, or the key holds data idemkit did not write.',
  )
}
