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
