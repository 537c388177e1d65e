/**
 * Record layout 2: one scope's record as the Redis store keeps it, one string per key, packed
 * by the scripts' `lib/record.lua` with Lua's `struct` (format `>Bc1dddddddc64Hc0Hc0Hc0Hc0`):
 *
 * | offset | bytes | field |
 * | ---: | ---: | --- |
 * | 0 | 1 | layout version: 2 |
 * | 1 | 1 | state: `C` CLAIMED, `E` EXECUTING, `D` COMPLETED, `F` FAILED_RETRYABLE, `A` ABANDONED |
 * | 2 | 8 × 7 | attempt, rev, leaseUntil, replayUntil (0 unless COMPLETED), expiresAt, createdAt, updatedAt: big-endian doubles (integers up to 2^53 are exact), times in epoch ms |
 * | 58 | 64 | owner: the holder's token, 64 lowercase hex |
 * | 122 | 2 + n, × 4 | fp, codec, policy, op: each a big-endian 16-bit length and its UTF-8 bytes |
 * | … | rest | the stored response (COMPLETED only) |
 *
 * About 220 bytes and the response, where layout 1 (a 13-field hash, still read until its
 * records expire) took a Redis hashtable of its own per record. This module reads what the
 * scripts hand back (claim's replay and inspect return the whole record) and writes records
 * for tests and tools.
 */
import { StoreProtocolError } from '../../core/errors.js'
import { RecordState } from '../../core/record.js'

/** The layout version the scripts write. */
export const RECORD_LAYOUT = 2

/** One record, decoded. */
export interface StoredRecord {
  readonly state: RecordState
  readonly owner: string
  readonly attempt: number
  readonly rev: number
  readonly leaseUntil: number
  /** COMPLETED only; 0 otherwise. */
  readonly replayUntil: number
  readonly expiresAt: number
  readonly createdAt: number
  readonly updatedAt: number
  readonly fp: string
  readonly codec: string
  readonly policy: string
  readonly op: string
  /** The stored response, a view of the record's bytes (empty unless COMPLETED). */
  readonly response: Buffer
}

/**
 * The field names of record layout 1 (a Redis hash, written by version 1 of this library),
 * which the scripts still read until such records expire. `resp` and `replayUntil` exist on
 * COMPLETED records only.
 */
export const LAYOUT_1_FIELDS = [
  'state',
  'owner',
  'attempt',
  'rev',
  'op',
  'fp',
  'codec',
  'policy',
  'leaseUntil',
  'replayUntil',
  'expiresAt',
  'createdAt',
  'updatedAt',
  'resp',
] as const

/** The one-letter state codes of layout 2. */
export const STATE_CODES: readonly string[] = ['C', 'E', 'D', 'F', 'A']

const STATE_OF_CODE: Readonly<Record<string, RecordState>> = {
  C: RecordState.CLAIMED,
  E: RecordState.EXECUTING,
  D: RecordState.COMPLETED,
  F: RecordState.FAILED_RETRYABLE,
  A: RecordState.ABANDONED,
}
const CODE_OF_STATE: Readonly<Record<RecordState, string>> = {
  CLAIMED: 'C',
  EXECUTING: 'E',
  COMPLETED: 'D',
  FAILED_RETRYABLE: 'F',
  ABANDONED: 'A',
}

const NUMBERS_AT = 2
const OWNER_AT = NUMBERS_AT + 8 * 7
const TEXTS_AT = OWNER_AT + 64

function corrupt(what: string): StoreProtocolError {
  return new StoreProtocolError(`The Redis store read a record that is not in record layout ${RECORD_LAYOUT}: ${what}.`)
}

/** The fields a replay needs, read without decoding the rest. */
export interface StoredAnswer {
  readonly codec: string
  readonly policy: string
  readonly replayUntil: number
  readonly response: Buffer
}

/**
 * Decodes a record.
 * @throws StoreProtocolError when the bytes are not a layout-2 record.
 */
export function decodeRecord(bytes: Buffer): StoredRecord {
  if (bytes.byteLength < TEXTS_AT + 8 || bytes[0] !== RECORD_LAYOUT) throw corrupt('wrong version or too short')
  const state = STATE_OF_CODE[String.fromCharCode(bytes[1] as number)]
  if (state === undefined) throw corrupt('unknown state')
  let at = TEXTS_AT
  const text = (): string => {
    const length = bytes.readUInt16BE(at)
    const end = at + 2 + length
    if (end > bytes.byteLength) throw corrupt('a text runs past the end')
    const value = bytes.toString('utf8', at + 2, end)
    at = end
    return value
  }
  const fp = text()
  const codec = text()
  const policy = text()
  const op = text()
  if (fp === '' || codec === '' || policy === '' || op === '') throw corrupt('an empty text')
  const number = (index: number, min: number): number => {
    const value = bytes.readDoubleBE(NUMBERS_AT + 8 * index)
    if (!Number.isSafeInteger(value) || value < min) throw corrupt('a number that is not a whole one in range')
    return value
  }
  return {
    state,
    attempt: number(0, 1),
    rev: number(1, 1),
    leaseUntil: number(2, 0),
    replayUntil: number(3, 0),
    expiresAt: number(4, 0),
    createdAt: number(5, 0),
    updatedAt: number(6, 0),
    owner: bytes.toString('latin1', OWNER_AT, TEXTS_AT),
    fp,
    codec,
    policy,
    op,
    response: bytes.subarray(at),
  }
}

/** Encodes a record as the scripts would write it (for tests and tools; the scripts write in Redis). */
export function encodeRecord(record: StoredRecord): Buffer {
  const texts = [record.fp, record.codec, record.policy, record.op].map((value) => Buffer.from(value, 'utf8'))
  const size = TEXTS_AT + texts.reduce((sum, bytes) => sum + 2 + bytes.byteLength, 0) + record.response.byteLength
  const out = Buffer.alloc(size)
  out[0] = RECORD_LAYOUT
  out.write(CODE_OF_STATE[record.state], 1, 'latin1')
  const numbers = [
    record.attempt,
    record.rev,
    record.leaseUntil,
    record.replayUntil,
    record.expiresAt,
    record.createdAt,
    record.updatedAt,
  ]
  numbers.forEach((value, index) => out.writeDoubleBE(value, NUMBERS_AT + 8 * index))
  out.write(record.owner, OWNER_AT, 64, 'latin1')
  let at = TEXTS_AT
  for (const bytes of texts) {
    at = out.writeUInt16BE(bytes.byteLength, at)
    at += bytes.copy(out, at)
  }
  record.response.copy(out, at)
  return out
}
