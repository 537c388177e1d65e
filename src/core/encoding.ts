/**
 * Injective encoding of a list of fields: each field is its UTF-8 (or raw) byte length as a
 * 4-byte big-endian integer followed by its bytes. Two different field lists never encode to
 * the same bytes, whatever the fields contain (SPEC §2; §7 defect 9: no ambiguous separators).
 */

/** One field: text is encoded as UTF-8, bytes are taken as they are. */
export type Field = string | Uint8Array

/**
 * Encodes `fields` injectively into one buffer (one allocation: this runs on every request).
 * @param headroom bytes left uninitialised in front of the encoding, for a caller that writes
 *   a prefix there (an HMAC pad block) instead of copying the encoding.
 */
export function encodeFields(fields: readonly Field[], headroom = 0): Buffer {
  let size = headroom
  for (const field of fields) size += 4 + (typeof field === 'string' ? Buffer.byteLength(field, 'utf8') : field.byteLength)
  const out = Buffer.allocUnsafe(size)
  let offset = headroom
  for (const field of fields) {
    const length = typeof field === 'string' ? Buffer.byteLength(field, 'utf8') : field.byteLength
    out.writeUInt32BE(length, offset)
    offset += 4
    if (typeof field === 'string') out.write(field, offset, 'utf8')
    else out.set(field, offset)
    offset += length
  }
  return out
}
