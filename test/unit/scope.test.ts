import { createHmac } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { encodeFields } from '../../src/core/encoding.js'
import { parseSecrets, scopeDigest } from '../../src/core/scope.js'
import { operationCode, storeKey } from '../../src/core/store-key.js'

const S1 = 'a'.repeat(32)
const S2 = 'b'.repeat(48)

describe('scopeDigest', () => {
  const secrets = parseSecrets({ current: 2, keys: { 1: S1, 2: S2 } })
  const scope = { principal: 'alice', key: 'k-1', operation: 'POST /orders' }

  it('is the HMAC-SHA256 of the injective encoding under the version\u2019s secret', () => {
    const expected = createHmac('sha256', S2)
      .update(encodeFields(['idem-scope', '2', 'alice', 'k-1', 'POST /orders']))
      .digest('hex')

    expect(scopeDigest(secrets, 2, scope)).toBe(expected)
    expect(expected).toMatch(/^[0-9a-f]{64}$/)
  })

  it('differs per principal, key, operation and version', () => {
    const base = scopeDigest(secrets, 2, scope)

    expect(scopeDigest(secrets, 2, { ...scope, principal: 'bob' })).not.toBe(base)
    expect(scopeDigest(secrets, 2, { ...scope, key: 'k-2' })).not.toBe(base)
    expect(scopeDigest(secrets, 2, { ...scope, operation: 'POST /refunds' })).not.toBe(base)
    expect(scopeDigest(secrets, 1, scope)).not.toBe(base)
  })

  it('cannot be forged by moving a separator between principal and key', () => {
    const a = scopeDigest(secrets, 2, { principal: 'alice:x', key: 'y', operation: 'op' })
    const b = scopeDigest(secrets, 2, { principal: 'alice', key: 'x:y', operation: 'op' })

    expect(a).not.toBe(b)
  })

  it('rejects a non-string principal', () => {
    expect(() => scopeDigest(secrets, 2, { ...scope, principal: 7 as unknown as string })).toThrow(
      expect.objectContaining({ code: 'ERR_IDEM_INVALID_ARGUMENT' }),
    )
  })
})

describe('parseSecrets', () => {
  it('orders versions current first, then newest to oldest', () => {
    expect(parseSecrets({ current: 2, keys: { 1: S1, 3: S1, 2: S2 } }).versions).toEqual([2, 3, 1])
  })

  it.each([
    ['a secret shorter than 32 bytes', { current: 1, keys: { 1: 'short' } }],
    ['a current version without a secret', { current: 3, keys: { 1: S1 } }],
    ['a version that is not a positive integer', { current: 1, keys: { 1: S1, 0: S1 } }],
    ['a fractional version', { current: 1, keys: { 1: S1, '1.5': S1 } }],
    ['no keys object', { current: 1 }],
  ])('rejects %s', (_name, input) => {
    expect(() => parseSecrets(input as never)).toThrow(expect.objectContaining({ code: 'ERR_IDEM_INVALID_SECRET' }))
  })

  it('accepts a 32-byte Buffer secret', () => {
    expect(parseSecrets({ current: 1, keys: { 1: Buffer.alloc(32, 7) } }).current).toBe(1)
  })
})

describe('storeKey', () => {
  it('lays out prefix, layout, digest version, operation code and digest', () => {
    expect(storeKey('app', 2, operationCode('POST /orders'), 'ab'.repeat(32))).toMatch(
      /^app:idem:1:d2:[0-9a-f]{8}:(ab){32}$/,
    )
  })

  it('gives different operations different codes', () => {
    expect(operationCode('POST /orders')).not.toBe(operationCode('POST /refunds'))
  })
})
