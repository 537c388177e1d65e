import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { encodeFields } from '../../src/core/encoding.js'

describe('encodeFields', () => {
  it('prefixes each field with its byte length', () => {
    expect(encodeFields(['ab', 'é']).toString('hex')).toBe('000000026162' + '00000002c3a9')
  })

  it('tells apart field lists that a separator would confuse', () => {
    const a = encodeFields(['alice:key', 'op'])
    const b = encodeFields(['alice', 'key:op'])

    expect(a.equals(b)).toBe(false)
  })

  it('is injective over generated field lists', () => {
    fc.assert(
      fc.property(fc.array(fc.string(), { maxLength: 5 }), fc.array(fc.string(), { maxLength: 5 }), (x, y) => {
        const same = x.length === y.length && x.every((field, i) => field === y[i])
        return encodeFields(x).equals(encodeFields(y)) === same
      }),
      { numRuns: 2_000 },
    )
  })

  it('takes bytes as they are', () => {
    expect(encodeFields([new Uint8Array([0, 255])]).toString('hex')).toBe('0000000200ff')
  })
})
