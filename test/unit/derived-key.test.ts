/**
 * Derived keys (docs/design.md §2): the HMAC construction, the two forms, and property tests of
 * determinism and separation over (secret version, principal, key, operation, name), and that
 * neither the raw key nor the principal shows in what is sent downstream.
 */
import { createHmac } from 'node:crypto'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { derivedKey, keyDeriver } from '../../src/core/derived-key.js'
import { encodeFields } from '../../src/core/encoding.js'
import { parseSecrets, type ScopeInput, scopeDigest } from '../../src/core/scope.js'
import { operationCode, scopeKeys, storeKey } from '../../src/core/store-key.js'

const S1 = 'a'.repeat(32)
const S2 = 'b'.repeat(48)
const secrets = parseSecrets({ current: 2, keys: { 1: S1, 2: S2 } })

/** The derived key of `name` for a scope, as a run on that scope's record under `version` derives it. */
function keyOf(scope: ScopeInput, name: string, version = 2, format?: 'uuid'): string {
  return derivedKey(secrets, version, scopeDigest(secrets, version, scope), name, format && { format })
}

const text = fc.string({ minLength: 0, maxLength: 40, unit: 'grapheme-composite' })
const scopes = fc.record({ principal: text, key: text, operation: text })
const names = fc.string({ minLength: 1, maxLength: 40, unit: 'grapheme-composite' })

describe('derivedKey', () => {
  const scope = { principal: 'alice', key: 'k-1', operation: 'POST /orders' }

  it('is the HMAC-SHA256 of the injective encoding of version, scope digest and name, as base64url', () => {
    const digest = scopeDigest(secrets, 2, scope)
    const expected = createHmac('sha256', S2)
      .update(encodeFields(['idem-derived', '2', digest, 'charge']))
      .digest('base64url')

    expect(keyOf(scope, 'charge')).toBe(expected)
    expect(expected).toMatch(/^[A-Za-z0-9_-]{43}$/)
  })

  it('as a UUID is version 8, variant 10, made of the same MAC', () => {
    const uuid = keyOf(scope, 'charge', 2, 'uuid')
    const mac = createHmac('sha256', S2)
      .update(encodeFields(['idem-derived', '2', scopeDigest(secrets, 2, scope), 'charge']))
      .digest('hex')

    expect(uuid).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
    expect(uuid.replaceAll('-', '').slice(0, 12)).toBe(mac.slice(0, 12))
    expect(uuid.replaceAll('-', '').slice(20)).toBe(mac.slice(20, 32))
  })

  it('is deterministic for (version, scope, name)', () => {
    fc.assert(
      fc.property(scopes, names, fc.constantFrom(1, 2), (s, name, version) => {
        expect(keyOf(s, name, version)).toBe(keyOf({ ...s }, `${name}`, version))
        expect(keyOf(s, name, version, 'uuid')).toBe(keyOf(s, name, version, 'uuid'))
      }),
    )
  })

  it('differs for another principal, key, operation, name or secret version', () => {
    fc.assert(
      fc.property(scopes, scopes, names, names, (a, b, nameA, nameB) => {
        fc.pre(a.principal !== b.principal || a.key !== b.key || a.operation !== b.operation || nameA !== nameB)
        expect(keyOf(a, nameA)).not.toBe(keyOf(b, nameB))
        expect(keyOf(a, nameA, 2, 'uuid')).not.toBe(keyOf(b, nameB, 2, 'uuid'))
      }),
    )
    fc.assert(
      fc.property(scopes, names, (s, name) => {
        expect(keyOf(s, name, 1)).not.toBe(keyOf(s, name, 2))
      }),
    )
  })

  it('cannot be forged by moving a separator between principal, key, operation and name', () => {
    const base = { principal: 'alice', key: 'x', operation: 'op' }

    expect(keyOf({ ...base, principal: 'alice:x', key: '' }, 'n')).not.toBe(keyOf(base, 'n'))
    expect(keyOf({ ...base, operation: 'op:n' }, 'm')).not.toBe(keyOf(base, 'n:m'))
  })

  it('shows neither the raw key nor the principal, and stays printable ASCII within 255 characters', () => {
    fc.assert(
      fc.property(
        fc.record({
          principal: fc.string({ minLength: 6, maxLength: 300 }),
          key: fc.string({ minLength: 6, maxLength: 255 }),
          operation: text,
        }),
        fc.string({ minLength: 1, maxLength: 1000 }),
        (s, name) => {
          for (const key of [keyOf(s, name), keyOf(s, name, 2, 'uuid')]) {
            expect(key.length).toBeLessThanOrEqual(255)
            expect(key).toMatch(/^[\x21-\x7e]+$/)
            expect(key.includes(s.principal)).toBe(false)
            expect(key.includes(s.key)).toBe(false)
          }
        },
      ),
    )
  })

  it('refuses a name that is not a non-empty string, and an unknown format', () => {
    const digest = scopeDigest(secrets, 2, scope)
    for (const name of ['', undefined, 7, null]) {
      expect(() => derivedKey(secrets, 2, digest, name as string)).toThrow(
        expect.objectContaining({
          code: 'ERR_IDEM_INVALID_ARGUMENT',
          message: expect.stringMatching(/keyFor\(name\)/),
        }),
      )
    }
    expect(() => derivedKey(secrets, 2, digest, 'charge', { format: 'hex' as 'uuid' })).toThrow(
      expect.objectContaining({ code: 'ERR_IDEM_INVALID_ARGUMENT' }),
    )
  })
})

describe('keyDeriver', () => {
  const scope = { principal: 'alice', key: 'k-1', operation: 'POST /orders' }
  const opcode = operationCode(scope.operation)

  it('derives under the version and digest of the store key it is given, a prefix with colons included', () => {
    for (const { version, digest, key } of scopeKeys('app:eu:1', secrets, opcode, scope)) {
      const keyFor = keyDeriver(secrets, key)

      expect(keyFor('charge')).toBe(derivedKey(secrets, version, digest, 'charge'))
      expect(keyFor('charge', { format: 'uuid' })).toBe(
        derivedKey(secrets, version, digest, 'charge', { format: 'uuid' }),
      )
      expect(keyFor('charge')).toBe(keyFor('charge'))
    }
    const [current, older] = scopeKeys('idem', secrets, opcode, scope)
    expect(keyDeriver(secrets, current?.key as string)('charge')).not.toBe(
      keyDeriver(secrets, older?.key as string)('charge'),
    )
  })

  it('does not depend on the store prefix', () => {
    const digest = scopeDigest(secrets, 2, scope)

    expect(keyDeriver(secrets, storeKey('a', 2, opcode, digest))('x')).toBe(
      keyDeriver(secrets, storeKey('b', 2, opcode, digest))('x'),
    )
  })

  it('refuses a key that is not a store key, and a version with no secret', () => {
    expect(() => keyDeriver(secrets, 'orders:123')).toThrow(
      expect.objectContaining({ code: 'ERR_IDEM_INVALID_ARGUMENT' }),
    )
    const digest = scopeDigest(secrets, 2, scope)
    expect(() => keyDeriver(secrets, storeKey('idem', 9, opcode, digest))('x')).toThrow(
      expect.objectContaining({ code: 'ERR_IDEM_INVALID_SECRET' }),
    )
  })
})
