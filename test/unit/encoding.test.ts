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

  it('writes exactly length-prefixed UTF-8, for any text (astral, lone surrogates, long) and with headroom', () => {
    const reference = (fields: readonly string[]) =>
      Buffer.concat(
        fields.flatMap((field) => {
          const bytes = Buffer.from(field, 'utf8')
          const length = Buffer.alloc(4)
          length.writeUInt32BE(bytes.byteLength)
          return [length, bytes]
        }),
      )
    const loneSurrogate = fc.integer({ min: 0xd800, max: 0xdfff }).map((code) => String.fromCharCode(code))
    const unit = fc.oneof(fc.constantFrom('a', 'é', '€', '😀'), loneSurrogate)
    const text = fc.oneof(fc.string({ unit: 'binary' }), fc.string({ unit, maxLength: 400 }))
    fc.assert(
      fc.property(fc.array(text, { maxLength: 5 }), fc.integer({ min: 0, max: 64 }), (fields, headroom) => {
        const plain = encodeFields(fields)
        const roomy = encodeFields(fields, headroom)
        return (
          plain.equals(reference(fields)) &&
          roomy.subarray(headroom).equals(plain) &&
          roomy.byteLength === headroom + plain.byteLength
        )
      }),
      { numRuns: 1_000 },
    )
  })

  it('takes bytes as they are', () => {
    expect(encodeFields([new Uint8Array([0, 255])]).toString('hex')).toBe('0000000200ff')
  })
})
