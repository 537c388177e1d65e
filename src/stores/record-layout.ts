/**
 * Record layout 2: one scope's record as the Redis store keeps it, one string per key, packed
 * by the scripts' `lib/record.lua` with Lua's `struct` (header `>Bc1dddddddc64H`, then the
 * texts and the response):
 *
 * | offset | bytes | field |
 * | ---: | ---: | --- |
 * | 0 | 1 | layout version: 2 |
 * | 1 | 1 | state: `C` CLAIMED, `E` EXECUTING, `D` COMPLETED, `F` FAILED_RETRYABLE, `A` ABANDONED |
 * | 2 | 8 × 7 | attempt, rev, leaseUntil, replayUntil, expiresAt, createdAt, updatedAt: big-endian doubles (integers up to 2^53 are exact), times in epoch ms; replayUntil is a time on a COMPLETED record only, on any other the waiters' mark (1 once a claim that will wait found it in progress, else 0) |
 * | 58 | 64 | owner: the holder's token, 64 lowercase hex |
 * | 122 | 2 | the length of the texts that follow |
| 124 | 2 + n, × 4 | the texts: fp, codec, policy, op, each a big-endian 16-bit length and its UTF-8 bytes |
 * | … | rest | COMPLETED: the stored response; FAILED_RETRYABLE, ABANDONED: the failure's cause, if kept (below) |
 *
 * About 220 bytes and the response, where layout 1 (a 13-field hash, still read until its
 * records expire) took a Redis hashtable of its own per record. The texts are written by the
 * claim that creates or takes over a record, with codec, policy and op packed here
 * (`packClaimTexts`); the scripts carry them unchanged and read only the fingerprint. This
 * module reads what the scripts hand back (claim's replay and inspect return the whole record)
 * and writes records for tests and tools.
 *
 * **Layout 3, a claim's record as the store writes it without a script** (`SET ... NX GET PX`,
 * docs/design.md §6): the bytes of layout 2 with version 3, attempt 1, rev 1, no response, and
 * times counted from the claim instead of the epoch: leaseUntil holds `leaseMs`, expiresAt
 * `leaseMs + failureRetentionMs`, createdAt and updatedAt 0. The caller cannot know the store's
 * clock; Redis sets the key's expiry on its own from the PX (the lifetime less 1 ms: every write
 * puts the key's expiry 1 ms before the record's, so Redis holds the key exactly while the
 * record is live), so PEXPIRETIME + 1 is the record's expiresAt in the epoch and every time is
 * `PEXPIRETIME + 1 - expiresAt + the time`.
 * The scripts read it so (lib/record.lua), and write layout 2 from their first transition on.
 *
 * **Layout 4, a record written with one plain command on the key** (docs/design.md §6, "Record
 * layouts"): the bytes of layout 2 with version 4 and its times counted from the key's expiry as
 * layout 3's are (every time is `PEXPIRETIME + 1 - expiresAt + the time`), in any state; on a
 * COMPLETED record replayUntil too (on any other it is the waiters' mark, as in layout 2). It is
 * its own version because a reader of layout 3 takes a COMPLETED record's replayUntil as a time
 * in the epoch, so the record would read as run out and its key be claimed again; a build that
 * reads no layout 4 refuses it as corrupt instead (a 503, never a second run). This build and
 * the scripts read it; the Redis store writes it, a COMPLETED record only, with
 * `oneCommandCompletion` (`completedFromClaim`), which is off by default (docs/upgrading.md:
 * readers ship a release before writers).
 *
 * A failed record's rest is its cause (src/core/failure-cause.ts), or empty: earlier builds read
 * the rest only on a COMPLETED record, and a takeover drops it, so the layout is unchanged.
 *
 * The waiters' mark (docs/waiting.md): the Redis scripts that end an execution publish to its
 * waiters only when a claim that will wait set it. It is not part of the record as the store
 * port shows it: `decodeRecord` reads `replayUntil` as 0 on a record that is not COMPLETED, and
 * `encodeRecord` writes no mark.
 */
import { StoreProtocolError } from '../core/errors.js'
import { causeBytes, encodeCause, type FailureCause, storedCause } from '../core/failure-cause.js'
import { RecordState } from '../core/record.js'
import type { RecordView } from '../core/store.js'

/** The layout version the scripts write. */
export const RECORD_LAYOUT = 2

/** The layout of a claim's record written with `SET ... NX GET PX`: times counted from the claim. */
export const FRESH_LAYOUT = 3

/** The layout of a record written with one plain command: times, replayUntil included, counted from the key's expiry. */
export const RELATIVE_LAYOUT = 4

/** One record, decoded: the store port's `RecordView` (the response a view of the record's bytes). */
export type StoredRecord = RecordView

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
const TEXTS_LENGTH_AT = OWNER_AT + 64
const TEXTS_AT = TEXTS_LENGTH_AT + 2
/** The header a compare-and-set of a whole record compares: layout, state, every number, the owner. */
export const RECORD_HEADER_BYTES = TEXTS_LENGTH_AT

function corrupt(what: string): StoreProtocolError {
  return new StoreProtocolError(
    `The Redis store read a record that is not in record layout ${RECORD_LAYOUT}, 3 or 4: ${what}.`,
  )
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
 * @param expireTime the key's expiry in epoch ms (Redis PEXPIRETIME): needed for a layout-3 or
 *   layout-4 record, whose times count from it.
 * @throws StoreProtocolError when the bytes are not a layout-2 record, or a layout-3 or 4 one
 *   with its key's expiry.
 */
export function decodeRecord(bytes: Buffer, expireTime?: number): StoredRecord {
  const { relative, texts, end: textsEnd } = readTexts(bytes, 4)
  const state = STATE_OF_CODE[String.fromCharCode(bytes[1] as number)]
  if (state === undefined) throw corrupt('unknown state')
  const [fp, codec, policy, op] = texts as [string, string, string, string]
  if (fp === '' || codec === '' || policy === '' || op === '') throw corrupt('an empty text')
  const number = (index: number, min: number): number => {
    const value = bytes.readDoubleBE(NUMBERS_AT + 8 * index)
    if (!Number.isSafeInteger(value) || value < min) throw corrupt('a number that is not a whole one in range')
    return value
  }
  // Layouts 3 and 4: every time counts from the key's expiry minus the stored expiresAt, and may
  // be stored below 0 (a time before the one it counts from); read, it is a time in the epoch.
  let base = 0
  if (relative) {
    if (expireTime === undefined || !Number.isSafeInteger(expireTime) || expireTime <= 0) {
      throw corrupt(`a layout-${bytes[0]} record read without its key's expiry`)
    }
    // The key expires one millisecond before the record (lib/record.lua, write_record).
    base = expireTime + 1 - number(4, Number.MIN_SAFE_INTEGER)
  }
  const time = (index: number): number => {
    if (!relative) return number(index, 0)
    const value = base + number(index, Number.MIN_SAFE_INTEGER)
    if (!Number.isSafeInteger(value) || value < 0) throw corrupt('a time out of range')
    return value
  }
  // replayUntil: a time on a COMPLETED record, counted from the key's expiry in layout 4 and in
  // the epoch in layout 2 (layout 3 is never COMPLETED: its writer is a claim); on any other
  // record the waiters' mark, checked and not shown.
  const completed = state === RecordState.COMPLETED
  const replayUntil = completed && bytes[0] === RELATIVE_LAYOUT ? time(3) : number(3, 0)
  const rest = bytes.subarray(textsEnd)
  const cause = storedCause(state, rest)
  return {
    state,
    attempt: number(0, 1),
    rev: number(1, 1),
    leaseUntil: time(2),
    replayUntil: completed ? replayUntil : 0,
    expiresAt: time(4),
    createdAt: time(5),
    updatedAt: time(6),
    owner: bytes.toString('latin1', OWNER_AT, TEXTS_LENGTH_AT),
    fp,
    codec,
    policy,
    op,
    response: cause === undefined ? rest : EMPTY,
    ...(cause === undefined ? {} : { cause }),
  }
}

const EMPTY = Buffer.alloc(0)

const claimTexts = new Map<string, Buffer>()

/**
 * Codec, policy and op as a claim brings them (the Redis claim's ARGV[7]): each a 16-bit length
 * and its UTF-8 bytes. Kept per combination: a route sends the same ones every time.
 */
export function packClaimTexts(codec: string, policy: string, op: string): Buffer {
  const id = `${codec}\u0000${policy}\u0000${op}`
  let texts = claimTexts.get(id)
  if (texts === undefined) {
    if (claimTexts.size >= 1_000) claimTexts.clear()
    texts = packTexts([codec, policy, op])
    claimTexts.set(id, texts)
  }
  return texts
}

/** What a claim written without a script holds: `ClaimRequest`'s fields it packs. */
export interface FreshClaim {
  readonly owner: string
  readonly fingerprint: string
  readonly start: boolean
  readonly leaseMs: number
  readonly failureRetentionMs: number
}

/**
 * A new record in layout 3 (above), for `SET ... NX GET PX leaseMs + failureRetentionMs`:
 * CLAIMED or EXECUTING (`start`), attempt 1, rev 1, the caller's owner token, its fingerprint
 * and the packed codec/policy/op of `packClaimTexts`.
 */
export function encodeFreshClaim(claim: FreshClaim, claimTexts: Buffer): Buffer {
  const fpLength = Buffer.byteLength(claim.fingerprint, 'utf8')
  const textsLength = 2 + fpLength + claimTexts.byteLength
  const out = Buffer.allocUnsafe(TEXTS_AT + textsLength)
  out[0] = FRESH_LAYOUT
  out[1] = STATE_BYTE[claim.start ? RecordState.EXECUTING : RecordState.CLAIMED]
  out.writeDoubleBE(1, NUMBERS_AT)
  out.writeDoubleBE(1, NUMBERS_AT + 8)
  out.writeDoubleBE(claim.leaseMs, NUMBERS_AT + 16)
  out.writeDoubleBE(0, NUMBERS_AT + 24)
  out.writeDoubleBE(claim.leaseMs + claim.failureRetentionMs, NUMBERS_AT + 32)
  out.writeDoubleBE(0, NUMBERS_AT + 40)
  out.writeDoubleBE(0, NUMBERS_AT + 48)
  out.write(claim.owner, OWNER_AT, 64, 'latin1')
  out.writeUInt16BE(textsLength, TEXTS_LENGTH_AT)
  out.writeUInt16BE(fpLength, TEXTS_AT)
  out.write(claim.fingerprint, TEXTS_AT + 2, fpLength, 'utf8')
  claimTexts.copy(out, TEXTS_AT + 2 + fpLength)
  return out
}

/**
 * The fingerprint of a record's bytes (layout 2 or 3), read by decodeRecord's parser without
 * decoding the rest; undefined when the bytes are not a record's.
 */
export function recordFingerprint(bytes: Buffer): string | undefined {
  try {
    return readTexts(bytes, 1).texts[0]
  } catch {
    return undefined
  }
}

/** The state of a record's bytes (layout 2 or 3), read without decoding the rest; undefined for an unknown state byte. */
export function recordState(bytes: Buffer): RecordState | undefined {
  return STATE_OF_BYTE[bytes[1] as number]
}

/**
 * The one parser of a record's layout byte and texts, for decodeRecord and recordFingerprint:
 * the first `count` texts (each a 16-bit length and its UTF-8 bytes), checked to lie within the
 * texts' length and the texts within the bytes (four of them fill it exactly). `end`: where the
 * texts end and the response starts; `relative`: layout 3 or 4 (times counted from the key's
 * expiry).
 * @throws StoreProtocolError when the bytes are not a record's.
 */
function readTexts(bytes: Buffer, count: 1 | 4): { relative: boolean; texts: string[]; end: number } {
  const relative = bytes[0] === FRESH_LAYOUT || bytes[0] === RELATIVE_LAYOUT
  if (bytes.byteLength < TEXTS_AT + 8 || (bytes[0] !== RECORD_LAYOUT && !relative)) {
    throw corrupt('wrong version or too short')
  }
  const textsEnd = TEXTS_AT + bytes.readUInt16BE(TEXTS_LENGTH_AT)
  if (textsEnd > bytes.byteLength) throw corrupt('the texts run past the end')
  const texts: string[] = []
  let at = TEXTS_AT
  for (let index = 0; index < count; index++) {
    const length = at + 2 <= textsEnd ? bytes.readUInt16BE(at) : Number.POSITIVE_INFINITY
    const end = at + 2 + length
    if (end > textsEnd) throw corrupt('a text runs past the texts')
    texts.push(bytes.toString('utf8', at + 2, end))
    at = end
  }
  if (count === 4 && at !== textsEnd) throw corrupt('the texts are not four')
  return { relative, texts, end: textsEnd }
}

function packTexts(values: readonly string[]): Buffer {
  const parts = values.map((value) => Buffer.from(value, 'utf8'))
  const out = Buffer.alloc(parts.reduce((sum, part) => sum + 2 + part.byteLength, 0))
  let at = 0
  for (const part of parts) {
    at = out.writeUInt16BE(part.byteLength, at)
    at += part.copy(out, at)
  }
  return out
}

/** Encodes a record as the scripts would write it (for tests and tools; the scripts write in Redis). */
export function encodeRecord(record: StoredRecord): Buffer {
  const texts = packTexts([record.fp, record.codec, record.policy, record.op])
  // What follows the texts: the response, or on a failed record its cause.
  const rest = causeBytes(record) ?? record.response
  const out = Buffer.alloc(TEXTS_AT + texts.byteLength + rest.byteLength)
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
  for (const [index, value] of numbers.entries()) out.writeDoubleBE(value, NUMBERS_AT + 8 * index)
  out.write(record.owner, OWNER_AT, 64, 'latin1')
  out.writeUInt16BE(texts.byteLength, TEXTS_LENGTH_AT)
  texts.copy(out, TEXTS_AT)
  rest.copy(out, TEXTS_AT + texts.byteLength)
  return out
}

/**
 * The COMPLETED record in layout 4 (above) that completes a claim this process wrote in layout 3
 * (`claimed`, EXECUTING, as `encodeFreshClaim` made it), written under a key that expires
 * `replayWindowMs - 1` ms after the write (`SET ... PX`; docs/design.md §6, "A one-command
 * completion"): times counted from the write, which is `updatedAt` (0), with `replayUntil` and
 * `expiresAt` at the window's end; `createdAt` and the lease end the claim's, dated
 * `elapsedMs` before the write (below 0); rev + 1; attempt, owner and texts carried; the
 * response after the texts. Undefined when `claimed` is not such a record.
 */
export function completedFromClaim(
  claimed: Buffer,
  response: Uint8Array,
  replayWindowMs: number,
  elapsedMs: number,
): Buffer | undefined {
  if (claimed[0] !== FRESH_LAYOUT || claimed[1] !== STATE_BYTE.EXECUTING || claimed.byteLength < TEXTS_AT) {
    return undefined
  }
  const end = TEXTS_AT + claimed.readUInt16BE(TEXTS_LENGTH_AT)
  if (end > claimed.byteLength) return undefined
  const out = Buffer.allocUnsafe(end + response.byteLength)
  claimed.copy(out, 0, 0, end)
  out.set(response, end)
  out[0] = RELATIVE_LAYOUT
  out[1] = STATE_BYTE.COMPLETED
  const elapsed = Math.max(0, Math.round(elapsedMs))
  out.writeDoubleBE(claimed.readDoubleBE(NUMBERS_AT + 8) + 1, NUMBERS_AT + 8)
  out.writeDoubleBE(claimed.readDoubleBE(NUMBERS_AT + 16) - elapsed, NUMBERS_AT + 16)
  out.writeDoubleBE(replayWindowMs, NUMBERS_AT + 24)
  out.writeDoubleBE(replayWindowMs, NUMBERS_AT + 32)
  out.writeDoubleBE(-elapsed, NUMBERS_AT + 40)
  out.writeDoubleBE(0, NUMBERS_AT + 48)
  return out
}

/**
 * Encodes a record in layout 4 (above): its times counted from `at`, a time in the epoch, so
 * below 0 for the times before it. Written under a key that expires at `expiresAt - 1` (`PX
 * expiresAt - at - 1` from `at`), it reads back as `record`. For tests and tools; the Redis
 * store writes layout 4 with `completedFromClaim`.
 */
export function encodeRelativeRecord(record: StoredRecord, at: number): Buffer {
  const out = encodeRecord(record)
  out[0] = RELATIVE_LAYOUT
  const times = [2, 4, 5, 6]
  if (record.state === RecordState.COMPLETED) times.push(3)
  for (const index of times) {
    const offset = NUMBERS_AT + 8 * index
    out.writeDoubleBE(out.readDoubleBE(offset) - at, offset)
  }
  return out
}

/**
 * A record held as its layout-2 bytes, read and changed in place through getters and setters:
 * what the memory store keeps, one Buffer per record instead of an object with a dozen fields
 * (far less for the garbage collector to walk over a record's 24 hours). A view is made per
 * call and dropped after it; the bytes stay in the store.
 */
export class PackedRecord {
  bytes: Buffer

  constructor(bytes: Buffer) {
    this.bytes = bytes
  }

  /**
   * A new record: header, texts (`fp` and the packed codec/policy/op of `packClaimTexts`) and
   * no response.
   */
  static create(
    state: RecordState,
    owner: string,
    attempt: number,
    rev: number,
    leaseUntil: number,
    expiresAt: number,
    createdAt: number,
    fp: string,
    claimTexts: Buffer,
  ): PackedRecord {
    const fpLength = Buffer.byteLength(fp, 'utf8')
    const textsLength = 2 + fpLength + claimTexts.byteLength
    const out = Buffer.allocUnsafe(TEXTS_AT + textsLength)
    out[0] = RECORD_LAYOUT
    out[1] = STATE_BYTE[state]
    out.writeDoubleBE(attempt, NUMBERS_AT)
    out.writeDoubleBE(rev, NUMBERS_AT + 8)
    out.writeDoubleBE(leaseUntil, NUMBERS_AT + 16)
    out.writeDoubleBE(0, NUMBERS_AT + 24)
    out.writeDoubleBE(expiresAt, NUMBERS_AT + 32)
    out.writeDoubleBE(createdAt, NUMBERS_AT + 40)
    out.writeDoubleBE(createdAt, NUMBERS_AT + 48)
    out.write(owner, OWNER_AT, 64, 'latin1')
    out.writeUInt16BE(textsLength, TEXTS_LENGTH_AT)
    out.writeUInt16BE(fpLength, TEXTS_AT)
    out.write(fp, TEXTS_AT + 2, fpLength, 'utf8')
    claimTexts.copy(out, TEXTS_AT + 2 + fpLength)
    return new PackedRecord(out)
  }

  get state(): RecordState {
    return STATE_OF_BYTE[this.bytes[1] as number] as RecordState
  }
  set state(state: RecordState) {
    this.bytes[1] = STATE_BYTE[state]
  }
  get attempt(): number {
    return this.bytes.readDoubleBE(NUMBERS_AT)
  }
  get rev(): number {
    return this.bytes.readDoubleBE(NUMBERS_AT + 8)
  }
  set rev(rev: number) {
    this.bytes.writeDoubleBE(rev, NUMBERS_AT + 8)
  }
  get leaseUntil(): number {
    return this.bytes.readDoubleBE(NUMBERS_AT + 16)
  }
  set leaseUntil(at: number) {
    this.bytes.writeDoubleBE(at, NUMBERS_AT + 16)
  }
  get replayUntil(): number {
    return this.bytes.readDoubleBE(NUMBERS_AT + 24)
  }
  get expiresAt(): number {
    return this.bytes.readDoubleBE(NUMBERS_AT + 32)
  }
  set expiresAt(at: number) {
    this.bytes.writeDoubleBE(at, NUMBERS_AT + 32)
  }
  get createdAt(): number {
    return this.bytes.readDoubleBE(NUMBERS_AT + 40)
  }
  set updatedAt(at: number) {
    this.bytes.writeDoubleBE(at, NUMBERS_AT + 48)
  }
  get owner(): string {
    return this.bytes.toString('latin1', OWNER_AT, TEXTS_LENGTH_AT)
  }
  get fp(): string {
    return this.#text(0)
  }
  get codec(): string {
    return this.#text(1)
  }
  get policy(): string {
    return this.#text(2)
  }
  get op(): string {
    return this.#text(3)
  }
  /** The stored response: a view of the record's bytes. */
  get response(): Buffer {
    return this.bytes.subarray(TEXTS_AT + this.bytes.readUInt16BE(TEXTS_LENGTH_AT))
  }

  /** The record with `cause` after its texts (a failed record's, `markFailed`): new bytes. */
  withCause(cause: FailureCause): PackedRecord {
    const end = TEXTS_AT + this.bytes.readUInt16BE(TEXTS_LENGTH_AT)
    return new PackedRecord(Buffer.concat([this.bytes.subarray(0, end), encodeCause(cause)]))
  }

  /** The record COMPLETED with `response` at `replayUntil`: new bytes (the response is appended). */
  completed(response: Uint8Array, rev: number, replayUntil: number, now: number): PackedRecord {
    const end = TEXTS_AT + this.bytes.readUInt16BE(TEXTS_LENGTH_AT)
    // Its own memory, not a slice of Node's shared pool: it is kept for the replay window, and a
    // slice would keep the whole 8 KiB pool block alive with it.
    const out = Buffer.allocUnsafeSlow(end + response.byteLength)
    this.bytes.copy(out, 0, 0, end)
    out.set(response, end)
    const record = new PackedRecord(out)
    record.state = RecordState.COMPLETED
    record.rev = rev
    out.writeDoubleBE(replayUntil, NUMBERS_AT + 24)
    record.expiresAt = replayUntil
    record.updatedAt = now
    return record
  }

  #text(index: number): string {
    let at = TEXTS_AT
    for (let i = 0; i < index; i++) at += 2 + this.bytes.readUInt16BE(at)
    const length = this.bytes.readUInt16BE(at)
    return this.bytes.toString('utf8', at + 2, at + 2 + length)
  }
}

/** The state byte (offset 1) of layouts 2 and 3, per state. */
export const STATE_BYTE: Readonly<Record<RecordState, number>> = {
  CLAIMED: 0x43,
  EXECUTING: 0x45,
  COMPLETED: 0x44,
  FAILED_RETRYABLE: 0x46,
  ABANDONED: 0x41,
}
const STATE_OF_BYTE: readonly (RecordState | undefined)[] = (() => {
  const out: (RecordState | undefined)[] = []
  for (const [state, byte] of Object.entries(STATE_BYTE)) out[byte] = state as RecordState
  return out
})()
