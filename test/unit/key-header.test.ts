import { describe, expect, it } from 'vitest'
import { countKeyHeaderLines, parseKeyHeader } from '../../src/http/key-header.js'

describe('parseKeyHeader', () => {
  it.each([
    ['abc', 'abc'],
    ['"abc"', 'abc'],
    ['  abc  ', 'abc'],
    ['"a\\"b\\\\c"', 'a"b\\c'],
    ['"a,b"', 'a,b'],
    ['8e03978e-40d5-43e8-bc93-6894a57f9324', '8e03978e-40d5-43e8-bc93-6894a57f9324'],
    ['{x}', '{x}'],
    ['k'.repeat(255), 'k'.repeat(255)],
  ])('reads %j as the key %j', (value, key) => {
    expect(parseKeyHeader(value, 1)).toEqual({ kind: 'key', key })
  })

  it('reports a missing header', () => {
    expect(parseKeyHeader(undefined, 0)).toEqual({ kind: 'missing' })
  })

  it.each([
    ['empty', ''],
    ['blank', '   '],
    ['too long', 'k'.repeat(256)],
    ['too long when quoted', `"${'k'.repeat(256)}"`],
    ['a space inside', 'a b'],
    ['a space inside quotes', '"a b"'],
    ['non-ASCII', 'clé'],
    ['a control byte', 'a\u0001b'],
    ['a list', 'a,b'],
    ['a list of strings', '"a", "b"'],
    ['a quote inside a bare key', 'a"b'],
    ['parameters', '"a";p=1'],
    ['a bad escape', '"a\\nb"'],
    ['no closing quote', '"abc'],
    ['an empty string', '""'],
  ])('refuses %s', (_case, value) => {
    expect(parseKeyHeader(value, 1).kind).toBe('invalid')
  })

  it('refuses a header sent on two lines, or as an array', () => {
    expect(parseKeyHeader('a, b', 2).kind).toBe('invalid')
    expect(parseKeyHeader('a', 2).kind).toBe('invalid')
    expect(parseKeyHeader(['a', 'b']).kind).toBe('invalid')
  })
})

describe('countKeyHeaderLines', () => {
  it('counts raw header lines case-insensitively', () => {
    expect(countKeyHeaderLines(['Host', 'x', 'Idempotency-Key', 'a', 'idempotency-key', 'b'])).toBe(2)
    expect(countKeyHeaderLines(['Host', 'x'])).toBe(0)
  })
})

/**
 * An independent statement of the accepted forms: OWS (SP, HTAB) trimmed, then a bare token of
 * visible ASCII without `"` and `,`, or an sf-string of visible ASCII with `\"` and `\\` escapes.
 */
function expected(value: string): string | undefined {
  const text = value.replace(/^[ \t]+|[ \t]+$/g, '')
  if (/^[\x21\x23-\x2b\x2d-\x7e]+$/.test(text)) return text
  const quoted = /^"((?:[\x21\x23-\x5b\x5d-\x7e]|\\["\\])+)"$/.exec(text)
  return quoted === null ? undefined : (quoted[1] as string).replace(/\\(["\\])/g, '$1')
}

describe('parseKeyHeader over every byte value', () => {
  // Node decodes header bytes as latin-1: byte b arrives as the character U+00bb.
  const bytes = Array.from({ length: 256 }, (_, b) => String.fromCharCode(b))
  const forms = {
    'before a bare key': (c: string) => `${c}abc`,
    'after a bare key': (c: string) => `abc${c}`,
    'inside a bare key': (c: string) => `ab${c}c`,
    'before a quoted key': (c: string) => `${c}"abc"`,
    'after a quoted key': (c: string) => `"abc"${c}`,
    'inside a quoted key': (c: string) => `"ab${c}c"`,
  }

  it.each(Object.entries(forms))(
    'accepts only SP and HTAB as whitespace, and only visible ASCII, %s',
    (_where, form) => {
      for (const c of bytes) {
        const value = form(c)
        const want = expected(value)
        const got = parseKeyHeader(value, 1)
        expect(got, `byte 0x${c.charCodeAt(0).toString(16)}`).toEqual(
          want === undefined ? { kind: 'invalid', reason: expect.any(String) } : { kind: 'key', key: want },
        )
      }
    },
  )

  it('never aliases a key with a non-ASCII byte around it to the key without it', () => {
    for (let b = 0x7f; b <= 0xff; b++) {
      const c = String.fromCharCode(b)
      for (const value of [`${c}K`, `K${c}`, `"K"${c}`, `${c}"K"`])
        expect(parseKeyHeader(value, 1).kind).toBe('invalid')
    }
  })
})
