import { describe, expect, it } from 'vitest'
import { fingerprint, isJsonMediaType, mediaType } from '../../src/core/fingerprint.js'

const base = { method: 'POST', path: '/orders', query: '', contentType: 'application/json' }

describe('fingerprint', () => {
  it('carries the algorithm version', () => {
    expect(fingerprint({ ...base, body: { json: {} } })).toMatch(/^f1:[0-9a-f]{64}$/)
  })

  it('ignores JSON key order and number spelling (RFC 8785)', () => {
    const a = fingerprint({ ...base, body: { json: JSON.parse('{"b": 1.0, "a": [1, {"y": 2, "x": 1e2}]}') } })
    const b = fingerprint({ ...base, body: { json: JSON.parse('{"a":[1,{"x":100,"y":2}],"b":1}') } })

    expect(a).toBe(b)
  })

  it('changes with method, path, query, media type and body', () => {
    const one = fingerprint({ ...base, body: { json: { a: 1 } } })

    expect(fingerprint({ ...base, method: 'PUT', body: { json: { a: 1 } } })).not.toBe(one)
    expect(fingerprint({ ...base, path: '/orders/2', body: { json: { a: 1 } } })).not.toBe(one)
    expect(fingerprint({ ...base, query: 'x=1', body: { json: { a: 1 } } })).not.toBe(one)
    expect(
      fingerprint({ ...base, contentType: 'application/x-www-form-urlencoded', body: { json: { a: 1 } } }),
    ).not.toBe(one)
    expect(fingerprint({ ...base, body: { json: { a: 2 } } })).not.toBe(one)
  })

  it('treats the method case-insensitively and ignores content-type parameters', () => {
    const a = fingerprint({
      ...base,
      method: 'post',
      contentType: 'Application/JSON; charset=utf-8',
      body: { json: 1 },
    })

    expect(a).toBe(fingerprint({ ...base, body: { json: 1 } }))
  })

  it('tells a JSON body from the same text as bytes, and no body from an empty one', () => {
    expect(fingerprint({ ...base, body: { json: 'x' } })).not.toBe(fingerprint({ ...base, body: { bytes: '"x"' } }))
    expect(fingerprint({ ...base })).not.toBe(fingerprint({ ...base, body: { bytes: '' } }))
  })

  it('hashes text and the same UTF-8 bytes alike', () => {
    expect(fingerprint({ ...base, body: { bytes: 'héllo' } })).toBe(
      fingerprint({ ...base, body: { bytes: Buffer.from('héllo') } }),
    )
  })

  it('rejects a JSON body that cannot be canonicalised', () => {
    expect(() => fingerprint({ ...base, body: { json: { n: 10n } } })).toThrow(
      expect.objectContaining({ code: 'ERR_IDEM_INVALID_ARGUMENT' }),
    )
  })
})

describe('mediaType', () => {
  it('lowercases and drops parameters', () => {
    expect(mediaType(' Text/Plain ; charset=UTF-8')).toBe('text/plain')
    expect(mediaType(undefined)).toBe('')
  })

  it('recognises JSON and +json types', () => {
    expect(isJsonMediaType('application/json')).toBe(true)
    expect(isJsonMediaType('application/problem+json')).toBe(true)
    expect(isJsonMediaType('text/json5')).toBe(false)
  })
})
