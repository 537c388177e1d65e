/**
 * recordFingerprint and decodeRecord read a record's texts with one parser
 * (src/stores/record-layout.ts): the fingerprint the fast claim compares is the one the decoder
 * reads, and bytes the decoder refuses before the fingerprint give none.
 */
import { describe, expect, it } from 'vitest'
import {
  completedFromClaim,
  decodeRecord,
  encodeFreshClaim,
  encodeRecord,
  encodeRelativeRecord,
  packClaimTexts,
  recordFingerprint,
  type StoredRecord,
} from '../../src/stores/record-layout.js'

const record: StoredRecord = {
  state: 'COMPLETED',
  owner: 'a'.repeat(64),
  attempt: 1,
  rev: 3,
  leaseUntil: 5,
  replayUntil: 9,
  expiresAt: 9,
  createdAt: 1,
  updatedAt: 2,
  fp: 'f1:ü€',
  codec: 'json-1',
  policy: '1',
  op: 'POST /orders',
  response: Buffer.from('{"ok":true}'),
}
/** Where the texts start: layout, state, 7 doubles, owner, the texts' length. */
const TEXTS_AT = 1 + 1 + 7 * 8 + 64 + 2

describe('recordFingerprint', () => {
  it('reads the fingerprint decodeRecord reads, in layouts 2 and 3', () => {
    const layout2 = encodeRecord(record)
    const layout3 = encodeFreshClaim(
      { owner: record.owner, fingerprint: record.fp, start: true, leaseMs: 10, failureRetentionMs: 20 },
      packClaimTexts(record.codec, record.policy, record.op),
    )

    expect(recordFingerprint(layout2)).toBe(decodeRecord(layout2).fp)
    expect(recordFingerprint(layout3)).toBe(decodeRecord(layout3, 1_000).fp)
    expect(recordFingerprint(layout3)).toBe(record.fp)
  })

  it.each([
    ['another layout', (b: Buffer) => b.fill(5, 0, 1)],
    ['too few bytes', (b: Buffer) => b.subarray(0, TEXTS_AT + 4)],
    ['texts running past the bytes', (b: Buffer) => b.writeUInt16BE(b.byteLength, TEXTS_AT - 2) && b],
    // Past the texts, not past the bytes (the response follows them).
    ['a fingerprint running past the texts', (b: Buffer) => b.writeUInt16BE(40, TEXTS_AT) && b],
  ])('gives none, as decodeRecord throws, for %s', (_name, spoil) => {
    const bytes = spoil(encodeRecord(record)) as Buffer

    expect(recordFingerprint(bytes)).toBeUndefined()
    expect(() => decodeRecord(bytes)).toThrow(/record layout 2/)
  })
})

describe("layout 4: times counted from the key's expiry, replayUntil on a COMPLETED record too", () => {
  // A completion at 1_700_000_001_000 of a record claimed 4 s before it, replaying 60 s.
  const at = 1_700_000_001_000
  const completed: StoredRecord = {
    ...record,
    leaseUntil: at - 1_000,
    replayUntil: at + 60_000,
    expiresAt: at + 60_000,
    createdAt: at - 4_000,
    updatedAt: at,
  }
  const keyExpiry = (r: StoredRecord) => r.expiresAt - 1

  it('reads back as the record it was written from, with the key expiring 1 ms before it', () => {
    const bytes = encodeRelativeRecord(completed, at)

    expect(bytes[0]).toBe(4)
    // Stored from `at`: the times before it below 0, replayUntil as the others.
    expect(bytes.readDoubleBE(2 + 8 * 5)).toBe(-4_000)
    expect(bytes.readDoubleBE(2 + 8 * 3)).toBe(60_000)
    expect(decodeRecord(bytes, keyExpiry(completed))).toEqual(completed)
    expect(recordFingerprint(bytes)).toBe(completed.fp)
  })

  it('counts every time from wherever the key expires, as layout 3 does', () => {
    const bytes = encodeRelativeRecord(completed, at)
    const later = decodeRecord(bytes, keyExpiry(completed) + 7_000)

    expect(later.replayUntil - completed.replayUntil).toBe(7_000)
    expect(later.createdAt - completed.createdAt).toBe(7_000)
    expect(later.expiresAt).toBe(keyExpiry(completed) + 7_001)
  })

  it("keeps a record that is not COMPLETED with its waiters' mark, not a time", () => {
    const running: StoredRecord = { ...completed, state: 'EXECUTING', replayUntil: 0, response: Buffer.alloc(0) }
    const bytes = encodeRelativeRecord(running, at)
    bytes.writeDoubleBE(1, 2 + 8 * 3)

    expect(decodeRecord(bytes, keyExpiry(running))).toEqual(running)
  })

  it("is what the one-command completion builds from a claim's layout-3 bytes: read as the completion the function writes", () => {
    // Claimed 4 s before `at` with a 5 s lease and 30 s retention; completed at `at`, 60 s window.
    const texts = packClaimTexts(record.codec, record.policy, record.op)
    const claim = {
      owner: record.owner,
      fingerprint: record.fp,
      start: true,
      leaseMs: 5_000,
      failureRetentionMs: 30_000,
    }
    const claimed = encodeFreshClaim(claim, texts)
    const response = Buffer.from('{"id":7}')
    const bytes = completedFromClaim(claimed, response, 60_000, 4_000.4) as Buffer

    expect(bytes[0]).toBe(4)
    // Written with PX 59_999 at `at`, the key expires at at + 59_999.
    expect(decodeRecord(bytes, at + 60_000 - 1)).toEqual({
      ...record,
      rev: 2,
      leaseUntil: at - 4_000 + 5_000,
      replayUntil: at + 60_000,
      expiresAt: at + 60_000,
      createdAt: at - 4_000,
      updatedAt: at,
      response,
    })
    // Only an EXECUTING layout-3 record is completed so: a CLAIMED one, or a layout-2 record, is not.
    expect(completedFromClaim(encodeFreshClaim({ ...claim, start: false }, texts), response, 60_000, 0)).toBeUndefined()
    expect(completedFromClaim(encodeRecord({ ...record, state: 'EXECUTING' }), response, 60_000, 0)).toBeUndefined()
  })

  it("is refused without its key's expiry, and with a time it puts before the epoch", () => {
    const bytes = encodeRelativeRecord(completed, at)

    expect(() => decodeRecord(bytes)).toThrow(/layout-4 record read without its key's expiry/)
    expect(() => decodeRecord(bytes, 10_000)).toThrow(/a time out of range/)
  })
})

describe("a failed record's cause", () => {
  const failed: StoredRecord = { ...record, state: 'ABANDONED', replayUntil: 0, response: Buffer.alloc(0) }

  it('follows the texts, where a completed record has its response: header and texts as without it', () => {
    const without = encodeRecord(failed)
    const withCause = encodeRecord({ ...failed, cause: { class: 'TypeError', message: 'm' } })

    // A reader of layout 2 before causes were kept sees the same state, numbers, owner and texts.
    expect(withCause.subarray(0, without.byteLength)).toEqual(without)
    expect(withCause.subarray(without.byteLength).toString()).toBe('{"c":"TypeError","m":"m"}')
    expect(decodeRecord(withCause)).toEqual({ ...failed, cause: { class: 'TypeError', message: 'm' } })
    // A failed record written before: no cause.
    expect(decodeRecord(without)).toEqual(failed)
    expect(decodeRecord(without).cause).toBeUndefined()
  })

  it('is never read on a completed record: its bytes there are the response', () => {
    const completed = { ...record, response: Buffer.from('{"c":"X"}') }
    expect(decodeRecord(encodeRecord(completed))).toEqual(completed)
  })
})
