/**
 * recordFingerprint and decodeRecord read a record's texts with one parser
 * (src/stores/record-layout.ts): the fingerprint the fast claim compares is the one the decoder
 * reads, and bytes the decoder refuses before the fingerprint give none.
 */
import { describe, expect, it } from 'vitest'
import {
  decodeRecord,
  encodeFreshClaim,
  encodeRecord,
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
    ['another layout', (b: Buffer) => b.fill(4, 0, 1)],
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
