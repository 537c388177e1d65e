/**
 * Injective encoding of a list of fields: each field is its UTF-8 (or raw) byte length as a
 * 4-byte big-endian integer followed by its bytes. Two different field lists never encode to
 * the same bytes, whatever the fields contain (SPEC §2; §7 defect 9: no ambiguous separators).
 */

/** One field: text is encoded as UTF-8, bytes are taken as they are. */
export type Field = string | Uint8Array

/** Encodes `fields` injectively into one buffer. */
export function encodeFields(fields: readonly Field[]): Buffer {
  const parts: Buffer[] = []
  for (const field of fields) {
    const bytes = typeof field === 'string' ? Buffer.from(field, 'utf8') : Buffer.from(field.buffer, field.byteOffset, field.byteLength)
    const length = Buffer.allocUnsafe(4)
    length.writeUInt32BE(bytes.byteLength, 0)
    parts.push(length, bytes)
  }
  return Buffer.concat(parts)
}
