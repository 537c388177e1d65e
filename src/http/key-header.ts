/**
 * The `Idempotency-Key` request header (docs/design.md §5). Accepted both as an RFC 8941 sf-string
 * (`"abc"`, what the IETF draft prescribes) and as a bare token (`abc`, what Stripe clients
 * send); the key is what is inside the quotes. Rejected: empty, longer than 255 characters,
 * anything but visible ASCII, parameters, a list, or the header sent on two lines.
 *
 * Node decodes header bytes as latin-1, so every byte arrives as one UTF-16 unit of the same
 * value. Only SP and HTAB are optional whitespace around a field value (RFC 9110 §5.5 OWS), so
 * only they are trimmed: JavaScript's `trim()` would also drop NBSP (0xA0), NEL (0x85) and other
 * Unicode spaces, and alias `\xA0K` to `K`.
 */

/** The longest key accepted, in characters. */
export const MAX_KEY_LENGTH = 255

export type KeyHeader =
  | { readonly kind: 'missing' }
  | { readonly kind: 'invalid'; readonly reason: string }
  | { readonly kind: 'key'; readonly key: string }

/**
 * Parses the header.
 * @param value the header value as the framework gives it (Node joins repeated lines with ", ").
 * @param lines how many header lines carried it (from the raw headers), when known.
 */
export function parseKeyHeader(value: string | readonly string[] | undefined, lines?: number): KeyHeader {
  if (value === undefined) return { kind: 'missing' }
  if (typeof value !== 'string' || (lines !== undefined && lines > 1)) {
    return { kind: 'invalid', reason: 'The Idempotency-Key header must be sent once.' }
  }
  const text = trimOws(value)
  if (text.length === 0) return { kind: 'invalid', reason: 'The Idempotency-Key header is empty.' }
  const key = text.charCodeAt(0) === 0x22 ? parseSfString(text) : parseBare(text)
  if (typeof key !== 'string') return key
  if (key.length === 0) return { kind: 'invalid', reason: 'The idempotency key is empty.' }
  if (key.length > MAX_KEY_LENGTH) {
    return { kind: 'invalid', reason: `The idempotency key is longer than ${MAX_KEY_LENGTH} characters.` }
  }
  return { kind: 'key', key }
}

/**
 * Checks a key a route's `key` function returned, with the header's rules (1 to 255 visible
 * ASCII characters): `undefined` or `null` is a missing key, a number its decimal digits, and
 * anything else that is not such a string an invalid one (a 400, never a 500).
 */
export function checkKey(found: unknown): KeyHeader {
  if (found === undefined || found === null) return { kind: 'missing' }
  const key = typeof found === 'number' && Number.isSafeInteger(found) ? String(found) : found
  if (typeof key !== 'string')
    return { kind: 'invalid', reason: 'The idempotency key of this request is not a string.' }
  if (key.length === 0) return { kind: 'invalid', reason: 'The idempotency key is empty.' }
  if (key.length > MAX_KEY_LENGTH) {
    return { kind: 'invalid', reason: `The idempotency key is longer than ${MAX_KEY_LENGTH} characters.` }
  }
  for (let i = 0; i < key.length; i++) {
    const code = key.charCodeAt(i)
    if (code < 0x21 || code > 0x7e) return INVALID_CHARACTERS
  }
  return { kind: 'key', key }
}

/** Drops leading and trailing SP and HTAB (RFC 9110 §5.5 OWS), and nothing else. */
function trimOws(text: string): string {
  let start = 0
  let end = text.length
  while (start < end && isOws(text.charCodeAt(start))) start++
  while (end > start && isOws(text.charCodeAt(end - 1))) end--
  return start === 0 && end === text.length ? text : text.slice(start, end)
}

function isOws(code: number): boolean {
  return code === 0x20 || code === 0x09
}

/** Counts the raw header lines named `idempotency-key` (Node's `rawHeaders`: name, value, ...). */
export function countKeyHeaderLines(rawHeaders: readonly string[]): number {
  let count = 0
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i] as string
    if (name.length === 15 && name.toLowerCase() === 'idempotency-key') count++
  }
  return count
}

const INVALID_CHARACTERS: KeyHeader = {
  kind: 'invalid',
  reason: 'The idempotency key must be visible ASCII characters only.',
}
const LIST: KeyHeader = { kind: 'invalid', reason: 'The Idempotency-Key header must hold one key, not a list.' }

/** A bare key: visible ASCII (%x21-7E) without `"` and without `,` (which would make a list). */
function parseBare(text: string): string | KeyHeader {
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i)
    if (code === 0x2c) return LIST
    if (code < 0x21 || code > 0x7e || code === 0x22) return INVALID_CHARACTERS
  }
  return text
}

/** RFC 8941 §3.3.3 sf-string: `"` chars `"`, with `\"` and `\\` the only escapes. */
function parseSfString(text: string): string | KeyHeader {
  let key = ''
  for (let i = 1; i < text.length; i++) {
    const code = text.charCodeAt(i)
    if (code === 0x5c) {
      const next = text.charCodeAt(i + 1)
      if (next !== 0x22 && next !== 0x5c)
        return { kind: 'invalid', reason: 'The quoted idempotency key has a bad escape.' }
      key += text[i + 1]
      i++
    } else if (code === 0x22) {
      if (i !== text.length - 1) {
        return trimOws(text.slice(i + 1)).startsWith(',')
          ? LIST
          : { kind: 'invalid', reason: 'The quoted idempotency key must not carry parameters or trailing text.' }
      }
      return key
    } else if (code < 0x21 || code > 0x7e) {
      return INVALID_CHARACTERS
    } else {
      key += text[i]
    }
  }
  return { kind: 'invalid', reason: 'The quoted idempotency key has no closing quote.' }
}
