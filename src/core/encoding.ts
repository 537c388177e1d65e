/**
 * Injective encoding of a list of fields: each field is its UTF-8 (or raw) byte length as a
 * 4-byte big-endian integer followed by its bytes. Two different field lists never encode to
 * the same bytes, whatever the fields contain (docs/design.md §2; §7 defect 9: no ambiguous separators).
 */

/** One field: text is encoded as UTF-8, bytes are taken as they are. */
export type Field = string | Uint8Array

/** Strings up to this many UTF-16 units are sized by bound (3 bytes each), not measured. */
const MEASURE_FROM = 256

/**
 * Short strings are written by a loop while they are ASCII (their UTF-8 is their code units):
 * a call into the native UTF-8 encoder per field cost more than the loop for a few dozen bytes.
 */
const ASCII_LOOP_UNTIL = 64

/** Writes `text` at `at` when it is all ASCII and answers its length; -1 (nothing meaningful written) otherwise. */
function writeAscii(out: Buffer, text: string, at: number): number {
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i)
    if (code > 0x7f) return -1
    out[at + i] = code
  }
  return text.length
}

/**
 * Encodes `fields` injectively into one buffer (one allocation: this runs on every request).
 * Short strings are written straight into room for their longest UTF-8 form and the length is
 * what was written; the buffer returned is cut to the bytes used.
 * @param headroom bytes left uninitialised in front of the encoding, for a caller that writes
 *   a prefix there (an HMAC pad block) instead of copying the encoding.
 */
export function encodeFields(fields: readonly Field[], headroom = 0): Buffer {
  let bound = headroom
  for (const field of fields) {
    if (typeof field !== 'string') bound += 4 + field.byteLength
    else bound += 4 + (field.length < MEASURE_FROM ? field.length * 3 : Buffer.byteLength(field, 'utf8'))
  }
  const out = Buffer.allocUnsafe(bound)
  let offset = headroom
  for (const field of fields) {
    let length: number
    if (typeof field === 'string') {
      length = field.length < ASCII_LOOP_UNTIL ? writeAscii(out, field, offset + 4) : -1
      if (length === -1) length = out.write(field, offset + 4, 'utf8')
    } else {
      out.set(field, offset + 4)
      length = field.byteLength
    }
    out.writeUInt32BE(length, offset)
    offset += 4 + length
  }
  return offset === bound ? out : out.subarray(0, offset)
}
